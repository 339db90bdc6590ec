"""Programmatic dependent launch (compute capability 9.0+): every kernel waits for the one
ahead of it before touching what it may have written, so a chain of launches that each read
what the previous ones wrote gives the bits it gives with the host waiting for every launch,
eagerly and replayed from a CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn._cuda import runtime
from flashgnn._cuda import spmm as cuda_spmm
from flashgnn._cuda.sources import SOURCES
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import sddmm, spmm
from tests.helpers import GPU, mebcrs_of, random_csr

pytestmark = GPU


@pytest.fixture(autouse=True)
def dependent_launches(monkeypatch):
    """Every launch of these tests as a programmatic dependent (where the device has it),
    whatever FLASHGNN_DEPENDENT_LAUNCH says."""
    monkeypatch.setattr(runtime, "DEPENDENT_LAUNCH", True)
    runtime._kernel_on.cache_clear()
    yield
    runtime._kernel_on.cache_clear()


LINKS = 20  # links of four launches in a chain


def averaging_matrix(rng: np.random.Generator) -> MEBCRS:
    """A on the GPU: 3000 x 3000, about 12 random in-edges a row plus a hub row of 2500 (split
    over segments), each row's values summing to 1, so that repeated products stay bounded."""
    m = random_csr(3000, 3000, 0.004, rng).tolil()
    m[7, rng.choice(3000, 2500, replace=False)] = 1.0
    m = sp.csr_matrix(m)
    m.sort_indices()
    counts = np.diff(m.indptr)
    m.data = np.repeat(1.0 / np.maximum(counts, 1), counts)
    return mebcrs_of(m, 8, "cuda")


def chain(a: MEBCRS, x: torch.Tensor, precision: str, wait: bool) -> list[torch.Tensor]:
    """x, then per link h = A h twice, v = (h h^T) on A's pattern and A_v h (A with values v):
    every launch after the first reads what the one just before it wrote (and, from the second
    call on a pattern, stages its columns before waiting for it); with ``wait`` the host waits
    for each op before the next."""
    done = torch.cuda.synchronize if wait else (lambda: None)
    out, h = [x], x
    for _ in range(LINKS):
        for _ in range(2):
            h = spmm(a, h, precision)
            done()
        v = sddmm(a, h, h, precision)
        done()
        out += [h, v, spmm(a, h, precision, values=v)]
        done()
    return out


@pytest.mark.parametrize(
    "precision,dtype",
    [
        ("fp16", torch.float16),
        ("bf16", torch.bfloat16),
        ("tf32", torch.float32),
        ("fp32", torch.float32),
    ],
)
def test_chained_launches_read_their_predecessors_writes(precision, dtype, rng):
    a = averaging_matrix(rng)
    x = torch.randn(3000, 64, device="cuda").to(dtype)
    expected = chain(a, x, precision, wait=True)
    got = chain(a, x, precision, wait=False)
    assert a.values.dtype == torch.float32 and not torch.isnan(expected[-1]).any()
    for i, (g, e) in enumerate(zip(got, expected)):
        assert torch.equal(g, e), (
            f"output {i} of the chain differs from the one made after a host wait"
        )
    assert expected[-1].abs().max() > 0.01  # the chain carries values to its end

    static = x.clone()
    graph = torch.cuda.CUDAGraph()
    chain(a, static, precision, wait=False)  # warm-up outside the capture (segments, workspaces)
    with torch.cuda.graph(graph):
        captured = chain(a, static, precision, wait=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[-1], expected[-1])


def test_values_changed_in_place_just_before_a_launch_are_seen(rng):
    """Values an earlier launch has read are staged before the wait (the preamble); scaled in
    place by the kernel just ahead of the next SpMM, they are staged after it, and the product
    is the one of a fresh copy of the new values. (Not "twice the first product": about 30 of
    these fp16 outputs are subnormal, where rounding 2s differs from doubling the rounded s.)"""
    a = averaging_matrix(rng)
    h = torch.randn(3000, 64, device="cuda").half()
    values = a.values.clone()
    first = spmm(a, h, "fp16", values=values)
    seg = cuda_spmm.segments_for(a.row_ptr, cuda_spmm.work_split(64, a.n_vectors)[0], a.col_idx)
    name = cuda_spmm._kernel_name(
        "fp16", 8, torch.float16, cuda_spmm.lane_features(64, a.n_vectors, "fp16")
    )
    dependent = cuda_spmm.launched_dependent(cuda_spmm.SOURCE, name, h.device)
    staged_early = cuda_spmm.PATTERN_AND_VALUES if dependent else cuda_spmm.NO_PREAMBLE
    assert cuda_spmm.preamble_for(seg, values, dependent) == staged_early
    assert torch.equal(spmm(a, h, "fp16", values=values), first)
    values.mul_(2.0)
    staged_late = cuda_spmm.PATTERN if dependent else cuda_spmm.NO_PREAMBLE
    assert cuda_spmm.preamble_for(seg, values, dependent) == staged_late
    scaled = spmm(a, h, "fp16", values=values)
    torch.cuda.synchronize()
    assert torch.equal(scaled, spmm(a, h, "fp16", values=values.clone()))
    assert not torch.equal(scaled, first)


def test_launch_mode_follows_the_device():
    """Every registered source's kernels wait for their predecessor, and, when dependent launch
    is on, they are launched as programmatic dependents exactly on compute capability 9.0+."""
    assert all(src.waits_for_previous_kernel for src in SOURCES.values())
    index = torch.cuda.current_device()
    name = cuda_spmm._kernel_name("fp16", 8, torch.float16, 4)
    _, dependent = runtime._kernel_on(cuda_spmm.SOURCE, name, index)
    capable = torch.cuda.get_device_capability(index) >= runtime.DEPENDENT_LAUNCH_CAPABILITY
    assert dependent == (capable and runtime.DEPENDENT_LAUNCH)
