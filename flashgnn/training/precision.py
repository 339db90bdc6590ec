"""One precision name for a whole training step: the sparse ops and the dense matmuls.

fp32: everything in fp32 (TF32 switched off on CUDA). tf32: sparse ops in tf32; dense
matmuls through TF32 tensor cores on CUDA (``torch.backends.cuda.matmul.allow_tf32``), fp32
on the CPU, which has no TF32. fp16 / bf16: sparse ops in that type; dense layers under
``torch.autocast`` on CUDA. On the CPU, where half-precision GEMMs are several times slower
than fp32 ones, the dense matmuls are emulated instead: inputs and output rounded to the
type, products accumulated in fp32, which is what tensor cores compute. Weights stay fp32
(master weights); fp16 adds loss scaling (``GradScaler``), which bf16 does not need.

On CUDA a backward started inside the scope runs on the calling thread
(``torch.autograd.set_multithreading_enabled(False)``, thread-local) instead of autograd's
worker thread for the device: a one-device step gains nothing from that thread and pays two
hand-overs to it and back, which on a host-bound step (a layer on a graph of a few hundred
thousand edges) cost a third of the step (docs/TUNING.md). A model spread over
several GPUs of one process would lose the overlap of their backward threads inside the scope.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..precision_context import precision as sparse_precision

_HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
_MATMULS = {
    torch.matmul,
    torch.mm,
    torch.addmm,
    torch.bmm,
    torch.baddbmm,
    F.linear,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.Tensor.__rmatmul__,
    torch.Tensor.mm,
}


class RoundedMatmuls(TorchFunctionMode):
    """Emulate half-precision matmuls in fp32: every float32 input and the output of a
    matmul-like call is rounded to ``dtype`` (the values stay float32 tensors). Backward
    passes run in fp32."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def _round(self, t):
        if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
            return t.to(self.dtype).to(torch.float32)
        return t

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _MATMULS:
            return func(*args, **kwargs)
        # matmul-like calls take their tensors flat, as arguments or keywords
        args = tuple(map(self._round, args))
        kwargs = {name: self._round(value) for name, value in kwargs.items()}
        return self._round(func(*args, **kwargs))


def dense_precision(precision: str, device: torch.device) -> str:
    """What the dense matmuls actually run in on ``device`` under ``precision``."""
    if device.type == "cuda":
        return precision
    if precision in _HALF:
        return f"{precision} (emulated: fp32 products of {precision}-rounded values)"
    return "fp32"


@contextlib.contextmanager
def precision_scope(precision: str, device: torch.device):
    """Run the enclosed forward and backward in ``precision`` (see the module doc); on CUDA
    a backward started inside runs on the calling thread."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(sparse_precision(precision))
        if device.type == "cuda":
            stack.enter_context(torch.autograd.set_multithreading_enabled(False))
            if precision in _HALF:
                stack.enter_context(torch.autocast("cuda", dtype=_HALF[precision]))
            saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            stack.callback(_set_tf32, *saved)
            _set_tf32(precision == "tf32", precision == "tf32")
        elif precision in _HALF:
            stack.enter_context(RoundedMatmuls(_HALF[precision]))
        yield


def _set_tf32(matmul: bool, cudnn: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling for fp16 (a disabled scaler otherwise, which passes gradients through)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
