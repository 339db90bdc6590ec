"""The pattern-nnz memo that the launch rules read (``flashgnn.pattern_nnz``: the formats
write it, so it lives below both them and the launchers)."""
from ..pattern_nnz import pattern_nnz

__all__ = ["pattern_nnz"]
