"""Magnitude pruning into V x 1 vectors, SparseLinear and sparsify on the CPU, the sparse linear
op's autograd, the kernel launcher's checks, and the kernel's plan (emulated with torch)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import flashgnn
from flashgnn._cuda import sparse_linear as launcher
from flashgnn.nn import SparseLinear, sparsify
from flashgnn.ops.sparse_linear import sparse_linear, sparse_linear_op
from flashgnn.prune import magnitude, pruned_vectors
from tests.helpers import rel_err

BOUND = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
STORAGE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def brute_force_mask(weight: np.ndarray, sparsity: float, vector: int) -> np.ndarray:
    """The magnitude mask by explicit loops: norms per (strip, column), a stable ordering by
    decreasing norm, the first n - round(sparsity n) kept."""
    out_f, in_f = weight.shape
    strips = -(-out_f // vector)
    norms = []
    for s in range(strips):
        for j in range(in_f):
            norms.append((-np.sqrt((weight[s * vector : (s + 1) * vector, j] ** 2).sum()), s, j))
    n_zero = int(np.floor(sparsity * len(norms) + 0.5))
    mask = np.zeros_like(weight, dtype=bool)
    for _, s, j in sorted(norms)[: len(norms) - n_zero]:
        mask[s * vector : (s + 1) * vector, j] = True
    return mask


def pruned_dense(layer: SparseLinear) -> torch.Tensor:
    """W of a layer, rebuilt from its CVSE arrays by loops (not by the layer's own decoding)."""
    w = torch.zeros(layer.out_features, layer.in_features, dtype=layer.values.dtype)
    rp, col, mask = layer.row_ptr.tolist(), layer.col_idx.tolist(), layer.vec_mask.tolist()
    v = layer.vector
    for s in range(len(rp) - 1):
        for k in range(rp[s], rp[s + 1]):
            for r in range(v):
                if mask[k] >> r & 1:
                    w[s * v + r, col[k]] = layer.values.detach()[k * v + r]
    return w


# ---- prune.magnitude


@pytest.mark.parametrize(
    "shape, vector, sparsity",
    [((16, 12), 8, 0.5), ((13, 7), 4, 0.7), ((10, 9), 8, 0.9), ((5, 3), 2, 0.25), ((9, 4), 1, 0.5)],
)
def test_magnitude_matches_brute_force(rng, shape, vector, sparsity):
    w = rng.standard_normal(shape)
    mask = magnitude(torch.from_numpy(w), sparsity, vector=vector)
    assert mask.dtype == torch.bool and mask.shape == shape
    np.testing.assert_array_equal(mask.numpy(), brute_force_mask(w, sparsity, vector))


def test_magnitude_keeps_whole_vectors_and_short_last_strip(rng):
    w = torch.from_numpy(rng.standard_normal((11, 20)))  # strips of 4: the last has 3 rows
    mask = magnitude(w, 0.6, vector=4)
    strips = torch.cat([mask, mask.new_zeros(1, 20)]).view(3, 4, 20)
    assert (strips[:2] == strips[:2, :1]).all() and (strips[2, :3] == strips[2, :1]).all()
    n_vectors = 3 * 20
    kept = int(strips[:, 0].sum())
    assert n_vectors - kept == pruned_vectors(n_vectors, 0.6) == 36


def test_magnitude_rounds_half_up_and_extremes():
    assert pruned_vectors(10, 0.25) == 3  # 2.5 -> 3
    assert pruned_vectors(10, 0.24) == 2
    assert pruned_vectors(7, 1.0) == 7 and pruned_vectors(7, 0.0) == 0
    w = torch.randn(8, 5)
    assert magnitude(w, 0.0, vector=8).all()
    assert not magnitude(w, 1.0, vector=8).any()


def test_magnitude_ties_keep_the_first_vectors():
    w = torch.ones(8, 6)
    mask = magnitude(w, 0.5, vector=4)  # 12 vectors of equal norm: strip 0 is kept
    assert mask[:4].all() and not mask[4:].any()
    assert torch.equal(mask, magnitude(w.clone(), 0.5, vector=4))


@pytest.mark.parametrize(
    "args, error",
    [
        ((torch.ones(4, 4), -0.1), ValueError),
        ((torch.ones(4, 4), 1.5), ValueError),
        ((torch.ones(4, 4), float("nan")), ValueError),
        ((torch.ones(4, 4), "0.5"), TypeError),
        ((torch.ones(4, 4), True), TypeError),
        ((torch.ones(4), 0.5), ValueError),
        ((torch.ones(4, 4, dtype=torch.int32), 0.5), ValueError),
        ((torch.tensor([[1.0, float("inf")]]), 0.5), ValueError),
        (([[1.0]], 0.5), TypeError),
    ],
)
def test_magnitude_rejects_bad_input(args, error):
    with pytest.raises(error):
        magnitude(*args)


@pytest.mark.parametrize("vector", [0, -2, 2.5, True])
def test_magnitude_rejects_bad_vector(vector):
    with pytest.raises(ValueError, match="vector"):
        magnitude(torch.ones(4, 4), 0.5, vector=vector)


# ---- SparseLinear on the CPU


@pytest.mark.parametrize("vector", [2, 4, 8])
@pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
def test_forward_matches_linear_on_pruned_weight(vector, lead):
    layer = SparseLinear(24, 19, sparsity=0.6, vector=vector).double()
    x = torch.randn(*lead, 24, dtype=torch.float64)
    w = pruned_dense(layer)
    assert torch.equal(layer.weight.detach(), w)
    y = layer(x)
    assert y.shape == (*lead, 19) and y.dtype == torch.float64
    torch.testing.assert_close(y, F.linear(x, w, layer.bias.detach()), rtol=1e-12, atol=1e-12)


def test_pattern_has_the_sparsity_in_whole_vectors():
    layer = SparseLinear(40, 30, sparsity=0.75, vector=8)
    n = 4 * 40  # strips of 8: 4 (the last of 6 rows)
    assert layer.n_vectors == n - pruned_vectors(n, 0.75)
    assert layer.values.shape == (8 * layer.n_vectors,)
    # the short strip's slots past row 29 are zero, the real ones hold Linear's init
    slots = layer.values.detach().view(-1, 8)
    last = slice(int(layer.row_ptr[3]), int(layer.row_ptr[4]))
    assert (slots[last, 6:] == 0).all() and (slots[: int(layer.row_ptr[3])] != 0).all()


@pytest.mark.parametrize("bias", [True, False])
def test_gradcheck_float64(bias):
    layer = SparseLinear(12, 11, bias=bias, sparsity=0.5, vector=4).double()
    x = torch.randn(3, 2, 12, dtype=torch.float64, requires_grad=True)
    params = (layer.values,) + ((layer.bias,) if bias else ())
    assert torch.autograd.gradcheck(lambda x, *p: layer(x), (x, *params))


def test_gradients_match_linear_on_pruned_weight():
    layer = SparseLinear(16, 13, sparsity=0.5, vector=4).double()
    x = torch.randn(7, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(7, 13, dtype=torch.float64)
    layer(x).backward(g)
    w = pruned_dense(layer).requires_grad_()
    b = layer.bias.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    F.linear(x2, w, b).backward(g)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(layer.bias.grad, b.grad)
    # the values' gradient is W's on the pattern, 0 on slots outside it (the short last strip)
    torch.testing.assert_close(
        layer.weight_format().with_values(layer.values.grad).to_dense(),
        w.grad * (pruned_dense(layer) != 0),
    )
    assert (layer.values.grad.view(-1, 4)[int(layer.row_ptr[3]) :, 1:] == 0).all()


@pytest.mark.parametrize("bias", [True, False])
def test_op_autograd_gradcheck_float64(bias):
    """The custom op's own backward (W^T's CVSE for dX, SDDMM for dW), which the kernel path
    uses: gradcheck on the CPU."""
    layer = SparseLinear(10, 14, sparsity=0.5, vector=8).double()
    w = layer.weight_format()
    x = torch.randn(6, 10, dtype=torch.float64, requires_grad=True)
    values = layer.values.detach().clone().requires_grad_()
    b = torch.randn(14, dtype=torch.float64, requires_grad=True) if bias else None
    inputs = (x, values) + ((b,) if bias else ())

    def f(x, values, *b):
        return sparse_linear(w, x, values, b[0] if b else None, "fp32")

    assert torch.autograd.gradcheck(f, inputs)
    torch.testing.assert_close(
        f(*inputs), F.linear(x, pruned_dense(layer), b), rtol=1e-12, atol=1e-12
    )


def test_op_registration_passes_opcheck():
    """Schema, fake and autograd registrations (the backward's CVSE products are not custom ops
    yet, so the AOT tracing checks are left out)."""
    layer = SparseLinear(10, 14, sparsity=0.5, vector=4)
    w = layer.weight_format()
    x = torch.randn(6, 10, requires_grad=True)
    args = (x, layer.values, layer.bias, w.row_ptr, w.col_idx, w.vec_mask, 14, 4, "fp32")
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(sparse_linear_op, args, test_utils=checks)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_reduced_precisions_within_bounds(precision):
    layer = SparseLinear(96, 40, sparsity=0.8, vector=8, precision=precision)
    x = torch.randn(4, 33, 96)
    ref = F.linear(x.double(), pruned_dense(layer).double(), layer.bias.detach().double())
    y = layer(x)
    assert y.dtype == torch.float32
    assert rel_err(y, ref) <= BOUND[precision]
    if precision in STORAGE:  # x in the storage type: the output too
        yh = layer(x.to(STORAGE[precision]))
        assert yh.dtype == STORAGE[precision]
        assert rel_err(yh, ref) <= BOUND[precision] + (2e-3 if precision == "fp16" else 1e-2)


def test_precision_from_context():
    layer = SparseLinear(32, 16, sparsity=0.5)
    x = torch.randn(9, 32)
    with flashgnn.precision("bf16"):
        y = layer(x)
    explicit = SparseLinear(32, 16, sparsity=0.5, precision="bf16")
    explicit.load_state_dict(layer.state_dict())
    assert torch.equal(y, explicit(x))
    assert not torch.equal(y, layer(x))  # fp32 outside the context


def test_from_dense_prunes_by_magnitude():
    linear = nn.Linear(30, 21).double()
    layer = SparseLinear.from_dense(linear, 0.7, 4)
    mask = magnitude(linear.weight, 0.7, vector=4)
    torch.testing.assert_close(pruned_dense(layer), linear.weight.detach() * mask)
    assert torch.equal(layer.bias.detach(), linear.bias.detach())
    assert layer.bias is not linear.bias
    x = torch.randn(5, 30, dtype=torch.float64)
    torch.testing.assert_close(layer(x), F.linear(x, linear.weight * mask, linear.bias))
    no_bias = SparseLinear.from_dense(nn.Linear(8, 8, bias=False), 0.5, 8)
    assert no_bias.bias is None
    assert no_bias.values.dtype == torch.float32


def test_sparsify_replaces_every_linear_in_place():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Sequential(nn.Linear(32, 24), nn.Tanh()), nn.Linear(24, 5)
    ).double()
    dense = [m.weight.detach().clone() for m in model.modules() if isinstance(m, nn.Linear)]
    biases = [m.bias.detach().clone() for m in model.modules() if isinstance(m, nn.Linear)]
    out = sparsify(model, 0.5, 8)
    assert out is model
    layers = [m for m in model.modules() if isinstance(m, SparseLinear)]
    assert len(layers) == 3 and not any(isinstance(m, nn.Linear) for m in model.modules())
    masks = [magnitude(w, 0.5, vector=8) for w in dense]
    x = torch.randn(4, 16, dtype=torch.float64)
    h = torch.relu(F.linear(x, dense[0] * masks[0], biases[0]))
    h = torch.tanh(F.linear(h, dense[1] * masks[1], biases[1]))
    ref = F.linear(h, dense[2] * masks[2], biases[2])
    torch.testing.assert_close(model(x), ref)


def test_state_dict_round_trips(tmp_path):
    a = SparseLinear(20, 12, sparsity=0.5, vector=4)
    b = SparseLinear(20, 12, sparsity=0.5, vector=4)
    assert not torch.equal(a.col_idx, b.col_idx) or not torch.equal(a.values, b.values)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b.load_state_dict(torch.load(buffer))
    x = torch.randn(3, 20)
    assert torch.equal(a(x), b(x))
    # another sparsity: another vector count, taken from the saved pattern
    c = SparseLinear(20, 12, sparsity=0.9, vector=4)
    c.load_state_dict(a.state_dict())
    assert c.n_vectors == a.n_vectors and torch.equal(a(x), c(x))
    assert set(a.state_dict()) == {"values", "bias", "row_ptr", "col_idx", "vec_mask"}


def test_state_dict_of_another_shape_is_refused():
    a = SparseLinear(20, 12, sparsity=0.5, vector=4)
    b = SparseLinear(20, 16, sparsity=0.5, vector=4)
    with pytest.raises((ValueError, RuntimeError)):
        b.load_state_dict(a.state_dict())


def test_extra_repr_names_the_layout():
    text = repr(SparseLinear(64, 32, sparsity=0.75, vector=8, precision="fp16"))
    for part in ("in_features=64", "out_features=32", "vector=8", "sparsity=0.75", "'fp16'"):
        assert part in text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"in_features": 0},
        {"out_features": -1},
        {"in_features": 2.0},
        {"vector": 3},
        {"vector": 1},
        {"format": "csr"},
        {"precision": "fp64"},
        {"sparsity": 1.2},
    ],
)
def test_constructor_rejects_bad_arguments(kwargs):
    args = {"in_features": 8, "out_features": 8} | kwargs
    with pytest.raises((ValueError, TypeError)):
        SparseLinear(**args)


