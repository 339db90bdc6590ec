"""NVRTC compilation through cuda.core. Needs no GPU: the architecture is named."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

from . import cache
from .sources import KernelSource, kernel_dir

OPTIONS_VERSION = "1"  # bump when the options below change


@dataclass
class Compiled:
    cubin: bytes
    symbols: dict[str, str]  # name expression -> mangled name
    log: str


def _import_cuda_core():
    try:
        import cuda.core as cc
    except ImportError as e:
        raise RuntimeError(
            "flashgnn's CUDA kernels need cuda-python: pip install 'flashgnn[cuda]' "
            "(cuda-core, cuda-bindings, nvidia-cuda-nvrtc)"
        ) from e
    return cc


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def compile_source(src: KernelSource, arch: str, use_cache: bool = True) -> Compiled:
    """Compile ``src`` for ``arch`` (e.g. "sm_90") into a cubin, through the disk cache: an entry
    that checks out (cache.py) is returned, anything else is compiled and written back
    (``use_cache=False`` compiles and writes without reading). Raises cache.UnsafeCacheDir for
    a cache folder that others can write to, before compiling anything."""
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"architecture must look like 'sm_90', got {arch!r}")
    cc = _import_cuda_core()
    folder = cache.open_dir()
    keyed = {
        "source": src.file,
        "source_sha256": src.digest(),
        "arch": arch,
        "options": OPTIONS_VERSION,
        "nvrtc": nvrtc_version(),
        "name_expressions": list(src.name_expressions),
    }
    key = f"{src.file.removesuffix('.cu')}-{arch}-{cache.digest(keyed)[:24]}"
    if use_cache and folder is not None:
        hit = cache.load(folder, key, keyed, src.name_expressions)
        if hit is not None:
            return Compiled(*hit)
    options = cc.ProgramOptions(
        name=src.file,
        arch=arch,
        std="c++17",
        include_path=[str(kernel_dir())],
        ptxas_options=["-v"],
        lineinfo=True,
    )
    log = io.StringIO()
    try:
        program = cc.Program(src.text(), "c++", options)
        obj = program.compile("cubin", name_expressions=src.name_expressions, logs=log)
    except Exception as e:
        raise RuntimeError(
            f"NVRTC failed to compile {src.file} for {arch}:\n{e}\n{log.getvalue()}"
        ) from e
    symbols = {
        k: (v.decode() if isinstance(v, bytes) else v) for k, v in obj.symbol_mapping.items()
    }
    result = Compiled(bytes(obj.code), symbols, log.getvalue())
    if folder is not None:
        cache.store(folder, key, keyed, result.cubin, result.symbols, result.log)
    return result


@dataclass
class Resources:
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int


def resources_by_symbol(log: str) -> dict[str, Resources]:
    """Registers, spills and stack frame per mangled kernel name, read from ptxas -v output."""
    out: dict[str, Resources] = {}
    current = None
    frame = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
        )
        if m and current:
            frame = tuple(int(g) for g in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current and frame:
            out[current] = Resources(int(m.group(1)), frame[1], frame[2], frame[0])
            current = frame = None
    return out
