"""The precision of the sparse ops inside layers, set per layer or by a context.

``with flashgnn.precision("fp16"): model(graph, feat)`` makes every layer built with
``precision=None`` run its SpMM/SDDMM in fp16; the default is "fp32". The setting lives in a
``contextvars.ContextVar``, so it is local to the thread (and to the asyncio task). Dense
layers are not affected: their dtype is the caller's business (``torch.autocast``).
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

from .ops.precision import PRECISIONS, check_precision

_CURRENT = contextvars.ContextVar("flashgnn_precision", default="fp32")


@contextmanager
def precision(name: str):
    """Context manager (or decorator) running the sparse ops of layers whose own precision is
    None in ``name`` (one of "fp32", "tf32", "fp16", "bf16")."""
    token = _CURRENT.set(check_precision(name))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def get_precision() -> str:
    """The precision set by the innermost active ``precision(...)`` context, "fp32" outside."""
    return _CURRENT.get()


def resolve_precision(name: str | None) -> str:
    """``name`` when given (validated), else the context's precision."""
    return get_precision() if name is None else check_precision(name)


def block_width(name: str) -> int:
    """k, the vectors per tensor-core block of the ME-BCRS format ``name`` needs: 4 for tf32
    (mma m16n8k4), 8 otherwise."""
    return 4 if check_precision(name) == "tf32" else 8


__all__ = ["PRECISIONS", "precision", "get_precision", "resolve_precision", "block_width"]
