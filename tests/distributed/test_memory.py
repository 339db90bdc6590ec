"""The memory estimates of a rank (``distributed.memory``) against what a small run holds, on
2 gloo processes at two sizes (so that the estimate's scaling with rows, edges and halo is
checked, not one point): the persistent tensors' bytes and, counted with saved-tensor hooks
during a training forward in fp16 (autocast on the CPU, the dtypes a GPU step has), the bytes
the forward keeps for the backward, layer by layer as the estimate sums them. GCN's estimate
(``estimate``), then AGNN's and GAT's (``attention_estimate``, its CPU variant: the reference
ops keep what the CUDA kernels keep, except the differences its ``cuda`` flag states, which
the synthetic sizes at the end check)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from flashgnn import precision
from flashgnn.data.local_rows import load_generated_igb
from flashgnn.distributed import FullGraphPartition
from flashgnn.distributed.memory import (
    AGNNLayers,
    GATLayers,
    RankSizes,
    attention_estimate,
    estimate,
    of_partition,
    persistent_bytes,
    saved_bytes,
)
from flashgnn.models import build_model
from flashgnn.ops import agnn_one_pass
from tests.distributed.workers import WorkerGroup

DIMS = (64, 32, 32, 19)


@pytest.fixture(scope="module")
def group():
    workers = WorkerGroup(2)
    yield workers
    workers.close()


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def memory_task(rank, world, nodes):
    dataset = load_generated_igb(
        "medium", num_nodes=nodes, num_edges=12 * nodes, num_features=DIMS[0]
    )
    part = FullGraphPartition.build(dataset, device="cpu", k=None)
    torch.manual_seed(0)
    model = build_model("gcn", DIMS[0], DIMS[-1], hidden_feats=DIMS[1], num_layers=3)
    wrapped = part.wrap(model)
    model.train()
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = (storage.nbytes(), t.shape[0] if t.dim() else 0)
        return t

    features = part.x.untyped_storage().data_ptr()
    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        precision("fp16"),
        torch.autocast("cpu", dtype=torch.float16),
    ):
        out = wrapped(part.graph, part.x)
    measured_saved = sum(
        size for ptr, (size, rows) in saved.items() if rows == part.num_own and ptr != features
    )
    out.float().sum().backward()  # the fp16 step runs through
    (rows,) = wrapped._rows.values()
    vectors = {
        name: getattr(rows, name).col_idx.numel() for name in ("own", "own_t", "halo", "halo_t")
    }
    sizes = of_partition(part, DIMS, 2, vectors)
    graph = part.graph
    measured = {
        "csr": _nbytes(graph.indptr, graph.indices, graph.edge_ids),
        "plan": _nbytes(part.plan.send_index, part.src_degrees),
        "own": rows.own.nbytes + rows.own_t.nbytes,
        "halo": rows.halo.nbytes + rows.halo_t.nbytes,
        "features": _nbytes(part.x),
    }
    return sizes, measured, measured_saved, all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("nodes", [1500, 3000])
def test_estimate_matches_what_a_rank_holds(group, nodes):
    for sizes, measured, measured_saved, stepped in group.run(memory_task, nodes):
        assert stepped
        assert sizes.halo > 0 and sizes.edges_halo > 0
        persistent = persistent_bytes(sizes, features_on_host=False, features_halo=False)
        named = {
            "csr": "local graph CSR (indptr, indices, edge ids; int64)",
            "plan": "halo plan and sources' out-degrees (int64)",
            "own": "GCN matrix, own sources, and its transpose",
            "halo": "GCN matrix, halo sources, and its transpose",
            "features": "features",
        }
        for key, name in named.items():
            assert measured[key] == persistent[name], key
        layers = saved_bytes(sizes)
        rows = sizes.rows
        # layer 2's input is never whole: layer 1's epilogue makes its X W block by block
        assert list(layers.values()) == [rows * 4, rows * 32 * 2 + rows * 4, 0]
        assert measured_saved == sum(layers.values())
        total = estimate(sizes)
        assert total["peak"] > sum(persistent.values()) + measured_saved
        assert total["peak"] == max(total["phases"].values())


def test_estimate_of_the_host_features_and_kept_halo():
    sizes = RankSizes(100, 50, 40, 300, 500, 300, 500, 300, 500, (1024, 256, 256, 19))
    on_device = persistent_bytes(sizes, features_on_host=False, features_halo=True)
    assert on_device["features"] == 100 * 1024 * 2
    assert on_device["features' halo rows (kept)"] == 50 * 1024 * 2
    on_host = estimate(sizes, features_on_host=True, graph_on_host=True)
    assert on_host["persistent"]["features"] == 0
    assert on_host["persistent"]["local graph CSR (indptr, indices, edge ids; int64)"] == 0
    # the exchange of 256 columns: whole where the GPU's share holds it, else in blocks of 8
    # (a column: 90 rows sent and received, twice, 2 bytes each, and 100 rows of 2 + 8)
    roomy = estimate(sizes, features_on_host=True, graph_on_host=True, gpu_bytes=10**12)
    narrow = estimate(sizes, features_on_host=True, graph_on_host=True, gpu_bytes=8 * 1360 * 7)
    layer1 = "forward layer 1: aggregation"
    assert roomy["phases"][layer1] - narrow["phases"][layer1] == (256 - 8) * 1360
    assert on_host["phases"][layer1] == roomy["phases"][layer1]


# AGNN and GAT: every path of their layers (GAT: widening and narrowing, one and several heads,
# concatenated and averaged, residual, the features' kept halo; AGNN: dropout, one pass).
# Their parameters hold fewer elements than a rank has rows, so that what the estimate leaves
# out, the parameters' autocast copies and attention vectors saved for the backward, is told
# from what it counts, each of which holds at least one element per row.
ATTENTION = {
    "agnn": ("agnn", {"hidden_feats": 16, "num_layers": 2, "dropout": 0.5}, False),
    "agnn-undropped-one-pass": (
        "agnn",
        {"hidden_feats": 16, "num_layers": 1, "dropout": 0.0},
        True,
    ),
    "gat": (
        "gat",
        {"hidden_feats": 16, "heads": 2, "num_layers": 2, "feat_drop": 0.2, "attn_drop": 0.2},
        False,
    ),
    "gat-averaged-residual-kept-halo": (
        "gat",
        {
            "hidden_feats": 8,
            "heads": 2,
            "out_heads": 2,
            "num_layers": 3,
            "feat_drop": 0.0,
            "attn_drop": 0.0,
            "concat": False,
            "residual": True,
        },
        False,
    ),
}
WIDTHS = (24, 5)  # features, classes


def _storage_bytes(tensors) -> int:
    """The bytes of the storages under ``tensors``, each counted once (a stride-0 value
    tensor: its one element)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def _format_tensors(fmt) -> list:
    """An ME-BCRS's arrays and its transpose's, with the slot map and CSR row pointers."""
    t = fmt.transpose()
    arrays = ("row_ptr", "col_idx", "values", "perm", "vec_mask")
    return [getattr(m, name) for m in (fmt, t.fmt) for name in arrays] + [t.src_slot, t.indptr]


