"""NeighborSampler (flashgnn/sampling.py): the blocks hold real edges of the graph with their
weights, min(fanout, in-degree) in-edges per destination drawn uniformly, DGL's node order,
and with every in-edge kept they give the full-graph output on the seeds."""

from __future__ import annotations

import pytest
import torch

from flashgnn import Graph, ops
from flashgnn.sampling import NeighborSampler
from models import AGNN, GCN
from tests.helpers import GPU, host_syncs, needs_gpu, random_csr

DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]


def random_graph(rng, n=120, density=0.06, device="cpu") -> Graph:
    """A directed weighted graph with a self-loop on every node, on ``device``."""
    m = random_csr(n, n, density, rng)
    g = Graph.from_scipy(m).add_self_loops()
    weights = torch.from_numpy(rng.random(g.num_edges)).float() + 0.5
    g = Graph(g.indptr, g.indices, n, g.edge_ids, weights)
    return g.to(device)


def dense_weights(g: Graph) -> torch.Tensor:
    """W [N_dst, N_src], W[d, s] = the weight of s -> d (0 where there is no edge)."""
    w = torch.zeros(g.num_dst_nodes, g.num_src_nodes, dtype=torch.float64)
    src, dst = g.edge_index.cpu()
    w[dst, src] = g.edge_weight.cpu().double()
    return w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fanouts", [[3, 5], [2, -1, 4]])
def test_blocks_hold_sampled_in_edges_in_dgl_order(fanouts, device, rng):
    g = random_graph(rng, device=device)
    full = dense_weights(g)
    seeds = torch.from_numpy(rng.choice(g.num_nodes, 17, replace=False)).to(device)
    gen = torch.Generator(device).manual_seed(3)
    input_nodes, blocks = NeighborSampler(g, fanouts).sample(seeds, gen)
    assert len(blocks) == len(fanouts)
    ids = input_nodes.cpu()
    assert torch.equal(ids[: seeds.numel()], seeds.cpu()) and ids.unique().numel() == ids.numel()
    assert blocks[0].num_src_nodes == ids.numel() and blocks[-1].num_dst_nodes == seeds.numel()
    in_degree = g.in_degrees().cpu()
    for i, (block, fanout) in enumerate(zip(blocks, fanouts)):
        assert block.device == g.device
        if i + 1 < len(blocks):
            assert block.num_dst_nodes == blocks[i + 1].num_src_nodes
        src_ids, dst_ids = ids[: block.num_src_nodes], ids[: block.num_dst_nodes]
        # new sources come after the destinations, in increasing id order
        assert torch.equal(
            src_ids[block.num_dst_nodes :], src_ids[block.num_dst_nodes :].sort().values
        )
        w = dense_weights(block)
        sampled = w != 0
        # every block edge is a graph edge with its weight
        assert torch.equal(
            w[sampled], full[dst_ids[:, None].expand_as(w), src_ids[None, :].expand_as(w)][sampled]
        )
        want = in_degree[dst_ids] if fanout == -1 else in_degree[dst_ids].clamp(max=fanout)
        assert torch.equal(sampled.sum(1), want)
        assert block.has_zero_in_degree() is False


@pytest.mark.parametrize("device", DEVICES)
def test_in_edges_are_drawn_uniformly_without_replacement(device):
    """Nodes with 10 in-edges and fanout 3: each in-edge kept in 3/10 of the samples."""
    src = torch.arange(1, 11).repeat(2)
    dst = torch.tensor([0, 11]).repeat_interleave(10)
    g = Graph.from_edge_index(torch.stack([src, dst]), 12).to(device)
    sampler = NeighborSampler(g, [3])
    gen = torch.Generator(device).manual_seed(0)
    counts = torch.zeros(2, 12)
    trials = 2000
    for _ in range(trials):
        input_nodes, (block,) = sampler.sample(torch.tensor([0, 11], device=device), gen)
        assert block.num_edges == 6 and torch.equal(block.in_degrees().cpu(), torch.tensor([3, 3]))
        counts[block.dst_of_csr().cpu(), input_nodes[block.indices].cpu()] += 1
    assert torch.all((counts[:, 1:11] / trials - 0.3).abs() < 0.04), counts / trials


@pytest.mark.parametrize("device", DEVICES)
def test_a_generator_makes_a_sample_reproducible(device, rng):
    g = random_graph(rng, device=device)
    sampler = NeighborSampler(g, [2, 2])
    seeds = torch.arange(0, 40, 3, device=device)
    a = sampler.sample(seeds, torch.Generator(device).manual_seed(5))
    b = sampler.sample(seeds, torch.Generator(device).manual_seed(5))
    assert torch.equal(a[0], b[0])
    for x, y in zip(a[1], b[1]):
        assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)


