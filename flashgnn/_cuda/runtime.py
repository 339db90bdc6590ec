"""Loading compiled kernels on the current device and launching them on the current torch
stream."""
from __future__ import annotations

import ctypes
import functools
import os
import struct
import threading

import torch

from .compiler import _import_cuda_core, compile_source
from .sources import KernelSource

MIN_CAPABILITY = (8, 0)
# Programmatic dependent launch: from compute capability 9.0, kernels whose source says they wait
# for the previous kernel (KernelSource.waits_for_previous_kernel) are launched with it;
# FLASHGNN_DEPENDENT_LAUNCH=0 turns it off (profiling, A/B timings).
DEPENDENT_LAUNCH_CAPABILITY = (9, 0)
DEPENDENT_LAUNCH = os.environ.get("FLASHGNN_DEPENDENT_LAUNCH", "1") != "0"
MAX_GRID_BLOCKS = 1 << 16  # grid-stride kernels: enough blocks to fill any GPU; threads loop over the rest


def stride_blocks(items: int, threads: int) -> tuple[int]:
    """Grid of a grid-stride kernel over ``items`` (>= 1) with ``threads`` per block: a thread
    per item, at most MAX_GRID_BLOCKS blocks."""
    return (min(-(-items // threads), MAX_GRID_BLOCKS),)


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


def ptr(t: torch.Tensor) -> int:
    """A tensor's device address as a kernel argument."""
    return t.data_ptr()


def f32(x: float) -> int:
    """A float kernel argument as ``launch`` takes it: the bits of its float32 value (the low
    half of the argument's slot)."""
    return _F32_BITS.unpack(struct.pack("<f", x))[0]


_F32_BITS = struct.Struct("<i")


def operand(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as a kernel reads it: in ``dtype`` and contiguous; ``t`` itself, without a call
    into torch, when it already is (launchers run on every op call, on host-bound steps)."""
    if t.dtype == dtype and t.is_contiguous():
        return t
    return t.to(dtype).contiguous()


def current_stream(device: torch.device) -> int:
    """The raw handle of torch's current stream on ``device``."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch._C._cuda_getCurrentRawStream(index)


class _Parameters(threading.local):
    """Per thread: a buffer of 8-byte argument slots and the array of their addresses that
    cuLaunchKernel takes, per argument count, and the launch configuration of dependent
    launches. The driver copies both during the call, so one of each serves every launch of
    the thread."""

    def __init__(self):
        self.by_count = {}
        self.config = None

    def packed(self, args: tuple) -> int:
        hit = self.by_count.get(len(args))
        if hit is None:
            n = len(args)
            data = ctypes.create_string_buffer(8 * max(n, 1))
            slots = (ctypes.c_void_p * max(n, 1))(*(ctypes.addressof(data) + 8 * i for i in range(n)))
            hit = self.by_count[n] = (struct.Struct(f"<{n}q"), data, slots, ctypes.addressof(slots))
        hit[0].pack_into(hit[1], 0, *args)
        return hit[3]

    def dependent_config(self, grid: tuple, block: tuple, shmem: int, stream: int):
        """cuLaunchKernelEx's configuration: this grid, block, shared memory and stream, with
        programmatic stream serialisation allowed."""
        config = self.config
        if config is None:
            from cuda.bindings import driver

            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            config = self.config = driver.CUlaunchConfig()
            config.attrs = [attribute]
            config.numAttrs = 1
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = shmem
        config.hStream = stream
        return config


_parameters = _Parameters()


def launch(src: KernelSource, name: str, device: torch.device, grid: tuple, block: tuple, *args,
           shmem: int = 0, stream: int | None = None) -> None:
    """Launch ``name`` from ``src`` on the current torch stream of ``device`` (``stream``: its
    raw handle, when the caller has already looked it up).

    Arguments are Python integers (bools included): device addresses (``ptr``) and integer
    scalars, or float32 scalars as ``f32`` gives them. Each is packed into a little-endian
    8-byte slot and the driver reads as many bytes as the kernel's parameter has (an int32 is
    the slot's low half), so the kernel's signature gives each scalar its type (launchers pass
    values that fit it; wrapping them in numpy scalars cost about 0.7 us each) and the launch
    costs a few microseconds whatever the argument count: this path runs for every op on every
    call, where cuda.core's generic argument handling cost 10-20 us."""
    index = device.index
    if index is None:
        index = torch.cuda.current_device()
    function, dependent = _kernel_on(src, name, index)
    _device(index)  # current in this thread (autograd's backward threads included)
    grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    if stream is None:
        stream = torch._C._cuda_getCurrentRawStream(index)
    params = _parameters.packed(args)
    cu_launch_kernel, cu_launch_kernel_ex, success = _launch_api()
    if dependent:
        (err,) = cu_launch_kernel_ex(_parameters.dependent_config(grid, block, shmem, stream), function, params, 0)
    else:
        (err,) = cu_launch_kernel(function, *grid, *block, shmem, stream, params, 0)
    if err != success:
        raise RuntimeError(f"flashgnn: launching {name} failed: {err!r}")


def launched_dependent(src: KernelSource, name: str, device: torch.device) -> bool:
    """Whether ``launch`` starts ``name`` of ``src`` on ``device`` as a programmatic dependent
    (launchers pass kernels with a preamble whether to run it)."""
    if not DEPENDENT_LAUNCH:  # turned off: no lookup on the launch path
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _kernel_on(src, name, index)[1]


@functools.cache
def _launch_api():
    """(cuLaunchKernel, cuLaunchKernelEx, CUDA_SUCCESS) from cuda.bindings, imported at the
    first launch."""
    from cuda.bindings import driver
    return driver.cuLaunchKernel, driver.cuLaunchKernelEx, driver.CUresult.CUDA_SUCCESS


@functools.lru_cache(maxsize=None)
def _kernel_on(src: KernelSource, name: str, index: int):
    """(``kernel`` as a CUfunction, whether it is launched as a programmatic dependent) after
    the device checks of ``require_device``; cached, as the launch path runs it on every call."""
    require_device(torch.device("cuda", index))
    from cuda.bindings import driver

    k = kernel(src, name, index)
    # a CUkernel (cuda.core >= 0.3 loads libraries) or a CUfunction: cuLaunchKernel takes both
    handle = k.handle if hasattr(k, "handle") else k._handle
    dependent = (DEPENDENT_LAUNCH and src.waits_for_previous_kernel
                 and torch.cuda.get_device_capability(index) >= DEPENDENT_LAUNCH_CAPABILITY)
    return driver.CUfunction(int(handle)), dependent
