"""Parts of a graph by METIS (through pymetis, an optional dependency)."""

from __future__ import annotations

import numpy as np
import torch

# nodes per METIS part: small enough that a part's rows share columns, large enough that
# METIS's k-way partitioning stays fast (its time grows with the number of parts)
METIS_PART_NODES = 64


def metis_parts(
    indptr: torch.Tensor, indices: torch.Tensor, part_nodes: int = METIS_PART_NODES
) -> torch.Tensor:
    """The METIS part of every node of a symmetric CSR without self-loops (int64 [n + 1],
    [m]), int64 [n] on its device, with about ``part_nodes`` nodes a part. ImportError naming
    the fix when pymetis is not installed."""
    try:
        import pymetis
    except ImportError as e:
        raise ImportError(
            "reorder method 'metis' needs pymetis: install the 'distributed' extra "
            "(pip install 'flashgnn[distributed]') or choose method 'rcm' or 'community'"
        ) from e
    n = indptr.numel() - 1
    parts = -(-n // part_nodes)
    if parts <= 1:
        return torch.zeros(n, dtype=torch.int64, device=indptr.device)
    _, membership = pymetis.part_graph(
        parts, xadj=indptr.cpu().numpy(), adjncy=indices.cpu().numpy()
    )
    return torch.as_tensor(np.asarray(membership, dtype=np.int64)).to(indptr.device)
