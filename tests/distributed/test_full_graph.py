"""Full-graph training across 2 and 3 gloo processes against the single-process run: logits,
loss and every parameter's gradient of GCN, AGNN and GAT (fp32, 1e-5 relative), on a small
directed weighted graph, a graph whose halo is one-way (a rank receives nothing yet sends),
the synthetic graph and, where the datasets are present, cora and citeseer; the halo and the
exchange lists against scipy; the exchange's backward against autograd of a gather; the
partition's counts; GCN with and without overlap."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.distributed as dist
import torch.nn.functional as F

from flashgnn import Graph
from flashgnn.data import Dataset, load_dataset
from flashgnn.data.metrics import scorer
from flashgnn.distributed import (
    FullGraphPartition,
    all_reduce_gradients,
    global_count,
    partition_nodes,
    renumbering,
)
from flashgnn.distributed.aggregation import Exchanges, with_halo
from flashgnn.models import build_model
from flashgnn.training.precision import precision_scope
from tests.distributed.workers import WorkerGroup
from tests.helpers import NO_DATA, data_dir

TOL = 1e-5

MODEL_ARGS = {
    "gcn": dict(hidden_feats=16, dropout=0.0),
    "agnn": dict(hidden_feats=16, num_layers=2, dropout=0.0),
    "gat": dict(hidden_feats=8, heads=2, feat_drop=0.0, attn_drop=0.0),
}


# ---------------------------------------------------------------------------- data
def _masks(n: int, rng: np.random.Generator) -> list[torch.Tensor]:
    split = torch.from_numpy(rng.integers(0, 3, n))
    split[:3] = torch.tensor([0, 1, 2])  # no empty split
    return [split == s for s in range(3)]


def _dataset(name: str, graph: Graph, features: int, classes: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    n = graph.num_nodes
    train, val, test = _masks(n, rng)
    return Dataset(
        name,
        graph,
        torch.from_numpy(rng.standard_normal((n, features)).astype(np.float32)),
        torch.from_numpy(rng.integers(0, classes, n)),
        train,
        val,
        test,
        classes,
        False,
        "accuracy",
        scorer("accuracy"),
    )


def directed(n: int = 90, seed: int = 0) -> Dataset:
    """A directed graph with skewed degrees and random positive edge weights."""
    rng = np.random.default_rng(seed)
    edges = 5 * n
    dst = np.minimum((rng.pareto(1.2, edges) * 4).astype(np.int64), n - 1)
    src = rng.integers(0, n, edges)
    key = np.unique(dst * n + src)
    ei = torch.from_numpy(np.stack([key % n, key // n]))
    weight = torch.from_numpy(rng.uniform(0.5, 2.0, ei.shape[1]).astype(np.float32))
    return _dataset("directed", Graph.from_edge_index(ei, n, weight), 12, 4, seed)


def one_way(n: int = 40) -> Dataset:
    """Edges inside each half of the ids and from the first half into the second only: in a
    contiguous split of 2 (or 3) parts, the first rank has no halo but sends rows."""
    rng = np.random.default_rng(5)
    half = n // 2
    src = np.concatenate(
        [rng.integers(0, half, 4 * n), rng.integers(half, n, 2 * n), rng.integers(0, half, 2 * n)]
    )
    dst = np.concatenate(
        [rng.integers(0, half, 4 * n), rng.integers(half, n, 2 * n), rng.integers(half, n, 2 * n)]
    )
    key = np.unique(dst * n + src)
    ei = torch.from_numpy(np.stack([key % n, key // n]))
    return _dataset("one-way", Graph.from_edge_index(ei, n), 6, 3, 5)


def load(name: str) -> Dataset:
    if name == "directed":
        return directed()
    if name == "odd":  # parts of unequal, odd sizes in 2 and 3
        return directed(n=47, seed=3)
    if name == "one-way":
        return one_way()
    if name == "synthetic":
        return load_dataset("synthetic", num_nodes=300, avg_degree=8, num_features=16, seed=1)
    return load_dataset(name, data_dir())


def need(name: str) -> None:
    if name in ("cora", "citeseer"):
        root = data_dir()
        if root is None or not (root / f"{name}.npz").is_file():
            pytest.skip(NO_DATA)


def make_model(name: str, dataset: Dataset, **kw):
    torch.manual_seed(0)
    args = {**MODEL_ARGS[name], **kw}
    return build_model(name, dataset.num_features, dataset.num_classes, **args)


# ---------------------------------------------------------------------------- worker tasks
def train_step_task(
    rank,
    world,
    data,
    model_name,
    method,
    overlap,
    model_kw,
    device="cpu",
    precision="fp32",
    options=None,
):
    """One forward and backward on the partition in ``precision`` (on "cpu", or "cuda": rank
    r on cuda:r): (gathered logits, global loss, summed gradients, the exchanges) on rank 0,
    None elsewhere. ``options``: "features" (where the partition keeps them),
    "exchange_columns", and "block_bytes" (the bytes of a block of rows of the epilogue and
    of the host features' copies)."""
    options = options or {}
    with block_bytes(options.get("block_bytes")):
        return _train_step(
            rank, data, model_name, method, overlap, model_kw, device, precision, options
        )


@contextlib.contextmanager
def block_bytes(size: int | None):
    """The epilogue's row blocks and the host features' copies at ``size`` bytes meanwhile."""
    from flashgnn.distributed import epilogue, projection

    kept = epilogue.ROW_BLOCK_BYTES, projection.HOST_BLOCK_BYTES
    if size is not None:
        epilogue.ROW_BLOCK_BYTES = projection.HOST_BLOCK_BYTES = size
    try:
        yield
    finally:
        epilogue.ROW_BLOCK_BYTES, projection.HOST_BLOCK_BYTES = kept


def _train_step(rank, data, model_name, method, overlap, model_kw, device, precision, options):
    dataset = load(data)
    device = torch.device("cuda", rank) if device == "cuda" else torch.device(device)
    part = FullGraphPartition.build(
        dataset,
        method=method,
        device=device,
        k=8,
        x_dtype=torch.float32,
        features=options.get("features", "device"),
    )
    model = make_model(model_name, dataset, **model_kw).to(device)
    if rank != 0:  # the wrap broadcasts rank 0's parameters
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    wrapped = part.wrap(model, overlap=overlap, exchange_columns=options.get("exchange_columns"))
    with precision_scope(precision, device):
        logits = wrapped(part.graph, part.x).float()
        train = part.masks[0]
        n_train = global_count(train.sum())
        loss = F.cross_entropy(logits[train], part.y[train], reduction="sum") / n_train
        loss.backward()
    all_reduce_gradients(model)
    total = loss.detach().clone()
    dist.all_reduce(total)
    full = part.gather(logits.detach())
    if rank != 0:
        return None
    grads = {name: p.grad.cpu().numpy() for name, p in model.named_parameters()}
    exchanges = [{k: v for k, v in e.items() if k != "clocks"} for e in wrapped.exchanges]
    return full.cpu().numpy(), float(total), grads, exchanges


def halo_task(rank, world, data, method):
    dataset = load(data)
    part = FullGraphPartition.build(dataset, method=method, device="cpu", k=None)
    lo = int(part.part_ptr[rank])
    graph = part.graph
    return {
        "lo": lo,
        "part_ptr": part.part_ptr.numpy(),
        "new_of_old": part.new_of_old.numpy(),
        "sources": _local_sources(part).numpy(),
        "src_degrees": part.src_degrees.numpy(),
        "send_index": part.plan.send_index.numpy() + lo,
        "send_counts": part.plan.send_counts,
        "edges": graph.num_edges,
        "stats": part.stats(widths=[7, 3], dtype=torch.float16),
        "y": part.y.numpy(),
        "x": part.x.numpy(),
        "masks": [m.numpy() for m in part.masks],
        "gathered_x": part.gather(part.x).numpy(),
    }


def _local_sources(part) -> torch.Tensor:
    """The global (new) id of every local source: own nodes, then the halo."""
    lo = int(part.part_ptr[part.rank])
    return part.plan.gather(torch.arange(lo, lo + part.num_own))


def exchange_task(rank, world, dtype, columns, overlap):
    dataset = directed()
    part = FullGraphPartition.build(dataset, method="degree", device="cpu", k=None)
    n = dataset.num_nodes
    x_new = torch.from_numpy(np.random.default_rng(7).standard_normal((n, 5))).to(dtype)
    lo = int(part.part_ptr[rank])
    x_own = x_new[lo : lo + part.num_own].clone().requires_grad_()
    out = with_halo(x_own, Exchanges(part.plan, overlap, columns))
    sources = _local_sources(part)
    weight = torch.from_numpy(np.random.default_rng(100 + rank).standard_normal(out.shape)).to(
        dtype
    )
    (out * weight).sum().backward()
    return sources.numpy(), weight.double().numpy(), out.detach().float().numpy(), x_own.grad


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", params=[2, 3], ids=["world2", "world3"])
def group(request):
    workers = WorkerGroup(request.param)
    yield workers
    workers.close()


def single_process(
    data: str, model_name: str, dtype=torch.float32, device="cpu", precision="fp32", **model_kw
):
    """(logits, loss, gradients by parameter name) of the single-process run in ``dtype``."""
    dataset = load(data)
    device = torch.device(device)
    model = make_model(model_name, dataset, **model_kw).to(device=device, dtype=dtype)
    graph = dataset.graph.add_self_loops().to(device)
    train = dataset.train_mask.to(device)
    with precision_scope(precision, device):
        logits = model(graph, dataset.x.to(device=device, dtype=dtype))
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        loss = F.cross_entropy(logits[train], dataset.y.to(device)[train])
        loss.backward()
    grads = {name: p.grad.cpu() for name, p in model.named_parameters()}
    return logits.detach().cpu(), loss.item(), grads


def max_rel(a, ref) -> float:
    a, ref = torch.as_tensor(a).double(), torch.as_tensor(ref).double()
    assert a.shape == ref.shape
    return float((a - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def check_against_single_process(result, reference, data, model_name, **model_kw) -> None:
    """Logits, loss and every gradient within TOL of the single-process fp32 run. A gradient
    that is a sum of terms cancelling to far below their size (AGNN's beta) carries the
    rounding of the terms, not of the result: where the single-process fp32 gradient itself
    is further than TOL / 2 from the float64 one, the distributed gradient must be as close
    to the float64 one as twice that."""
    logits, loss, grads, _ = result
    ref_logits, ref_loss, ref_grads = reference
    assert max_rel(logits, ref_logits) <= TOL
    assert abs(loss - ref_loss) <= TOL * abs(ref_loss)
    assert grads.keys() == ref_grads.keys()
    exact = None
    for name, g in grads.items():
        if max_rel(g, ref_grads[name]) <= TOL:
            continue
        if exact is None:
            exact = single_process(data, model_name, torch.float64, **model_kw)[2]
        own_error = max_rel(ref_grads[name], exact[name])
        assert own_error > TOL / 2 and max_rel(g, exact[name]) <= 2 * own_error, name


# ---------------------------------------------------------------------------- tests
CASES = [
    ("directed", "contiguous"),
    ("one-way", "contiguous"),
    ("synthetic", "degree"),
    ("cora", "contiguous"),
    ("citeseer", "degree"),
]


@pytest.mark.parametrize("model_name", ["gcn", "agnn", "gat"])
@pytest.mark.parametrize("data,method", CASES, ids=[c[0] for c in CASES])
def test_matches_single_process(group, data, method, model_name):
    need(data)
    result = group.run(train_step_task, data, model_name, method, False, {})[0]
    check_against_single_process(result, single_process(data, model_name), data, model_name)


@pytest.mark.parametrize("data", ["directed", "one-way", "cora"])
def test_gcn_overlap_equals_plain(group, data):
    need(data)
    plain, overlapped = (
        group.run(train_step_task, data, "gcn", "contiguous", overlap, {})[0]
        for overlap in (False, True)
    )
    check_against_single_process(overlapped, single_process(data, "gcn"), data, "gcn")
    assert max_rel(overlapped[0], plain[0]) <= TOL
    for name, g in plain[2].items():
        assert max_rel(overlapped[2][name], g) <= TOL, name
    # the first layer reads the features' halo, exchanged once; the second overlaps
    assert [e["cached"] for e in overlapped[3]] == [True, False]


@pytest.mark.parametrize("norm", ["left", "right", "none"])
def test_gcn_norms_of_a_weighted_directed_graph(group, norm):
    result = group.run(train_step_task, "directed", "gcn", "degree", True, {"norm": norm})[0]
    reference = single_process("directed", "gcn", norm=norm)
    check_against_single_process(result, reference, "directed", "gcn", norm=norm)


def test_gcn_three_layers_wider_than_input(group):
    kw = {"num_layers": 3, "hidden_feats": 40}
    result = group.run(train_step_task, "directed", "gcn", "contiguous", True, kw)[0]
    reference = single_process("directed", "gcn", **kw)
    check_against_single_process(result, reference, "directed", "gcn", **kw)


ATTENTION_CASES = [
    # (data, method, model, model arguments, options)
    ("odd", "degree", "agnn", {"num_layers": 3}, {"exchange_columns": 3}),
    ("odd", "contiguous", "gat", {}, {"exchange_columns": 3}),
    ("one-way", "contiguous", "agnn", {}, {"exchange_columns": 5}),
    # every GAT layer exchanges h W (the widths narrow), residual and averaged heads
    ("directed", "degree", "gat", {"num_layers": 3, "residual": True, "concat": False}, {}),
    # wider heads than the input: h travels, projected on the receiving side
    ("one-way", "degree", "gat", {"hidden_feats": 8, "heads": 3}, {"exchange_columns": 2}),
]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize(
    "data,method,model_name,model_kw,options",
    ATTENTION_CASES,
    ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(ATTENTION_CASES)],
)
def test_attention_halo_in_blocks_of_columns(
    group, data, method, model_name, model_kw, options, overlap
):
    """AGNN and GAT with their halo rows exchanged in blocks of columns, the next block in
    flight or not, on parts of odd sizes and a rank without halo."""
    result = group.run(
        train_step_task, data, model_name, method, overlap, model_kw, "cpu", "fp32", options
    )[0]
    reference = single_process(data, model_name, **model_kw)
    check_against_single_process(result, reference, data, model_name, **model_kw)
    # only the features (GAT's first layer) are kept; every hidden layer exchanges
    assert not any(e["cached"] for e in result[3][1:])


def eval_task(rank, world, data, model_name, model_kw):
    """(the gathered logits of the wrapped model in eval mode (no gradient), whether each
    exchange was of kept rows) on rank 0."""
    dataset = load(data)
    part = FullGraphPartition.build(dataset, method="degree", device="cpu", k=8)
    wrapped = part.wrap(make_model(model_name, dataset, **model_kw))
    wrapped.eval()
    with torch.no_grad():
        logits = wrapped(part.graph, part.x)
    full = part.gather(logits)
    return (full.numpy(), [e["cached"] for e in wrapped.exchanges]) if rank == 0 else None


@pytest.mark.parametrize(
    "model_name,model_kw",
    [
        ("agnn", {"dropout": 0.5}),
        ("gat", {"feat_drop": 0.5, "attn_drop": 0.5}),
        ("gcn", {"dropout": 0.5}),
    ],
)
def test_eval_mode_matches_single_process(group, model_name, model_kw):
    """Dropout configured but off in eval mode: the logits equal the single-process ones.
    GAT with a feature dropout keeps no halo rows of the features (its training steps could
    not use them): every layer exchanges."""
    logits, cached = group.run(eval_task, "odd", model_name, model_kw)[0]
    assert not any(cached) or model_name == "gcn"
    dataset = load("odd")
    model = make_model(model_name, dataset, **model_kw).eval()
    with torch.no_grad():
        reference = model(dataset.graph.add_self_loops(), dataset.x)
    assert max_rel(logits, reference) <= TOL


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("data", ["directed", "cora"])
def test_gcn_exchange_in_blocks_of_columns(group, data, overlap):
    """The halo rows travel 5 columns at a time (the layers' 16 columns in 4 blocks, the
    last narrower) through blocks of 7 rows: the single-process logits and gradients."""
    need(data)
    options = {"exchange_columns": 5, "block_bytes": 7 * 4 * 16}
    kw = {"num_layers": 3}
    result = group.run(
        train_step_task, data, "gcn", "contiguous", overlap, kw, "cpu", "fp32", options
    )
    check_against_single_process(result[0], single_process(data, "gcn", **kw), data, "gcn", **kw)


@pytest.mark.parametrize("data", ["cora", "citeseer"])
def test_gcn_features_streamed_from_host_memory(group, data):
    """Features kept in host memory (streamed through the first projection in blocks of 3
    rows; their halo rows are never kept, so the first layer exchanges X W) give the
    single-process run, as the features on the device do."""
    need(data)
    options = {"features": "host", "block_bytes": 3 * 4 * load(data).num_features}
    streamed = group.run(
        train_step_task, data, "gcn", "contiguous", True, {}, "cpu", "fp32", options
    )
    on_device = group.run(train_step_task, data, "gcn", "contiguous", True, {})
    check_against_single_process(streamed[0], single_process(data, "gcn"), data, "gcn")
    assert [e["cached"] for e in streamed[0][3]] == [False, False]
    assert [e["cached"] for e in on_device[0][3]] == [True, False]
    assert max_rel(streamed[0][0], on_device[0][0]) <= TOL


def host_features_refused_task(rank, world):
    dataset = directed()
    part = FullGraphPartition.build(dataset, device="cpu", k=None, features="host")
    messages = []
    for name, kw in (("gat", {}), ("gcn", {})):  # 12 features -> 16: the GCN does not narrow
        try:
            part.wrap(make_model(name, dataset, **kw))
        except ValueError as e:
            messages.append(str(e))
    model = make_model("gcn", dataset, hidden_feats=8, input_dropout=0.5)
    wrapped = part.wrap(model)
    try:
        wrapped(part.graph, part.x)
    except ValueError as e:
        messages.append(str(e))
    return part.features_on_host, messages


def test_host_features_serve_gcn_without_input_dropout(group):
    for on_host, messages in group.run(host_features_refused_task):
        assert on_host
        assert "features kept in host memory feed GCN's first projection only" in messages[0]
        assert "for this GAT" in messages[0] and "for this GCN" in messages[1]
        assert "input_dropout needs the features on the device" in messages[2]


def test_halo_and_exchange_lists_against_scipy(group):
    dataset = directed()
    results = group.run(halo_task, "directed", "degree")
    world = group.world
    part = partition_nodes(dataset.graph, world, "degree")
    new_of_old, old_of_new, part_ptr = renumbering(part, world)
    graph = dataset.graph.add_self_loops()
    src, dst = graph.edge_index.numpy()
    n = graph.num_nodes
    a = sp.csr_matrix(
        (np.ones(len(src)), (new_of_old.numpy()[dst], new_of_old.numpy()[src])), shape=(n, n)
    )
    out_degree = np.asarray(a.sum(0)).ravel()
    cut = int((part[torch.from_numpy(src)] != part[torch.from_numpy(dst)]).sum())
    for rank, r in enumerate(results):
        lo, hi = int(part_ptr[rank]), int(part_ptr[rank + 1])
        assert np.array_equal(r["new_of_old"], new_of_old.numpy())
        assert np.array_equal(r["part_ptr"], part_ptr.numpy())
        rows = a[lo:hi]
        cols = np.unique(rows.indices)
        halo = cols[(cols < lo) | (cols >= hi)]
        assert np.array_equal(r["sources"], np.concatenate([np.arange(lo, hi), halo]))
        assert np.array_equal(r["src_degrees"], out_degree[r["sources"]])
        stats = r["stats"]
        assert stats["num_own"] == hi - lo and stats["num_halo"] == len(halo)
        assert stats["edges_local"] == rows.nnz == r["edges"]
        assert stats["cut_edges_local"] == int(((rows.indices < lo) | (rows.indices >= hi)).sum())
        assert stats["edge_cut"] == cut and stats["num_edges"] == graph.num_edges
        assert stats["exchanges"][0]["bytes_received"] == len(halo) * 7 * 2
        assert stats["exchanges"][1]["lower_bound_bytes"] == len(halo) * 3 * 2
        assert stats["exchanges"][1]["bytes_sent"] == stats["halo_rows_sent"] * 3 * 2
        # what rank p sends rank q is what q's halo holds of p's nodes, in q's order
        start = 0
        for q, count in enumerate(r["send_counts"]):
            sent = r["send_index"][start : start + count]
            start += count
            q_lo, q_hi = int(part_ptr[q]), int(part_ptr[q + 1])
            wanted = results[q]["sources"][q_hi - q_lo :]
            assert np.array_equal(sent, wanted[(wanted >= lo) & (wanted < hi)])
        own_old = old_of_new[lo:hi]
        assert np.array_equal(r["x"], dataset.x[own_old].numpy())
        assert np.array_equal(r["y"], dataset.y[own_old].numpy())
        for m, ref in zip(r["masks"], (dataset.train_mask, dataset.val_mask, dataset.test_mask)):
            assert np.array_equal(m, ref[own_old].numpy())
        assert np.array_equal(r["gathered_x"], dataset.x.numpy())
    assert (
        sum(r["stats"]["halo_rows_sent"] for r in results) == results[0]["stats"]["halo_rows_total"]
    )


@pytest.mark.parametrize("columns,overlap", [(None, False), (2, False), (2, True)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_exchange_backward_equals_a_gather(group, dtype, columns, overlap):
    """[x_own; halo rows] by ``with_halo``, whole or in blocks of 2 of the 5 columns."""
    results = group.run(exchange_task, dtype, columns, overlap)
    n = directed().num_nodes
    x_new = torch.from_numpy(np.random.default_rng(7).standard_normal((n, 5))).to(dtype)
    x = x_new.double().requires_grad_()
    total = 0
    for sources, weight, out, _ in results:
        gathered = x[torch.from_numpy(sources)]
        assert np.array_equal(out, gathered.detach().float().numpy())  # rows copied exactly
        total = total + (gathered * torch.from_numpy(weight).double()).sum()
    total.backward()
    grads = torch.cat([grad.double() for *_, grad in results])
    assert grads.dtype == torch.float64 and results[0][3].dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-2
    assert max_rel(grads, x.grad) <= tol


def errors_task(rank, world):
    """The message of each bad call (each fails before any collective, on every rank)."""
    dataset = directed()
    part = FullGraphPartition.build(dataset, device="cpu", k=None)
    n, own = dataset.num_nodes, part.num_own
    lo = int(part.part_ptr[rank])
    indptr = part.graph.indptr  # rows with local ids: fine for the shape checks
    good = dict(
        indptr=torch.zeros(own + 1, dtype=torch.int64),
        indices=torch.zeros(0, dtype=torch.int64),
        x=torch.zeros(own, 3),
        y=torch.zeros(own, dtype=torch.int64),
        masks=[torch.zeros(own, dtype=torch.bool)] * 3,
        part_ptr=part.part_ptr,
    )

    def message(**changes):
        kw = {**good, **changes}
        device = kw.pop("device", "cpu")
        try:
            FullGraphPartition.from_local_rows(**kw, device=device)
        except (ValueError, TypeError) as e:
            return f"{type(e).__name__}: {e}"
        return "no error"

    out = {
        "part_ptr": message(part_ptr=torch.tensor([0, n])),
        "part_ptr_order": message(part_ptr=torch.tensor([0, n, 1, n][: world + 1])),
        "rows": message(indptr=indptr[:-1] if own > 1 else torch.zeros(5, dtype=torch.int64)),
        "indices": message(indptr=torch.tensor([0] * own + [1]), indices=torch.tensor([n + lo])),
        "index_dtype": message(indices=torch.zeros(0, dtype=torch.int32)),
        "x": message(x=torch.zeros(own + 1, 3)),
        "masks": message(masks=good["masks"][:2]),
        "mask_dtype": message(masks=[torch.zeros(own)] * 3),
        "device": message(device="cuda"),
    }
    try:
        part.wrap(torch.nn.Linear(3, 3))
    except TypeError as e:
        out["wrap"] = str(e)
    model = part.wrap(make_model("gcn", dataset))
    for key, args in {
        "graph": (dataset.graph, part.x),
        "x_own": (part.graph, part.x[:-1]),
    }.items():
        try:
            model(*args)
        except ValueError as e:
            out[key] = str(e)
    for key, value in {"count_float": torch.tensor([1.5]), "count_str": "3"}.items():
        try:
            global_count(value)
        except (ValueError, TypeError) as e:
            out[key] = f"{type(e).__name__}: {e}"
    return out


def test_bad_input_is_refused_early(group):
    for out in group.run(errors_task):
        assert out["part_ptr"].startswith("ValueError: part_ptr must be int64 [world + 1")
        assert "non-decreasing" in out["part_ptr_order"]
        assert "one row per own node" in out["rows"]
        assert "node ids in [0, 90)" in out["indices"]
        assert out["index_dtype"].startswith("TypeError: indptr and indices must be int64")
        assert "x must be a tensor [num_own" in out["x"]
        assert "masks must be (train, val, test)" in out["masks"]
        assert "the train mask must be bool" in out["mask_dtype"]
        assert "gloo, which exchanges CPU tensors" in out["device"]
        assert "runs GCN, AGNN and GAT" in out["wrap"]
        assert "pass partition.graph" in out["graph"]
        assert "x_own must be the own nodes' features" in out["x_own"]
        assert out["count_float"].startswith("ValueError: n must be an integer tensor")
        assert out["count_str"].startswith("TypeError: n must be an int")


def gradients_task(rank, world):
    """all_reduce_gradients over parameters of two dtypes, one with a gradient on rank 0 only
    and one without any; global_count of the ranks' ids."""
    model = torch.nn.Module()
    model.a = torch.nn.Parameter(torch.zeros(2, 3))
    model.b = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    model.c = torch.nn.Parameter(torch.zeros(1))
    model.d = torch.nn.Parameter(torch.zeros(2))
    model.a.grad = torch.full((2, 3), float(rank + 1))
    model.b.grad = torch.arange(4, dtype=torch.float64) * (rank + 1)
    if rank == 0:
        model.c.grad = torch.tensor([5.0])
    all_reduce_gradients(model)
    return model.a.grad, model.b.grad, model.c.grad, model.d.grad, global_count(rank + 1)


def test_all_reduce_gradients_and_global_count(group):
    world = group.world
    total = world * (world + 1) // 2
    for a, b, c, d, count in group.run(gradients_task):
        assert torch.equal(a, torch.full((2, 3), float(total)))
        assert torch.equal(b, torch.arange(4, dtype=torch.float64) * total)
        assert torch.equal(c, torch.tensor([5.0]))
        assert d is None
        assert count == total


def _fake_pymetis():
    """A pymetis stand-in: part of node i = (7 i mod 11) mod nparts, not an id range."""
    import types

    class Options:
        seed = None

    def part_graph(nparts, xadj=None, adjncy=None, options=None):
        return 0, [(7 * i % 11) % nparts for i in range(len(xadj) - 1)]

    return types.SimpleNamespace(Options=Options, part_graph=part_graph)


def metis_task(rank, world):
    """Build with METIS where only rank 0 has pymetis: the others use its broadcast parts."""
    import sys

    sys.modules["pymetis"] = _fake_pymetis() if rank == 0 else None
    try:
        return train_step_task(rank, world, "directed", "gat", "metis", False, {})
    finally:
        del sys.modules["pymetis"]


def test_metis_parts_come_from_rank_0(group):
    result = group.run(metis_task)[0]
    check_against_single_process(result, single_process("directed", "gat"), "directed", "gat")