def test_forward_rejects_bad_input():
    layer = SparseLinear(8, 4, sparsity=0.5)
    with pytest.raises(ValueError, match=r"\[\.\.\., 8\]"):
        layer(torch.randn(3, 7))
    with pytest.raises(ValueError, match="floating point"):
        layer(torch.ones(3, 8, dtype=torch.int64))
    with pytest.raises(TypeError):
        layer([[0.0] * 8])
    with pytest.raises(ValueError, match="8"):
        layer(torch.randn(()))
    with pytest.raises(TypeError):
        SparseLinear.from_dense(nn.Conv1d(2, 2, 1))
    with pytest.raises(TypeError):
        sparsify("model")
    with pytest.raises(ValueError):
        sparsify(nn.Linear(4, 4), vector=5)


def test_op_rejects_mismatched_operands():
    layer = SparseLinear(8, 4, sparsity=0.5)
    w = layer.weight_format()
    with pytest.raises(ValueError, match="x must be"):
        sparse_linear(w, torch.randn(3, 9), layer.values, None, "fp32")
    with pytest.raises(ValueError, match="values"):
        sparse_linear(w, torch.randn(3, 8), layer.values[1:], None, "fp32")
    with pytest.raises(ValueError, match="bias"):
        sparse_linear(w, torch.randn(3, 8), layer.values, torch.zeros(5), "fp32")


