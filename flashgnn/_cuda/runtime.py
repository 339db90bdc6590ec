"""Loading compiled kernels on the current device and launching them on the current torch
stream."""
from __future__ import annotations

import functools
import threading

import numpy as np
import torch

from .compiler import _import_cuda_core, compile_source
from .sources import KernelSource

MIN_CAPABILITY = (8, 0)


def require_device(device: torch.device) -> int:
    """Index of a usable CUDA device, or a clear error."""
    if not torch.cuda.is_available():
        raise RuntimeError("flashgnn: no CUDA device is available (no GPU, or no driver); use CPU tensors")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _checked_index(index)


@functools.lru_cache(maxsize=None)
def _checked_index(index: int) -> int:
    cap = torch.cuda.get_device_capability(index)
    if cap < MIN_CAPABILITY:
        raise RuntimeError(
            f"flashgnn: {torch.cuda.get_device_name(index)} has compute capability {cap[0]}.{cap[1]}; "
            "the tensor-core kernels need 8.0 or newer (Ampere, Ada, Hopper)"
        )
    return index


_thread = threading.local()


def _device(index: int):
    """cuda.core's Device ``index``, its primary context made current in this thread (autograd
    runs backward in threads of its own, where torch's runtime calls leave none current)."""
    if getattr(_thread, "index", None) != index:
        dev = _import_cuda_core().Device(index)
        dev.set_current()
        _thread.index, _thread.device = index, dev
    return _thread.device


@functools.lru_cache(maxsize=None)
def _module(src: KernelSource, index: int):
    cc = _import_cuda_core()
    dev = _device(index)
    major, minor = dev.compute_capability
    compiled = compile_source(src, f"sm_{major}{minor}")
    symbols = {name: mangled.encode() for name, mangled in compiled.symbols.items()}
    return cc.ObjectCode.from_cubin(compiled.cubin, symbol_mapping=symbols)


@functools.lru_cache(maxsize=None)
def kernel(src: KernelSource, name: str, index: int):
    """The kernel ``name`` (a declared name expression of ``src``) on device ``index``."""
    return _module(src, index).get_kernel(name)


class _StreamHandle:
    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@functools.lru_cache(maxsize=64)
def _stream(index: int, handle: int):
    return _device(index).create_stream(_StreamHandle(handle))


def ptr(t: torch.Tensor) -> np.uint64:
    """A tensor's device address as a kernel argument."""
    return np.uint64(t.data_ptr())


@functools.lru_cache(maxsize=4096)
def _config(grid: tuple, block: tuple, shmem: int):
    return _import_cuda_core().LaunchConfig(grid=grid, block=block, shmem_size=shmem)


def current_stream(device: torch.device) -> int:
    """The raw handle of torch's current stream on ``device``."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch._C._cuda_getCurrentRawStream(index)


def launch(src: KernelSource, name: str, device: torch.device, grid: tuple, block: tuple, *args,
           shmem: int = 0) -> None:
    """Launch ``name`` from ``src`` on the current torch stream of ``device``.
    Arguments must be numpy scalars (np.int32, np.int64, np.float32, np.uint64 from ptr())."""
    index = device.index
    if index is None:
        index = torch.cuda.current_device()
    k = _kernel_on(src, name, index)
    _device(index)  # current in this thread (autograd's backward threads included)
    stream = _stream(index, torch._C._cuda_getCurrentRawStream(index))
    _import_cuda_core().launch(stream, _config(grid, block, shmem), k, *args)


@functools.lru_cache(maxsize=None)
def _kernel_on(src: KernelSource, name: str, index: int):
    """``kernel`` after the device checks of ``require_device``; cached, as the launch path
    runs it on every call."""
    require_device(torch.device("cuda", index))
    return kernel(src, name, index)
