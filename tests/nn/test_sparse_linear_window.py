"""The window kernel's plans (flashgnn/_cuda/sparse_linear.py, kernels/sparse_linear.cu's
sparse_linear_window) on the CPU: what the kernel computes from a plan, emulated with torch
(the chunk ring, the row codes, the B fragments), against F.linear in float64; the plan's
structure, its residue spread, the chunk rows rule, the records cache and the selection rule."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from flashgnn._cuda import sparse_linear as launcher
from flashgnn.nn import SparseLinear
from tests.nn.test_sparse_linear import add_strips, b_fragments, step_lists

SHAPES = launcher.WINDOW_SHAPES


def emulate_window_plan(plan, values, x, n_out, vector):
    """Y^T the kernel computes from a window plan, by torch: window w's ring holds chunk c in
    slot c % 3; each step's 16 lanes decode their row codes as the kernel does, gather rows of
    x^T from the slots (zero rows for codes >= 2U) and multiply by the step's B fragments."""
    u = plan.chunk_rows
    n_tokens, n_in = x.shape
    shape = plan.shape
    steps = plan.rows.shape[0]
    b = b_fragments(plan, values, steps)
    lists = step_lists(plan)
    per_block, per_warp = shape.block_strips, shape.warp_strips
    j = lists % per_warp
    warp = lists // per_warp % shape.warps
    window = lists // per_block % plan.n_chunks
    group = lists // (per_block * plan.n_chunks)
    strip = group * per_block + warp * per_warp + j
    code = plan.rows.long() & 0xFFFF
    ring = code + (window % 3 * u)[:, None]
    ring = torch.where(code >= 2 * u, code + u, torch.where(ring >= 3 * u, ring - 3 * u, ring))
    zero = ring >= 3 * u
    assert (ring < 3 * u + 8).all()
    slot = ring // u
    first = slot == (window % 3)[:, None]
    assert (first | (slot == ((window + 1) % 3)[:, None]) | zero).all()  # chunks w and w + 1
    feature = torch.where(first, window[:, None], window[:, None] + 1) * u + ring % u
    assert (feature[~zero] < n_in).all()
    xt = torch.cat([x.t(), x.new_zeros(1, n_tokens)])
    a = xt[torch.where(zero, n_in, feature)]  # [step, 16, tokens]
    yt = torch.zeros(plan.n_groups * per_block * vector, n_tokens, dtype=values.dtype)
    return add_strips(yt, a, b, strip, vector)[:n_out]


def wavefronts(plan) -> float:
    """The mean bank wavefronts of an 8-row ldmatrix phase: the most rows of one residue."""
    residues = (plan.rows.long() & 7).view(-1, 8)
    return torch.nn.functional.one_hot(residues, 8).sum(1).max(1).values.float().mean().item()