# ---- the kernel's launcher and plan (no GPU needed)


def _launcher_args(**changes):
    layer = SparseLinear(16, 12, sparsity=0.5, vector=4)
    args = {
        "x": torch.randn(5, 16),
        "values": layer.values.detach(),
        "bias": layer.bias.detach(),
        "row_ptr": layer.row_ptr,
        "col_idx": layer.col_idx,
        "n_out": 12,
        "vector": 4,
        "precision": "fp16",
    }
    args.update(changes)
    return args


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"precision": "fp32"}, "fp16 and bf16"),
        ({"vector": 3}, "vector"),
        ({"x": torch.randn(2, 5, 16)}, "2-D"),
        ({"x": torch.randn(5, 16, dtype=torch.float64)}, "2-D"),
        ({"row_ptr": torch.zeros(4, dtype=torch.int64)}, "int32"),
        ({"n_out": 20}, "row_ptr must have 6"),
        ({"values": torch.zeros(3)}, "values"),
        ({"bias": torch.zeros(11)}, "bias"),
        ({"through": torch.zeros(3, dtype=torch.int64)}, "through"),
        ({}, "CUDA"),
    ],
)
def test_launcher_checks_arguments(changes, match):
    with pytest.raises(ValueError, match=match):
        launcher.sparse_linear_cuda(**_launcher_args(**changes))


