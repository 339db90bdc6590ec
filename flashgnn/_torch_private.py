"""The private torch APIs flashgnn relies on, each behind one function, where no public API
does the job. ``tests/cuda/test_torch_private.py`` checks each against the installed torch, so that
a torch that changes or drops one fails there, by name, rather than deep inside a layer or a
benchmark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.utils import _python_dispatch


def storage_use_counter(storage: torch.UntypedStorage) -> Callable[[], int]:
    """A function returning how many references ``storage``'s memory (its StorageImpl) has at
    the time of the call: one per tensor on it (``detach()`` aliases and views included, those
    autograd saves or keeps as ``.grad`` too) and one per Python storage object.

    Nothing public tells whether other tensors share a tensor's memory: ``sys.getrefcount``
    and weak references count Python objects, not the tensors made from them nor those held
    on the C++ side. torch's own CUDA-graph trees ask ``torch._C._storage_Use_Count`` for the
    same reason. The function reads ``storage``'s address once (this call is off the hot path,
    the counter is on it) and is valid while ``storage`` lives: keep it."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        raise RuntimeError(
            f"torch {torch.__version__} has no torch._C._storage_Use_Count: "
            "flashgnn cannot tell whether a replayed layer's buffers are held "
            "elsewhere"
        )
    return functools.partial(count, storage._cdata)


def gpu_sleep(cycles: int) -> None:
    """Queue on the current CUDA stream a kernel that spins for about ``cycles`` clock cycles
    (``torch.cuda._sleep``). The timers use it to keep the GPU busy while the host prepares a
    timed call; torch has no public kernel that only waits."""
    torch.cuda._sleep(cycles)


def current_raw_stream(device_index: int) -> int:
    """The raw ``cudaStream_t`` handle of torch's current stream on ``device_index``
    (``torch._C._cuda_getCurrentRawStream``). The launch path needs it on every kernel launch;
    ``torch.cuda.current_stream(i).cuda_stream`` gives the same number through a Python
    ``Stream`` object, several times the cost. CUDA builds of torch only."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def dispatch_mode_active() -> bool:
    """Whether a Python dispatch mode (make_fx, AOTAutograd's tracing, fake tensors) is active
    on this thread (``torch.utils._python_dispatch._get_current_dispatch_mode``): ops must then
    go through the dispatcher. torch has no public query for it."""
    return _python_dispatch._get_current_dispatch_mode() is not None