def attention_task(rank, world, nodes, name, kwargs, one_pass):
    dataset = load_generated_igb(
        "medium", num_nodes=nodes, num_edges=12 * nodes, num_features=WIDTHS[0]
    )
    part = FullGraphPartition.build(dataset, device="cpu", k=8)
    torch.manual_seed(0)
    model = build_model(name, *WIDTHS, **kwargs)
    wrapped = part.wrap(model)
    model.train()
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = (storage.nbytes(), storage.nbytes() // t.element_size())
        return t

    agnn_one_pass.ONE_PASS = one_pass
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            precision("fp16"),
            torch.autocast("cpu", dtype=torch.float16),
        ):
            out = wrapped(part.graph, part.x)
        out.float().sum().backward()  # the fp16 step runs through
        total = wrapped.memory_estimate()
        halo = [] if wrapped._features_halo is None else [wrapped._features_halo[1]]
        # an evaluation (GAT without feature dropout: the features' halo rows kept from now
        # on; with it, none, as its training steps use none) leaves the estimate
        model.eval()
        with torch.no_grad(), precision("fp16"), torch.autocast("cpu", dtype=torch.float16):
            wrapped(part.graph, part.x)
        evaluated = wrapped._features_halo is not None, wrapped.memory_estimate() == total
    finally:
        agnn_one_pass.ONE_PASS = None
    graph = part.graph
    measured = {
        "local graph CSR (indptr, indices, edge ids; int64)": [
            graph.indptr,
            graph.indices,
            graph.edge_ids,
        ],
        "halo plan and sources' out-degrees (int64)": [part.plan.send_index, part.src_degrees],
        "local graph's ME-BCRS and its transpose": _format_tensors(graph.adj(8)),
        "features": [part.x],
        "features' halo rows (kept)": halo,
    }
    for heads in {getattr(layer, "num_heads", 1) for layer in model.layers} - {1}:
        measured[f"diag(A, ..., A) of {heads} heads and its transpose"] = _format_tensors(
            graph.adj_heads(heads, 8)
        )
    held = {t.untyped_storage().data_ptr() for ts in measured.values() for t in ts}
    held |= {p.untyped_storage().data_ptr() for p in model.parameters()}
    rows = part.num_own
    counted = sum(b for ptr, (b, n) in saved.items() if ptr not in held and n >= rows)
    left_out = sum(b for ptr, (b, n) in saved.items() if ptr not in held and n < rows)
    parameters = [(p.numel(), p.numel() * p.element_size()) for p in model.parameters()]
    measured = {key: _storage_bytes(tensors) for key, tensors in measured.items()}
    return measured, counted, left_out, parameters, rows, total, evaluated


