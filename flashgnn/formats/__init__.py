"""Sparse matrix formats: the arrays of each layout, built from CSR (on the CPU by vectorised
torch, on a GPU by the builder ``flashgnn.ops`` registers), read back with ``to_csr()``, and
checked strictly. The products on them live in ``flashgnn.ops``, one module per format.

- ``MEBCRS``: FlashSparse's 8x1 column vectors in windows of 8 rows (docs/FORMAT.md).
- ``Blocked16``: the 16x1 blocked baseline it improves on, kept for the ablation.
- ``CVSE``: Chen et al.'s column-vector sparse encoding, V x 1 vectors (V = 2, 4, 8) in strips.
- ``TCACSR``: plain CSR with TCA-SpMM's per-warp schedule (tensor cores by the trace construction).
- ``GCOO``: GCOOSpDM's grouped COO, strips of p rows sorted by column (the fp32 CUDA-core SpMM).
- ``HBELL``: hybrid blocked ELL, 16 x 16 blocks stored dense or as ELL by how full they are.
"""

from .blocked16 import Blocked16
from .cvse import CVSE
from .gcoo import GCOO
from .hbell import HBELL
from .mebcrs import MEBCRS
from .tca import TCACSR

__all__ = ["MEBCRS", "Blocked16", "CVSE", "TCACSR", "GCOO", "HBELL"]
