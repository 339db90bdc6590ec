"""flashgnn: graph neural networks on tensor cores (FlashSparse ME-BCRS kernels)."""
from . import ops
from .format import MEBCRS

__version__ = "0.1.0"

__all__ = ["MEBCRS", "ops", "__version__"]