@pytest.mark.parametrize("nodes", [2000, 4000])
@pytest.mark.parametrize("config", list(ATTENTION))
def test_attention_estimate_matches_what_a_rank_holds(group, config, nodes):
    results = group.run(attention_task, nodes, *ATTENTION[config])
    persistent = _check_attention(results)
    kept = persistent["features' halo rows (kept)"]
    assert (kept > 0) == config.endswith("kept-halo")
    for *_, (halo_after_evaluation, unchanged) in results:
        assert halo_after_evaluation == config.endswith("kept-halo") and unchanged


def test_attention_estimate_of_a_one_part_partition():
    # no halo: the heads' blocks have as many rows as columns, and er is a view of the terms
    one = WorkerGroup(1)
    try:
        _check_attention(one.run(attention_task, 2000, *ATTENTION["gat"]))
    finally:
        one.close()


def _check_attention(results) -> dict:
    """Assert each rank's estimate against what it measured; the last rank's persistent
    estimate."""
    for measured, counted, left_out, parameters, rows, total, _ in results:
        persistent = total["persistent"]
        assert set(persistent) == set(measured) | {
            "labels (int64), masks, training index and labels"
        }
        for key, size in measured.items():
            assert persistent[key] == size, key
        assert counted == sum(total["saved"].values())
        # what is left out: the parameters' copies, each smaller than the rows' count
        assert max(n for n, _ in parameters) < rows
        assert left_out <= sum(size for _, size in parameters)
        assert total["peak"] == max(total["phases"].values())
        assert total["peak"] > sum(persistent.values()) + counted
    return persistent


# a rank's sizes: 1000 rows, 600 halo rows, 500 sent, 13000 edges in as many vectors
SIZES = RankSizes(1000, 600, 500, 9000, 4000, 9000, 4000, 9000, 4000, (24, 16, 5), vectors_t=12500)
MORE_VECTORS = RankSizes(
    1000, 600, 500, 9000, 4000, 10000, 4000, 9000, 4000, (24, 16, 5), vectors_t=12500
)


def _saved(sizes, model, **keys) -> list[int]:
    return list(attention_estimate(sizes, model, **keys)["saved"].values())


