"""The memory estimate of a GCN rank (``distributed.memory``) against what a small run holds,
on 2 gloo processes at two sizes (so that the estimate's scaling with rows, edges and halo is
checked, not one point): the persistent tensors' bytes and, counted with saved-tensor hooks
during a training forward in fp16 (autocast on the CPU, the dtypes a GPU step has), the bytes
the forward keeps for the backward, layer by layer as the estimate sums them."""

from __future__ import annotations

import pytest
import torch

from flashgnn import precision
from flashgnn.data.local_rows import load_generated_igb
from flashgnn.distributed import FullGraphPartition
from flashgnn.distributed.memory import estimate, of_partition, persistent_bytes, saved_bytes
from flashgnn.models import build_model
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
    from flashgnn.distributed.memory import RankSizes

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