@needs_gpu
@pytest.mark.parametrize("fanouts", [[3, 5, 2], [2, -1]])
def test_a_sample_reads_the_device_twice_per_hop(fanouts, rng):
    """One read for the seed checks, then per hop one for the kept in-edges' count and one for
    the new sources' (a scalar written by indexing, ``t[i] = 0``, would add a synchronous copy)."""
    g = random_graph(rng, device="cuda")
    sampler = NeighborSampler(g, fanouts)
    seeds = torch.arange(0, 40, 3, device="cuda")
    gen = torch.Generator("cuda").manual_seed(0)
    sampler.sample(seeds, gen)  # (the first call makes the sampler's buffers)
    # the fewest of three calls: torch makes a one-time synchronisation of its own in one of
    # the first calls of a process (torch/__init__.py)
    syncs = min(host_syncs(lambda: sampler.sample(seeds, gen)) for _ in range(3))
    assert syncs == 1 + 2 * len(fanouts), f"{syncs} host synchronisations"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", ["gcn", "agnn"])
@pytest.mark.parametrize("fanout", [-1, 64])  # 64: at least every in-degree here
def test_every_in_edge_kept_gives_the_full_graph_output(fanout, model, device, rng):
    """GCN with norm "right" (a mean over in-edges) and AGNN (a softmax over in-edges) read
    only the in-edges of each destination: blocks keeping all of them reproduce the seeds'
    full-graph output."""
    g = random_graph(rng, device=device)
    assert int(g.in_degrees().max()) <= 64
    torch.manual_seed(0)
    net = (
        (
            GCN(6, 8, 3, num_layers=2, dropout=0.0, norm="right")
            if model == "gcn"
            else AGNN(6, 8, 3, num_layers=2, dropout=0.0)
        )
        .to(device)
        .double()
    )
    x = torch.randn(g.num_nodes, 6, dtype=torch.float64, device=device)
    seeds = torch.tensor([5, 77, 0, 31], device=device)
    input_nodes, blocks = NeighborSampler(g, [fanout, fanout]).sample(seeds)
    torch.testing.assert_close(
        net(blocks, x[input_nodes]), net(g, x)[seeds], rtol=1e-10, atol=1e-12
    )


def test_bad_inputs(rng):
    g = random_graph(rng, n=20)
    bipartite = Graph.from_edge_index(torch.tensor([[0, 1], [0, 0]]), (2, 1))
    with pytest.raises(ValueError, match="square"):
        NeighborSampler(bipartite, [2])
    for fanouts in ([], [0], [2, -2], [1.5], [True]):
        with pytest.raises(ValueError, match="fanouts"):
            NeighborSampler(g, fanouts)
    sampler = NeighborSampler(g, [2])
    with pytest.raises(ValueError, match="out of range"):
        sampler.sample(torch.tensor([3, 20]))
    with pytest.raises(ValueError, match="out of range"):
        sampler.sample(torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match=r"seed id 21 \(position 1\) is out of range"):
        sampler.sample(torch.tensor([3, 21, 25]))
    with pytest.raises(ValueError, match="distinct"):
        sampler.sample(torch.tensor([4, 2, 4]))
    with pytest.raises(TypeError, match="integer tensor"):
        sampler.sample(torch.tensor([1.0]))
    input_nodes, (block,) = sampler.sample(torch.tensor([], dtype=torch.int64))
    assert input_nodes.numel() == 0 and block.num_edges == 0


@pytest.mark.parametrize("fanout", [-1, 1, 2, 5])
def test_sample_in_edges_op_keeps_distinct_in_edges_per_destination(fanout, rng):
    """ops.sample_in_edges, which the sampler calls each hop (its torch twin on the CPU): per
    destination, min(fanout, in-degree) distinct CSR positions of its own row, grouped by row."""
    indptr = torch.tensor([0, 3, 3, 4, 9, 11])
    dst = torch.tensor([3, 1, 0, 4])
    start, degree = indptr[dst], indptr[dst + 1] - indptr[dst]
    kept = degree if fanout < 0 else degree.clamp(max=fanout)
    kept_end = torch.cumsum(kept, 0)
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    total, n_kept = int(degree.sum()), int(kept.sum())
    row, pos = ops.sample_in_edges(indptr, dst, start, degree, kept_end, total, n_kept, fanout, gen)
    assert torch.equal(row, torch.repeat_interleave(torch.arange(4), kept))
    for i in range(4):
        mine = pos[row == i]
        assert mine.unique().numel() == mine.numel()
        assert bool(((mine >= start[i]) & (mine < start[i] + degree[i])).all())