@pytest.mark.parametrize("steps", launcher.STEP_MODES)
@pytest.mark.parametrize(
    "n_in, n_out, vector, sparsity, shape, chunk_rows",
    [
        (300, 37, 8, 0.5, SHAPES[0], 32),
        (600, 700, 8, 0.9, SHAPES[1], 64),
        (130, 515, 4, 0.7, SHAPES[2], 32),
        (1030, 90, 2, 0.95, SHAPES[3], 96),
        (7, 9, 8, 0.0, SHAPES[4], 32),
        (999, 1100, 8, 0.8, SHAPES[2], 128),
    ],
)
def test_window_plan_computes_the_product(n_in, n_out, vector, sparsity, shape, chunk_rows, steps):
    torch.manual_seed(0)
    layer = SparseLinear(n_in, n_out, sparsity=sparsity, vector=vector).double()
    plan = launcher.build_window_plan(
        layer.row_ptr, layer.col_idx, n_in, vector, shape, chunk_rows, steps
    )
    assert plan.n_chunks == -(-n_in // chunk_rows)
    assert plan.offs.numel() == plan.n_groups * shape.block_strips * plan.n_chunks + 1
    real = int((plan.frag_index < layer.values.numel()).sum())
    assert real == vector * layer.n_vectors  # every slot of W once
    per_window = (plan.offs[1:] - plan.offs[:-1]).view(-1, shape.block_strips).sum(1)
    assert plan.cap == int(per_window.max())
    codes = plan.rows.long() & 0xFFFF
    assert (
        (codes < 2 * chunk_rows) | ((codes >= 2 * chunk_rows) & (codes < 2 * chunk_rows + 8))
    ).all()
    if steps == "chunk":
        assert (codes[codes < 2 * chunk_rows] < chunk_rows).all()  # one chunk a step
    x = torch.randn(13, n_in, dtype=torch.float64)
    yt = emulate_window_plan(plan, layer.values.detach(), x, n_out, vector)
    torch.testing.assert_close(yt.t(), F.linear(x, layer.weight.detach()), rtol=1e-10, atol=1e-10)


def test_window_steps_fill_and_balance():
    """At 90% sparsity with chunks of about 13 of a strip's vectors: filling steps from the next
    chunk leaves little padding, and taking only vectors that keep residues distinct spreads
    them over the banks better than either chunk-local lists or plain filling."""
    torch.manual_seed(0)
    layer = SparseLinear(2048, 512, sparsity=0.9, vector=8)
    plans = {
        steps: launcher.build_window_plan(
            layer.row_ptr, layer.col_idx, 2048, 8, SHAPES[0], 128, steps
        )
        for steps in launcher.STEP_MODES
    }
    fill = {k: layer.n_vectors / (16 * p.rows.shape[0]) for k, p in plans.items()}
    waves = {k: wavefronts(p) for k, p in plans.items()}
    assert fill["fill"] > 0.9 and fill["chunk"] < 0.75
    assert waves["balance"] < 1.45 < waves["chunk"] < waves["fill"]
    cost = {k: waves[k] / fill[k] for k in plans}  # wavefronts per useful row read
    assert cost["balance"] < cost["fill"] and cost["balance"] < cost["chunk"]


def test_window_chunk_rows_follow_the_density():
    variant = launcher.Variant("window", shape=SHAPES[0])
    assert launcher.window_chunk_rows(variant, 0.1, 4096) == 160
    assert launcher.window_chunk_rows(variant, 0.05, 4096) == 256  # DIRECT's bound
    assert SHAPES[0].max_chunk_rows() == 256
    assert launcher.window_chunk_rows(variant._replace(shape=SHAPES[1]), 0.05, 4096) == 320
    assert launcher.window_chunk_rows(variant, 0.9, 4096) == 32  # at least 32
    assert launcher.window_chunk_rows(variant._replace(shape=SHAPES[1]), 0.01, 100) == 128
    assert launcher.window_chunk_rows(variant._replace(list_vectors=32), 0.05, 4096) == 256


def test_window_plan_rejects_bad_chunks_and_modes():
    layer = SparseLinear(64, 16, sparsity=0.5, vector=8)
    for rows in (16, 48, 8192):
        with pytest.raises(ValueError, match="chunk_rows"):
            launcher.build_window_plan(layer.row_ptr, layer.col_idx, 64, 8, SHAPES[0], rows)
    with pytest.raises(ValueError, match="steps"):
        launcher.build_window_plan(layer.row_ptr, layer.col_idx, 64, 8, SHAPES[0], 32, "span")


def test_window_plan_fits_the_shared_memory_limit():
    """A limit too small for the aimed chunk rows halves them; below 32 rows it is an error."""
    torch.manual_seed(0)
    layer = SparseLinear(2048, 256, sparsity=0.9, vector=8)
    variant = launcher.Variant("window", shape=SHAPES[0])
    big = launcher.window_plan_for(layer.row_ptr, layer.col_idx, 2048, 8, variant, 1 << 20)
    assert big.chunk_rows == 160
    limit = SHAPES[0].shared_bytes(96, big.cap)
    small = launcher.window_plan_for(layer.row_ptr, layer.col_idx, 2048, 8, variant, limit)
    assert small.chunk_rows < 160
    assert SHAPES[0].shared_bytes(small.chunk_rows, small.cap) <= limit
    with pytest.raises(ValueError, match="shared memory"):
        launcher.window_plan_for(layer.row_ptr, layer.col_idx, 2048, 8, variant, 1000)


def test_window_records_are_built_once_per_values_version():
    layer = SparseLinear(100, 40, sparsity=0.7, vector=4)
    plan = launcher.build_window_plan(layer.row_ptr, layer.col_idx, 100, 4, SHAPES[0], 32)
    values = layer.values.detach()
    records = launcher.window_records(plan, values, torch.float16)
    assert records.dtype == torch.int16 and records.shape == (plan.rows.shape[0], 144)
    assert torch.equal(records[:, :16], plan.rows)
    padded = torch.cat([values.half(), values.new_zeros(1, dtype=torch.float16)])
    assert torch.equal(records[:, 16:].reshape(-1).view(torch.float16), padded[plan.frag_index])
    assert launcher.window_records(plan, values, torch.float16) is records
    assert launcher.window_records(plan, values, torch.bfloat16) is not records
    with torch.no_grad():
        values.mul_(2)
    again = launcher.window_records(plan, values, torch.float16)
    assert again is not records
    assert torch.equal(again[:, 16:].reshape(-1).view(torch.float16), 2 * padded[plan.frag_index])


def test_window_records_move_values_through_an_index():
    """W^T's records from W's values: slot k of W^T's pattern holds values[through[k]] (a zero
    where through names W's slot count)."""
    layer = SparseLinear(64, 40, sparsity=0.6, vector=8)
    plan = launcher.build_window_plan(layer.row_ptr, layer.col_idx, 64, 8, SHAPES[0], 32)
    values = torch.randn(500)
    slots = layer.values.numel()
    through = torch.randint(0, 501, (slots,))
    records = launcher.window_records(plan, values, torch.float16, through)
    moved = torch.cat([values, torch.zeros(1)])[through]
    expected = torch.cat([moved, torch.zeros(1)])[plan.frag_index.long()].half()
    assert torch.equal(records[:, 16:].reshape(-1).view(torch.float16), expected)
    assert launcher.window_records(plan, values, torch.float16, through) is records
    assert launcher.window_records(plan, values, torch.float16, through.clone()) is not records


def test_selection_rule():
    names = [launcher.choose_variant(n, 10, 100, 5000).name for n in (50, 100, 500)]
    assert names == ["w4x8x8-xt-v16", "w4x8x8-v32", "w4x8x8-xt-v32"]  # densities 0.05, 0.1, 0.5
    window = launcher.Variant("window", shape=SHAPES[0])
    rule = ((0.15, 2048, window), (1.0, 0, launcher.CHUNK))
    original = launcher.FORWARD_RULE
    try:
        launcher.FORWARD_RULE = rule
        assert launcher.choose_variant(100, 10, 100, 5000) == window  # density 0.1
        assert launcher.choose_variant(100, 10, 100, 1000) == launcher.CHUNK  # few tokens
        assert launcher.choose_variant(500, 10, 100, 5000) == launcher.CHUNK  # dense
    finally:
        launcher.FORWARD_RULE = original
    names = {launcher.Variant("window", shape=s).name for s in SHAPES}
    assert len(names) == len(SHAPES)
    assert window._replace(steps="fill").name == "w4x8x8-v16-fill"
