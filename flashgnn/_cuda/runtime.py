"""Loading compiled kernels on the current device and launching them on the current torch
stream."""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import threading

import torch

from .._torch_private import current_raw_stream
from .compiler import _import_cuda_core, compile_source
from .params import MAX_PARAMS, KernelParams
from .sources import KernelSource

MIN_CAPABILITY = (8, 0)
# Programmatic dependent launch: from compute capability 9.0, kernels whose source says they wait
# for the previous kernel (KernelSource.waits_for_previous_kernel) are launched with it;
# FLASHGNN_DEPENDENT_LAUNCH=0 turns it off (profiling, A/B timings).
DEPENDENT_LAUNCH_CAPABILITY = (9, 0)
DEPENDENT_LAUNCH = os.environ.get("FLASHGNN_DEPENDENT_LAUNCH", "1") != "0"
MAX_GRID_BLOCKS = (
    1 << 16
)  # grid-stride kernels: enough blocks to fill any GPU; threads loop over the rest


def stride_blocks(items: int, threads: int) -> tuple[int]:
    """Grid of a grid-stride kernel over ``items`` (>= 1) with ``threads`` per block: a thread
    per item, at most MAX_GRID_BLOCKS blocks."""
    return (min(-(-items // threads), MAX_GRID_BLOCKS),)


def warp_blocks(warps: int, warps_per_block: int) -> tuple[int]:
    """Grid of a kernel that gives each of ``warps`` work items a warp, ``warps_per_block``
    warps a block."""
    return (-(-warps // warps_per_block),)


def aligned16(*tensors: torch.Tensor) -> bool:
    """Whether every tensor's data starts on a 16-byte boundary (the kernels' vector loads)."""
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def require_device(device: torch.device) -> int:
    """Index of a usable CUDA device, or a clear error."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "flashgnn: no CUDA device is available (no GPU, or no driver); use CPU tensors"
        )
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _checked_index(index)


@functools.cache
def _checked_index(index: int) -> int:
    cap = torch.cuda.get_device_capability(index)
    if cap < MIN_CAPABILITY:
        raise RuntimeError(
            f"flashgnn: {torch.cuda.get_device_name(index)} has compute capability "
            f"{cap[0]}.{cap[1]}; "
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


@functools.cache
def _module(src: KernelSource, index: int):
    cc = _import_cuda_core()
    dev = _device(index)
    major, minor = dev.compute_capability
    compiled = compile_source(src, f"sm_{major}{minor}")
    symbols = {name: mangled.encode() for name, mangled in compiled.symbols.items()}
    return cc.ObjectCode.from_cubin(compiled.cubin, symbol_mapping=symbols)


@functools.cache
def kernel(src: KernelSource, name: str, index: int):
    """The kernel ``name`` (a declared name expression of ``src``) on device ``index``."""
    return _module(src, index).get_kernel(name)


DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory a kernel may take without opting in


@functools.cache
def shared_memory_limits(index: int) -> tuple[int, int]:
    """(the most shared memory one block may opt into, the shared memory of one SM) of device
    ``index``, in bytes."""
    props = _device(index).properties
    return props.max_shared_memory_per_block_optin, props.max_shared_memory_per_multiprocessor


_SHARED_ALLOWED: dict[tuple, int] = {}


def allow_shared_memory(src: KernelSource, name: str, device: torch.device, nbytes: int) -> None:
    """Let ``name`` of ``src`` launch on ``device`` with ``nbytes`` of dynamic shared memory:
    beyond DEFAULT_SHARED_BYTES a kernel must opt in (its attribute, set once per kernel,
    device and larger size)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (src, name, index)
    if nbytes <= _SHARED_ALLOWED.get(key, DEFAULT_SHARED_BYTES):
        return
    from cuda.bindings import driver

    _kernel_on(src, name, index)  # the device checks, the kernel loaded
    k = kernel(src, name, index)
    handle = k.handle if hasattr(k, "handle") else k._handle
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if isinstance(handle, driver.CUfunction):  # a module's function (older cuda.core)
        (err,) = driver.cuFuncSetAttribute(handle, attribute, nbytes)
    else:  # a library's kernel
        kernel_handle = driver.CUkernel(int(handle))
        (err,) = driver.cuKernelSetAttribute(
            attribute, nbytes, kernel_handle, driver.CUdevice(index)
        )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"flashgnn: {name} cannot take {nbytes} bytes of shared memory: {err!r}")
    _SHARED_ALLOWED[key] = nbytes


def ptr(t: torch.Tensor) -> int:
    """A tensor's device address as a kernel argument."""
    return t.data_ptr()


def operand(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as a kernel reads it: in ``dtype`` and contiguous; ``t`` itself, without a call
    into torch, when it already is (launchers run on every op call, on host-bound steps)."""
    if t.dtype == dtype and t.is_contiguous():
        return t
    return t.to(dtype).contiguous()


def current_stream(device: torch.device) -> int:
    """The raw handle of torch's current stream on ``device``."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return current_raw_stream(index)


class _Parameters(threading.local):
    """Per thread: a buffer of MAX_PARAMS 8-byte argument slots and the array of their
    addresses that cuLaunchKernel takes (it reads as many as the kernel has), and the launch
    configuration of dependent launches. The driver copies them during the call, so one of
    each serves every launch of the thread."""

    def __init__(self):
        self.data = ctypes.create_string_buffer(8 * MAX_PARAMS)
        base = ctypes.addressof(self.data)
        self.slots = (ctypes.c_void_p * MAX_PARAMS)(*(base + 8 * i for i in range(MAX_PARAMS)))
        self.address = ctypes.addressof(self.slots)
        self.config = None

    def packed(self, kernel: str, params: KernelParams, args: tuple) -> int:
        """The address of the slot array holding ``args`` packed by ``kernel``'s declared
        ``params``; a ValueError naming the kernel when they do not fit them."""
        try:
            params.struct.pack_into(self.data, 0, *args)
        except (struct.error, OverflowError) as e:
            raise params.mismatch(kernel, args, e) from None
        return self.address

    def dependent_config(self, grid: tuple, block: tuple, shmem: int, stream: int):
        """cuLaunchKernelEx's configuration: this grid, block, shared memory and stream, with
        programmatic stream serialisation allowed."""
        config = self.config
        if config is None:
            from cuda.bindings import driver

            attribute = driver.CUlaunchAttribute()
            attribute.id = (
                driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            )
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


def launch(
    src: KernelSource,
    name: str,
    device: torch.device,
    grid: tuple,
    block: tuple,
    *args,
    shmem: int = 0,
    stream: int | None = None,
) -> None:
    """Launch ``name`` from ``src`` on the current torch stream of ``device`` (``stream``: its
    raw handle, when the caller has already looked it up).

    ``args`` are the kernel's arguments in the order of its declaration (declarations.py, which
    a CPU test checks against the kernel's signature): device addresses (``ptr``, 0 for null)
    for pointers, Python integers (bools included) for integers, Python floats for floats. One
    ``struct`` pack by the declaration puts each into a little-endian 8-byte slot, of which the
    driver reads as many bytes as the parameter has, and refuses a wrong count, a float for an
    integer or an integer out of range (a ValueError naming the kernel and its parameters).
    Positional, not keyword arguments: a keyword launch builds a dict per call and looks every
    name up, and this path runs for every op on every call (where cuda.core's generic argument
    handling cost 10-20 us, this costs a few microseconds whatever the argument count)."""
    index = device.index
    if index is None:
        index = torch.cuda.current_device()
    function, dependent = _kernel_on(src, name, index)
    _device(index)  # current in this thread (autograd's backward threads included)
    grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    if stream is None:
        stream = current_raw_stream(index)
    params = _parameters.packed(name, src.params[name], args)
    cu_launch_kernel, cu_launch_kernel_ex, success = _launch_api()
    if dependent:
        (err,) = cu_launch_kernel_ex(
            _parameters.dependent_config(grid, block, shmem, stream), function, params, 0
        )
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


@functools.cache
def _kernel_on(src: KernelSource, name: str, index: int):
    """(``kernel`` as a CUfunction, whether it is launched as a programmatic dependent) after
    the device checks of ``require_device``; cached, as the launch path runs it on every call."""
    require_device(torch.device("cuda", index))
    from cuda.bindings import driver

    k = kernel(src, name, index)
    # a CUkernel (cuda.core >= 0.3 loads libraries) or a CUfunction: cuLaunchKernel takes both
    handle = k.handle if hasattr(k, "handle") else k._handle
    dependent = (
        DEPENDENT_LAUNCH
        and src.waits_for_previous_kernel
        and torch.cuda.get_device_capability(index) >= DEPENDENT_LAUNCH_CAPABILITY
    )
    return driver.CUfunction(int(handle)), dependent