def test_launcher_checks_moved_values():
    """``through`` moves another pattern's values into this one's slots: int64, one entry a
    slot, over 1-D values of any size."""
    args = _launcher_args()
    slots = args["values"].numel()
    for through, values in (
        (torch.zeros(slots, dtype=torch.int32), args["values"]),
        (torch.zeros(slots, dtype=torch.int64), args["values"].view(-1, 1)),
    ):
        with pytest.raises(ValueError, match="through"):
            launcher.sparse_linear_cuda(**{**args, "through": through, "values": values})
    with pytest.raises(ValueError, match="CUDA"):  # valid: the device check comes next
        launcher.sparse_linear_cuda(
            **{**args, "through": torch.zeros(slots, dtype=torch.int64), "values": torch.ones(7)}
        )


def b_fragments(plan, values, steps: int) -> torch.Tensor:
    """Each step's B operand [steps, 16, 8], read back from the lanes' fragment layout
    (``plan.frag_index``, whose index len(values) is a padding zero)."""
    padded = torch.cat([values, values.new_zeros(1)])
    frag = padded[plan.frag_index.long()].view(steps, 8, 4, 4)  # [step, g, t, e]
    b = torch.zeros(steps, 16, 8, dtype=values.dtype)
    for t in range(4):
        for e in range(4):
            b[:, 2 * t + (e & 1) + 8 * (e >> 1), :] = frag[:, :, t, e]
    return b


