"""Shared by the scripts in benchmarks/: makes the checkout's ``flashgnn`` importable when a
script is run as ``python benchmarks/<name>.py`` without installing, and prepares their kernel
sources and operands (the benchmark logic and every timer live in ``flashgnn.benchmarking``,
so that ``flashgnn bench`` runs it from an installed package)."""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import functools  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import NamedTuple  # noqa: E402

import torch  # noqa: E402

from flashgnn._cuda.sources import KernelSource  # noqa: E402
from flashgnn.formats.mebcrs import MEBCRS  # noqa: E402

__all__ = ["REPO_ROOT", "FileSource", "GraphOperands", "graph_operands", "mebcrs_by_width"]


class FileSource(KernelSource):
    """A kernel source read from ``path`` (one version of a file of kernels/, or a benchmark's
    own), compiled under the checkout's headers as ``file``; KernelSource compares by identity,
    so each has its own compiled kernels."""

    def __init__(self, file: str, name_expressions, path: Path):
        super().__init__(file, tuple(name_expressions))
        object.__setattr__(self, "path", path)

    def text(self) -> str:
        return self.path.read_text()


class GraphOperands(NamedTuple):
    """A benchmark graph's CSR on the GPU: indptr and indices as loaded, values in [0.5, 1.5),
    the float32 CSR with int32 row offsets that the cuSPARSE baselines take, and the generator
    (seeded 0) that drew the values and draws the dense operands after them."""

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    csr: torch.Tensor
    gen: torch.Generator


def graph_operands(g, device: torch.device) -> GraphOperands:
    """``g`` (a flashgnn.benchmarking.graphs.BenchGraph) on ``device`` for the kernel scripts."""
    gen = torch.Generator(device).manual_seed(0)
    indptr = torch.from_numpy(g.indptr).to(device)
    indices = torch.from_numpy(g.indices).to(device)
    values = torch.rand(g.nnz, generator=gen, device=device) + 0.5
    csr = torch.sparse_csr_tensor(
        indptr.to(torch.int32), indices, values, (g.num_nodes, g.num_nodes)
    )
    return GraphOperands(indptr, indices, values, csr, gen)


def mebcrs_by_width(operands: GraphOperands) -> Callable[[int], MEBCRS]:
    """``k -> the ME-BCRS of block width k`` of the operands' CSR (values included), on their
    device, each built once."""
    n_cols = operands.csr.shape[1]

    @functools.cache
    def build(k: int) -> MEBCRS:
        return MEBCRS.from_csr(
            operands.indptr,
            operands.indices,
            operands.values,
            n_cols=n_cols,
            k=k,
            device=operands.indptr.device,
        )

    return build
