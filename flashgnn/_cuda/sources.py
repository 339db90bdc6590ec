"""Where the CUDA C++ sources live, and what they must be compiled into."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .declarations import DECLARED
from .params import KernelParams
from .signatures import header_macros, kernel_signatures


def kernel_dir() -> Path:
    """The folder of kernels/*.cu: installed as package data ``flashgnn.kernels``, or the
    repository's ``kernels/`` when running from a source tree."""
    try:
        path = Path(str(resources.files("flashgnn.kernels")))
        if (path / "common.cuh").is_file():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "kernels"


@dataclass(frozen=True, eq=False)
class KernelSource:
    """One .cu file and the kernel instantiations (NVRTC name expressions) taken from it.
    Compared and hashed by identity (``register`` makes one per file): the launch path looks
    kernels up by it on every call."""

    file: str
    name_expressions: tuple[str, ...]

    def text(self) -> str:
        return (kernel_dir() / self.file).read_text()

    @functools.cached_property
    def waits_for_previous_kernel(self) -> bool:
        """Whether every kernel of the file begins with ``wait_for_previous_kernel()``
        (common.cuh), so that the runtime may launch them with programmatic dependent launch."""
        return kernels_wait_first(self.text())

    @functools.cached_property
    def params(self) -> dict[str, KernelParams]:
        """Name expression -> the parameters its kernel declares (declarations.py, by the
        kernel's name without namespace and template arguments). A file declarations.py does
        not know (a benchmark's own kernels) is declared by its text, as the signature reader
        sees it."""
        declared = DECLARED.get(self.file)
        if declared is None:
            read = kernel_signatures(self.text(), header_macros(kernel_dir()))
            declared = {kernel: KernelParams(*params) for kernel, params in read.items()}
        out = {}
        for expression in self.name_expressions:
            kernel = expression.split("<", 1)[0].rsplit("::", 1)[-1].strip()
            if kernel not in declared:
                raise ValueError(
                    f"{self.file}: {expression} has no declared parameters "
                    "(flashgnn/_cuda/declarations.py)"
                )
            out[expression] = declared[kernel]
        return out

    def digest(self) -> str:
        """Hash of the source and of every header beside it."""
        h = hashlib.sha256(self.text().encode())
        for header in sorted(kernel_dir().glob("*.cuh")):
            h.update(header.name.encode())
            h.update(header.read_bytes())
        return h.hexdigest()


_KERNEL_HEAD = re.compile(r"__global__[^{]*\{\s*(fg::)?wait_for_previous_kernel\([^;]*\);")


def kernels_wait_first(text: str) -> bool:
    """Whether ``text`` has kernels and every one's body begins with
    ``wait_for_previous_kernel(...);`` (with a preamble flag, the kernel's first wait may come
    later: common.cuh)."""
    kernels = text.count("__global__")
    return kernels > 0 and len(_KERNEL_HEAD.findall(text)) == kernels


SOURCES: dict[str, KernelSource] = {}


def register(file: str, name_expressions) -> KernelSource:
    """Declare the instantiations of a source, each of a kernel whose parameters
    declarations.py declares; ``python -m flashgnn.cuda --check`` compiles every declared
    source."""
    src = KernelSource(file, tuple(name_expressions))
    src.params  # resolved here: a kernel without a declaration fails on import, not at launch
    SOURCES[file] = src
    return src
