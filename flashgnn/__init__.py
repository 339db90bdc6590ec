"""flashgnn: graph neural networks on tensor cores (FlashSparse ME-BCRS kernels)."""

from . import nn, ops, prune
from .formats.mebcrs import MEBCRS
from .graph import Graph
from .nn.sparse_linear import sparsify
from .precision_context import get_precision, precision
from .sampling import NeighborSampler

__version__ = "0.1.0"

__all__ = [
    "MEBCRS",
    "Graph",
    "NeighborSampler",
    "nn",
    "ops",
    "prune",
    "sparsify",
    "precision",
    "get_precision",
    "__version__",
]


def _expose_source_tree_models() -> None:
    """Installed, ``flashgnn.models`` is the repository's ``models/`` (setup.py's package_dir);
    run from a source tree, register the same folder under that name."""
    import importlib.abc
    import importlib.util
    import sys
    from pathlib import Path

    if importlib.util.find_spec(__name__ + ".models") is not None:
        return
    folder = Path(__file__).resolve().parents[1] / "models"
    if not (folder / "__init__.py").is_file():
        return

    class _ModelsFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname != __name__ + ".models":
                return None
            return importlib.util.spec_from_file_location(
                fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
            )

    sys.meta_path.append(_ModelsFinder())


_expose_source_tree_models()
