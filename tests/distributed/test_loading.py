"""Loading at scale: the generated IGB-like graph built block by block (deterministic, the
same rows whatever the number of ranks, only the blocks of a rank's rows built), and IGB's
files read rank by rank (the rows load_igb's graph has, the edge list read in chunks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn.data import generators, load_dataset, local_rows
from flashgnn.data.igb import load_igb


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(generators, "BLOCK_NODES", 64)


def rows_of(world: int, **kw) -> list:
    return [local_rows.generated_igb_rows("medium", r, world, **kw) for r in range(world)]


SMALL = {"num_nodes": 1000, "num_edges": 12000, "num_features": 8, "num_classes": 5}


def test_own_range_splits_like_tensor_split():
    for n, world in ((10, 3), (7, 7), (5, 8), (1000, 4)):
        pieces = torch.arange(n).tensor_split(world)
        for r in range(world):
            lo, hi = local_rows.own_range(n, r, world)
            assert torch.equal(torch.arange(lo, hi), pieces[r])


def test_generated_rows_are_deterministic_and_independent_of_the_rank_count(small_blocks):
    (whole,) = rows_of(1, **SMALL)
    again = rows_of(1, **SMALL)[0]
    other = rows_of(1, seed=1, **SMALL)[0]
    assert torch.equal(whole.indices, again.indices) and torch.equal(whole.x, again.x)
    assert not torch.equal(whole.indptr, other.indptr)
    for world in (2, 3):
        parts = rows_of(world, **SMALL)
        assert torch.equal(torch.cat([p.own for p in parts]), whole.own)
        assert torch.equal(torch.cat([p.indices for p in parts]), whole.indices)
        degrees = torch.cat([p.indptr.diff() for p in parts])
        assert torch.equal(degrees, whole.indptr.diff())
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(torch.cat([getattr(p, key) for p in parts]), getattr(whole, key))


def test_generated_rows_on_several_threads_and_into_a_given_array(small_blocks):
    """Blocks built on 3 threads give the rows built one after the other; the features go
    into the array ``features_out`` gives (None: a new one)."""
    (whole,) = rows_of(1, **SMALL)
    given = []

    def allocate(shape):
        given.append(np.full(shape, np.nan, dtype=np.float16))
        return given[-1]

    threaded = local_rows.generated_igb_rows(
        "medium", 1, 2, workers=3, features_out=allocate, **SMALL
    )
    lo, hi = local_rows.own_range(1000, 1, 2)
    start, end = int(whole.indptr[lo]), int(whole.indptr[hi])
    assert torch.equal(threaded.indices, whole.indices[start:end])
    assert torch.equal(threaded.x, whole.x[lo:hi]) and torch.equal(threaded.y, whole.y[lo:hi])
    assert np.shares_memory(threaded.x.numpy(), given[0])
    declined = local_rows.generated_igb_rows(
        "medium", 1, 2, workers=2, features_out=lambda shape: None, **SMALL
    )
    assert torch.equal(declined.x, threaded.x)
    with pytest.raises(ValueError, match="features_out gave"):
        local_rows.generated_igb_rows(
            "medium", 0, 2, features_out=lambda shape: np.zeros(shape, np.float32), **SMALL
        )


def test_generated_graph_is_canonical_power_law_and_labelled(small_blocks):
    (whole,) = rows_of(1, **SMALL)
    indptr, indices = whole.indptr, whole.indices
    rows = torch.repeat_interleave(torch.arange(1000), indptr.diff())
    assert bool((indices != rows).all()) and int(indices.max()) < 1000
    key = rows * 1000 + indices
    assert bool((key[1:] > key[:-1]).all())  # sorted and distinct within each row
    assert 0.8 * 12000 <= indices.numel() <= 12000
    degrees = indptr.diff().float()
    assert degrees.max() > 8 * degrees.mean()  # hubs
    assert whole.x.dtype == torch.float16 and whole.x.shape == (1000, 8)
    assert set(whole.y.tolist()) == set(range(5))
    masks = torch.stack([whole.train_mask, whole.val_mask, whole.test_mask])
    assert bool((masks.sum(0) == 1).all())
    assert whole.info.split_sizes == tuple(int(m.sum()) for m in masks)


def test_a_rank_builds_only_the_blocks_of_its_rows(small_blocks, monkeypatch):
    built = []
    block = generators.IGBLike.block

    def recording(self, b):
        indptr, src = block(self, b)
        built.append((b, indptr.size - 1, src.size))
        return indptr, src

    monkeypatch.setattr(generators.IGBLike, "block", recording)
    part = local_rows.generated_igb_rows("medium", 1, 4, **SMALL)  # rows [250, 500)
    assert [b for b, _, _ in built] == [3, 4, 5, 6, 7]
    assert all(rows <= 64 for _, rows, _ in built)
    assert part.indptr.numel() == 251 and int(part.indptr[-1]) == part.indices.numel()
    assert part.indices.numel() < sum(e for _, _, e in built)


def test_generated_igb_loads_as_a_dataset(small_blocks):
    dataset = load_dataset("generated-igb-medium", **SMALL)
    (whole,) = rows_of(1, **SMALL)
    assert dataset.name == "generated-igb-medium" and dataset.num_classes == 5
    assert torch.equal(dataset.graph.indices.long(), whole.indices)
    with pytest.raises(ValueError, match="unknown generated IGB size"):
        local_rows.generated_igb_rows("huge", 0, 1)
    with pytest.raises(ValueError, match="no root"):
        load_dataset("generated-igb-large", root="/tmp")


@pytest.fixture
def fake_igb(tmp_path):
    """An IGB 'tiny' folder of 300 nodes and 2000 citations (repeats and self-loops too)."""
    rng = np.random.default_rng(3)
    folder = tmp_path / "tiny" / "processed"
    (folder / "paper").mkdir(parents=True)
    (folder / "paper__cites__paper").mkdir()
    np.save(folder / "paper" / "node_feat.npy", rng.standard_normal((300, 6), dtype=np.float32))
    np.save(folder / "paper" / "node_label_19.npy", rng.integers(0, 19, 300).astype(np.float32))
    edges = rng.integers(0, 300, (2000, 2)).astype(np.int64)
    np.save(folder / "paper__cites__paper" / "edge_index.npy", edges)
    return tmp_path


@pytest.mark.parametrize("undirected", [True, False])
def test_igb_rows_are_load_igbs_rows(fake_igb, monkeypatch, undirected):
    monkeypatch.setattr(local_rows, "IGB_CHUNK_EDGES", 128)
    chunks = []
    read = local_rows.read_edge_chunk

    def recording(edges, start, stop):
        chunks.append(stop - start)
        return read(edges, start, stop)

    monkeypatch.setattr(local_rows, "read_edge_chunk", recording)
    whole = load_igb("tiny", fake_igb, undirected=undirected)
    g = whole.graph
    parts = [local_rows.igb_rows("tiny", fake_igb, r, 3, undirected=undirected) for r in range(3)]
    assert max(chunks) == 128 and sum(chunks) == 3 * 2000  # each rank reads in chunks
    assert torch.equal(torch.cat([p.indices for p in parts]), g.indices.long())
    assert torch.equal(torch.cat([p.indptr.diff() for p in parts]), g.indptr.diff())
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(torch.cat([getattr(p, key) for p in parts]), getattr(whole, key))
    assert parts[0].info.split_sizes == tuple(
        int(getattr(whole, f"{s}_mask").sum()) for s in ("train", "val", "test")
    )


def test_igb_rows_gather_the_nodes_of_any_partition(fake_igb):
    whole = load_igb("tiny", fake_igb)
    own = np.array([3, 17, 18, 150, 299])
    part = local_rows.igb_rows("tiny", fake_igb, 0, 1, own=own)
    g = whole.graph
    for i, v in enumerate(own):
        cols = g.indices[g.indptr[v] : g.indptr[v + 1]].long()
        assert torch.equal(part.indices[part.indptr[i] : part.indptr[i + 1]], cols)
    assert torch.equal(part.x, whole.x[torch.from_numpy(own)])
    with pytest.raises(ValueError, match="sorted distinct"):
        local_rows.igb_rows("tiny", fake_igb, 0, 1, own=np.array([5, 2]))


def test_local_rows_know_their_datasets():
    assert local_rows.supports("generated-igb-large") and local_rows.supports("IGB_medium")
    assert not local_rows.supports("ogbn-papers100M") and not local_rows.supports("cora")
    with pytest.raises(ValueError, match="not read rank by rank"):
        local_rows.load({"name": "cora"}, 0, 2)