def step_lists(plan) -> torch.Tensor:
    """The list of ``plan.offs`` each step belongs to, int64 [steps]."""
    counts = (plan.offs[1:] - plan.offs[:-1]).long()
    return torch.repeat_interleave(torch.arange(counts.numel()), counts)


def add_strips(yt, a, b, strip, vector: int) -> torch.Tensor:
    """``yt`` [rows, tokens] plus each step's product a [step, 16, tokens]^T b [step, 16, 8],
    its first ``vector`` columns added to the rows of its strip; returns yt."""
    contrib = torch.einsum("skm,skn->snm", a, b)[:, :vector]  # [step, V, tokens]
    out_rows = (strip[:, None] * vector + torch.arange(vector)).reshape(-1)
    return yt.index_add_(0, out_rows, contrib.reshape(-1, yt.shape[1]))


def emulate_plan(plan, values, x, n_out, vector):
    """Y^T the kernel computes from a plan, by torch: each step's 16 gathered rows of the chunk
    (zero rows for padding) times its B fragments, read back from the lanes' layout."""
    u = launcher.chunk_rows(plan.token_tiles)
    n_tokens, n_in = x.shape
    steps = plan.rows.numel() // 16
    b = b_fragments(plan, values, steps)
    lists = step_lists(plan)
    j = lists % 8
    chunk = lists // 8 % plan.n_chunks
    warp = lists // (8 * plan.n_chunks) % 8
    group = lists // (64 * plan.n_chunks)
    strip = group * 64 + warp * 8 + j
    rows = plan.rows.view(steps, 16).long()
    assert ((rows >= 0) & (rows < u + 8)).all()
    feature = chunk[:, None] * u + rows
    real = rows < u
    assert (feature[real] < n_in).all()
    xt = torch.cat([x.t(), x.new_zeros(1, n_tokens)])
    a = xt[torch.where(real, feature, n_in)]  # [step, 16, tokens]
    yt = torch.zeros(
        (int(strip.max()) + 1 if steps else 0) * vector + vector, n_tokens, dtype=values.dtype
    )
    return add_strips(yt, a, b, strip, vector)[:n_out]


@pytest.mark.parametrize("token_tiles", [1, 2, 4])
@pytest.mark.parametrize(
    "n_in, n_out, vector, sparsity",
    [
        (300, 37, 8, 0.5),
        (600, 700, 8, 0.9),
        (130, 515, 4, 0.7),
        (1030, 90, 2, 0.95),
        (7, 9, 8, 0.0),
    ],
)
def test_plan_computes_the_product(token_tiles, n_in, n_out, vector, sparsity):
    layer = SparseLinear(n_in, n_out, sparsity=sparsity, vector=vector).double()
    plan = launcher.build_plan(layer.row_ptr, layer.col_idx, n_in, vector, token_tiles)
    assert plan.n_chunks == -(-n_in // launcher.chunk_rows(token_tiles))
    assert plan.offs.numel() == plan.n_groups * 64 * plan.n_chunks + 1
    real_slots = int((plan.frag_index < layer.values.numel()).sum())
    assert real_slots == min(vector, 8) * layer.n_vectors  # every slot of W once, per strip row
    x = torch.randn(11, n_in, dtype=torch.float64)
    yt = emulate_plan(plan, layer.values.detach(), x, n_out, vector)
    torch.testing.assert_close(yt.t(), F.linear(x, pruned_dense(layer)), rtol=1e-10, atol=1e-10)


def test_plan_spreads_residues_over_bank_groups():
    layer = SparseLinear(512, 64, sparsity=0.5, vector=8)
    plan = launcher.build_plan(layer.row_ptr, layer.col_idx, 512, 8, 4)
    groups = plan.rows.view(-1, 8) & 7
    distinct = torch.tensor([len(set(g.tolist())) for g in groups])
    assert distinct.float().mean() > 7.5  # most 8-row groups hit 8 distinct residues


def test_token_tiles_follow_the_density():
    assert launcher.choose_token_tiles(512 * 2048, 512, 4096) == 4  # 50%: long lists
    assert launcher.choose_token_tiles(512 * 410, 512, 4096) == 2  # 90%
    assert launcher.choose_token_tiles(512 * 205, 512, 4096) == 1  # 95%
