"""NVRTC compilation through cuda.core. Needs no GPU: the architecture is named."""

from __future__ import annotations

import hashlib
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
    """Compile ``src`` for ``arch`` (e.g. "sm_90") into a cubin, through the disk cache."""
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"architecture must look like 'sm_90', got {arch!r}")
    cc = _import_cuda_core()
    key_text = "|".join(
        [src.file, src.digest(), arch, OPTIONS_VERSION, nvrtc_version(), *src.name_expressions]
    )
    digest = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    key = f"{src.file.removesuffix('.cu')}-{arch}-{digest}"
    if use_cache:
        hit = cache.load(key)
        if hit is not None:
            cubin, meta = hit
            return Compiled(cubin, meta["symbols"], meta["log"])
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
    cache.store(key, result.cubin, {"symbols": symbols, "log": result.log})
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
