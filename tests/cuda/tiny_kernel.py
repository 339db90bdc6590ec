"""A small kernel source of the tests' own, so that compiler and cache tests compile in a
fraction of a second and do not depend on the project's kernels (fixtures: conftest.py)."""

from __future__ import annotations

import textwrap

from flashgnn._cuda.sources import KernelSource

ELF_MAGIC = b"\x7fELF"
TINY_HEADER = "#pragma once\n#define TINY_SCALE 2.0f\n"
TINY_SOURCE = textwrap.dedent("""\
    #include "tiny.cuh"
    template <typename T>
    __global__ void scale(T* x, long long n) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) x[i] *= T(TINY_SCALE);
    }
""")
TINY = KernelSource("tiny.cu", ("scale<float>", "scale<double>"))


def cubins(cache_dir) -> list:
    return sorted(cache_dir.glob("*.cubin"))