def test_agnn_keeps_two_fp32_slots_a_slot_per_layer_unless_in_one_pass():
    agnn = AGNNLayers(2)
    added = [b - a for a, b in zip(_saved(SIZES, agnn), _saved(MORE_VECTORS, agnn))]
    assert added == [0, 64 * 1000, 64 * 1000, 0]  # cosines and P: 8 fp32 slots a vector each
    one_pass = AGNNLayers(2, one_pass=True)
    assert _saved(SIZES, one_pass) == _saved(MORE_VECTORS, one_pass)
    # the kernels keep fp32 norms of the 1600 source rows and 1-byte dropout masks of the
    # 1000 x 16 decoder input, where the CPU keeps both in fp16
    cpu = _saved(SIZES, agnn, cuda=False)
    assert [a - b for a, b in zip(_saved(SIZES, agnn), cpu)] == [0, 3200, 3200, -16000]


def test_gat_keeps_no_edge_sized_tensor_on_the_fused_kernels_without_attention_dropout():
    def added(model, **keys):
        return [
            b - a for a, b in zip(_saved(SIZES, model, **keys), _saved(MORE_VECTORS, model, **keys))
        ]

    def backward_added(model):
        phase = "backward layer 0: attention"
        beyond = []
        for sizes in (SIZES, MORE_VECTORS):
            total = attention_estimate(sizes, model)
            beyond.append(total["phases"][phase] - sum(total["persistent"].values()))
        return beyond[1] - beyond[0]

    undropped = GATLayers((4, 1), attn_drop=False)
    assert added(undropped) == [0, 0] and backward_added(undropped) == 0
    # P in fp32 and the dropout's bool mask: 40 bytes a vector and head
    assert added(GATLayers((4, 1))) == [40 * 4 * 1000, 40 * 1000]
    assert added(undropped, cuda=False) == [32 * 4 * 1000, 32 * 1000]  # the CPU keeps P
    # the unfused kernels (fp32) store dP and the scores' gradient (fp32, 4 heads) at once
    unfused = GATLayers((4, 1), attn_drop=False, fused=False)
    assert added(unfused) == [0, 0] and backward_added(unfused) == 2 * 32 * 4 * 1000


def test_gat_holds_one_copy_of_the_pattern_per_head_count_above_one():
    sizes = replace(SIZES, dims=(24, 8, 8, 8, 5))
    persistent = attention_estimate(sizes, GATLayers((4, 4, 2, 1)))["persistent"]
    copies = [key for key in persistent if key.startswith("diag")]
    assert copies == [
        "diag(A, ..., A) of 2 heads and its transpose",
        "diag(A, ..., A) of 4 heads and its transpose",
    ]
    # per head: 5 bytes a vector of A and of A^T, 24 an edge (perm, A^T's perm and slot map)
    four, two = (persistent[key] for key in reversed(copies))
    pointers = 8 * (4 * 1000 // 8 + 1) + 8 * (4 * 1600 // 8 + 1) + 8 * (4 * 1600 + 1) + 8
    assert four == 4 * (5 * (13000 + 12500) + 24 * 13000) + pointers


def test_the_halo_exchange_of_an_attention_layer_is_bounded_by_the_gpu_share():
    # a column: 1100 rows sent and received, twice, 2 bytes each; 16 columns, or blocks of 8
    agnn = AGNNLayers(1)
    roomy = attention_estimate(SIZES, agnn, gpu_bytes=10**12)["phases"]
    narrow = attention_estimate(SIZES, agnn, gpu_bytes=1)["phases"]
    exchange = "forward AGNNConv 0: exchange"
    assert roomy[exchange] - narrow[exchange] == (16 - 8) * 2 * 1100 * 2
    assert attention_estimate(SIZES, agnn)["phases"][exchange] == roomy[exchange]


def test_attention_estimates_check_their_model():
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="AGNNLayers.layers"):
            AGNNLayers(bad)
    for bad in ((), [4, 1], (4, 0), (True,)):
        with pytest.raises(ValueError, match="GATLayers.heads"):
            GATLayers(bad)
    with pytest.raises(TypeError, match="AGNNLayers or GATLayers"):
        attention_estimate(SIZES, "gat")
    with pytest.raises(ValueError, match="AGNN's dims"):
        attention_estimate(replace(SIZES, dims=(24, 16, 16, 5)), AGNNLayers(2))
    with pytest.raises(ValueError, match="GAT's dims"):
        attention_estimate(SIZES, GATLayers((4, 4, 1)))
