"""Dataset loaders, each on a tiny dataset written here in its real on-disk layout and read
through the real loader; graphs, features, labels, splits and scores are checked against
scipy / NumPy / sklearn computations of the same files."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.metrics import f1_score, roc_auc_score

from flashgnn.data import Dataset, load_dataset
from flashgnn.data.csr import canonical_csr, edges_to_csr
from flashgnn.data.metrics import accuracy, f1_micro


def expected_csr(src, dst, n, undirected):
    """Canonical CSR (rows = destinations, no loops, no duplicates) computed by scipy."""
    a = sp.coo_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)).tocsr()
    if undirected:
        a = a + a.T
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return a.indptr, a.indices


def assert_graph(graph, indptr, indices):
    assert torch.equal(graph.indptr, torch.as_tensor(indptr, dtype=torch.int64))
    assert torch.equal(graph.indices, torch.as_tensor(indices, dtype=torch.int64))


def assert_partition(ds: Dataset, nodes):
    """train/val/test are disjoint and together exactly ``nodes``."""
    masks = torch.stack([ds.train_mask, ds.val_mask, ds.test_mask]).int()
    assert int(masks.sum(0).max()) == 1
    assert torch.equal(
        masks.sum(0).bool().nonzero()[:, 0], torch.as_tensor(nodes, dtype=torch.int64)
    )


# ---------------------------------------------------------------------------- CSR builder
@pytest.mark.parametrize("undirected", [False, True])
@pytest.mark.parametrize("chunk_size", [7, 1 << 20])
def test_edges_to_csr_matches_scipy(rng, undirected, chunk_size):
    n, e = 57, 400
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)  # with loops and duplicates
    indptr, indices = edges_to_csr(
        src, dst, n, undirected=undirected, chunk_size=chunk_size, progress=False
    )
    ref_ptr, ref_idx = expected_csr(src, dst, n, undirected)
    assert indptr.dtype == np.int64 and indices.dtype == np.int32
    np.testing.assert_array_equal(indptr, ref_ptr)
    np.testing.assert_array_equal(indices, ref_idx)


def test_canonical_csr_sorts_merges_and_drops_loops(rng):
    n = 30
    m = sp.random(n, n, density=0.2, random_state=np.random.RandomState(1), format="csr")
    m.setdiag(1.0)
    rows = np.repeat(np.arange(n), np.diff(m.indptr))
    # shuffle each row's columns and repeat some of them
    order = np.lexsort((rng.random(m.nnz), rows))
    cols = m.indices[order]
    extra = rng.choice(m.nnz, 20)
    all_rows, all_cols = np.r_[rows, rows[extra]], np.r_[cols, m.indices[extra]]
    by_row = np.argsort(all_rows, kind="stable")
    indptr = np.r_[0, np.cumsum(np.bincount(all_rows, minlength=n))]
    out_ptr, out_idx = canonical_csr(indptr, all_cols[by_row], n, chunk_size=16, progress=False)
    ref_ptr, ref_idx = expected_csr(m.indices, rows, n, undirected=False)  # src = col, dst = row
    np.testing.assert_array_equal(out_ptr, ref_ptr)
    np.testing.assert_array_equal(out_idx, ref_idx)


def test_edges_out_of_range_are_rejected():
    with pytest.raises(ValueError, match="out of range"):
        edges_to_csr(np.array([0, 5]), np.array([1, 2]), 5, progress=False)


# ---------------------------------------------------------------------------- shared .npz
def test_npz_cora_public_split(data_dir):
    ds = load_dataset("cora", root=data_dir)
    with np.load(data_dir / "cora.npz") as d:
        assert_graph(ds.graph, d["indptr"], d["indices"])
        np.testing.assert_array_equal(ds.x.numpy(), d["x"])
        np.testing.assert_array_equal(ds.y.numpy(), d["y"])
        for split in ("train", "val", "test"):
            np.testing.assert_array_equal(getattr(ds, f"{split}_mask").numpy(), d[f"{split}_mask"])
    assert (int(ds.train_mask.sum()), int(ds.val_mask.sum()), int(ds.test_mask.sum())) == (
        140,
        500,
        1000,
    )
    assert (ds.num_classes, ds.metric, ds.multi_label) == (7, "accuracy", False)
    normalized = load_dataset("cora", root=data_dir, normalize_features=True).x
    assert normalized.dtype == torch.float32
    np.testing.assert_allclose(normalized.sum(1).numpy(), 1.0, rtol=1e-5)


def test_npz_ten_splits_pick_one(data_dir):
    ds = load_dataset("hetero_cornell", root=data_dir, split=3)
    with np.load(data_dir / "hetero_cornell.npz") as d:
        np.testing.assert_array_equal(ds.val_mask.numpy(), d["val_masks"][3])
    with pytest.raises(ValueError, match=r"split must be in \[0, 10\)"):
        load_dataset("hetero_cornell", root=data_dir, split=10)


def test_npz_written_here_multilabel_sparse_features_random_split(tmp_path, rng):
    n, f, c = 40, 9, 5
    src, dst = rng.integers(0, n, 150), rng.integers(0, n, 150)
    indptr, indices = expected_csr(src, dst, n, undirected=True)
    xs = sp.random(n, f, density=0.3, random_state=np.random.RandomState(2), format="csr")
    y_multi = (rng.random((n, c)) < 0.4).astype(np.uint8)
    np.savez(
        tmp_path / "tiny.npz",
        indptr=indptr.astype(np.int32),
        indices=indices.astype(np.int32),
        num_nodes=np.int64(n),
        x_indptr=xs.indptr.astype(np.int32),
        x_indices=xs.indices.astype(np.int32),
        x_shape=np.array([n, f]),
        y_multi=y_multi,
        meta="{}",
    )
    ds = load_dataset("tiny", root=tmp_path, seed=5)
    assert_graph(ds.graph, indptr, indices)
    np.testing.assert_array_equal(ds.x.numpy(), (xs.toarray() != 0).astype(np.float16))
    assert ds.multi_label and ds.metric == "f1_micro" and ds.num_classes == c
    assert_partition(ds, np.arange(n))
    assert (int(ds.train_mask.sum()), int(ds.val_mask.sum())) == (24, 8)
    again = load_dataset("tiny", root=tmp_path, seed=5)
    other = load_dataset("tiny", root=tmp_path, seed=6)
    assert torch.equal(again.train_mask, ds.train_mask) and not torch.equal(
        other.train_mask, ds.train_mask
    )


def test_missing_npz_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_graph.npz"):
        load_dataset("no_such_graph", root=tmp_path)


# ---------------------------------------------------------------------------- OGB
def _write_csv_gz(path, array, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.asarray(array).reshape(len(array), -1), fmt=fmt, delimiter=",")


def write_ogb(root, name, rng, n=60, e=200, feat_dim=6, num_tasks=1, num_classes=4, split="time"):
    """A tiny dataset in ogb's raw layout (what its download unpacks); returns the arrays."""
    folder = root / name.replace("-", "_")
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    keep = src != dst
    edges = np.stack([src[keep], dst[keep]], axis=1)
    (folder / "raw").mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    raw = folder / "raw"
    _write_csv_gz(raw / "edge.csv.gz", edges, "%d")
    _write_csv_gz(raw / "num-node-list.csv.gz", [n], "%d")
    _write_csv_gz(raw / "num-edge-list.csv.gz", [len(edges)], "%d")
    data = {"edges": edges}
    if num_tasks == 1:
        data["x"] = rng.standard_normal((n, feat_dim)).astype(np.float32)
        _write_csv_gz(raw / "node-feat.csv.gz", data["x"], "%.9g")
        data["y"] = rng.integers(0, num_classes, n)
        _write_csv_gz(raw / "node-label.csv.gz", data["y"], "%d")
    else:
        data["edge_feat"] = rng.random((len(edges), 8)).astype(np.float32)
        _write_csv_gz(raw / "edge-feat.csv.gz", data["edge_feat"], "%.9g")
        data["y"] = (rng.random((n, num_tasks)) < 0.5).astype(np.int64)
        _write_csv_gz(raw / "node-label.csv.gz", data["y"], "%d")
        _write_csv_gz(raw / "species.csv.gz", np.zeros(n, dtype=np.int64), "%d")  # ogb renames it
    if name == "ogbn-arxiv":
        _write_csv_gz(raw / "node_year.csv.gz", rng.integers(1990, 2020, n), "%d")
    perm = rng.permutation(n)
    data["split"] = {"train": perm[:30], "valid": perm[30:45], "test": perm[45:]}
    for part, idx in data["split"].items():
        _write_csv_gz(folder / "split" / split / f"{part}.csv.gz", idx, "%d")
    return data


def test_ogb_arxiv_layout_symmetrised_and_scored_by_ogb(tmp_path, rng):
    data = write_ogb(tmp_path, "ogbn-arxiv", rng)
    n = 60
    for attempt in range(2):  # the first load parses the CSVs, the second memory-maps its cache
        ds = load_dataset("ogbn-arxiv", root=tmp_path, download=False, progress=False)
        assert_graph(
            ds.graph, *expected_csr(data["edges"][:, 0], data["edges"][:, 1], n, undirected=True)
        )
        np.testing.assert_allclose(ds.x.numpy(), data["x"], rtol=1e-6)
        np.testing.assert_array_equal(ds.y.numpy(), data["y"])
        np.testing.assert_array_equal(
            ds.test_mask.nonzero()[:, 0].numpy(), np.sort(data["split"]["test"])
        )
        assert (
            tmp_path / "ogbn_arxiv" / "processed" / "flashgnn-undirected" / "indices.npy"
        ).is_file()
    assert ds.metric == "accuracy" and ds.num_classes == 40
    logits = torch.randn(n, 40)
    test = data["split"]["test"]
    want = np.mean(logits.numpy()[test].argmax(1) == data["y"][test])
    assert ds.evaluate(logits, mask=ds.test_mask) == pytest.approx(want)


def test_ogb_products_keeps_ogb_inverse_edges(tmp_path, rng):
    data = write_ogb(tmp_path, "ogbn-products", rng, split="sales_ranking")
    ds = load_dataset("ogbn-products", root=tmp_path, download=False, progress=False)
    # ogb itself adds the reverse of every edge of ogbn-products
    assert_graph(
        ds.graph, *expected_csr(data["edges"][:, 0], data["edges"][:, 1], 60, undirected=True)
    )
    assert ds.num_classes == 47


def test_ogb_proteins_mean_edge_features_and_rocauc(tmp_path, rng):
    data = write_ogb(tmp_path, "ogbn-proteins", rng, num_tasks=112, split="species")
    n = 60
    ds = load_dataset("ogbn-proteins", root=tmp_path, download=False, progress=False)
    src, dst = data["edges"][:, 0], data["edges"][:, 1]
    both_src, both_dst = np.r_[src, dst], np.r_[dst, src]  # ogb stores both directions
    feats = np.r_[data["edge_feat"], data["edge_feat"]].astype(np.float64)
    incidence = sp.csr_matrix(
        (np.ones(len(both_dst)), (both_dst, np.arange(len(both_dst)))), shape=(n, len(both_dst))
    )
    degree = np.maximum(np.asarray(incidence.sum(1)).ravel(), 1)
    np.testing.assert_allclose(ds.x.numpy(), (incidence @ feats) / degree[:, None], rtol=1e-5)
    assert ds.multi_label and ds.metric == "rocauc" and ds.num_classes == 112
    assert_graph(ds.graph, *expected_csr(both_src, both_dst, n, undirected=False))
    logits = torch.randn(n, 112)
    test = np.sort(data["split"]["test"])
    y, p = data["y"][test], logits.numpy()[test]
    tasks = [t for t in range(112) if 0 < y[:, t].sum() < len(test)]
    want = np.mean([roc_auc_score(y[:, t], p[:, t]) for t in tasks])
    assert ds.evaluate(logits, mask=ds.test_mask) == pytest.approx(want)


def test_ogb_offline_missing_files_are_named(tmp_path, rng):
    with pytest.raises(FileNotFoundError, match=r"raw/edge\.csv\.gz"):
        load_dataset("ogbn-arxiv", root=tmp_path, download=False)
    write_ogb(tmp_path, "ogbn-arxiv", rng)
    (tmp_path / "ogbn_arxiv" / "RELEASE_v1.txt").unlink()
    # the folder exists, so even with download=True nothing is fetched
    with pytest.raises(FileNotFoundError, match=r"incomplete or outdated[\s\S]*RELEASE_v1\.txt"):
        load_dataset("ogbn-arxiv", root=tmp_path, download=True)


# ---------------------------------------------------------------------------- IGB
def write_igb(root, size, rng, n, e=300, raw=False, classes=19):
    folder = root / size / "processed"
    (folder / "paper").mkdir(parents=True)
    (folder / "paper__cites__paper").mkdir()
    x = rng.standard_normal((n, 1024)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.float32)
    edges = np.stack([rng.integers(0, n, e), rng.integers(0, n, e)], axis=1).astype(np.int64)
    label_file = folder / "paper" / ("node_label_19.npy" if classes == 19 else "node_label_2K.npy")
    if raw:  # large/full: headerless float32 files under .npy names, as IGB ships them
        x.tofile(folder / "paper" / "node_feat.npy")
        y.tofile(label_file)
    else:
        np.save(folder / "paper" / "node_feat.npy", x)
        np.save(label_file, y)
    np.save(folder / "paper__cites__paper" / "edge_index.npy", edges)
    return x, y, edges


def test_igb_tiny_npy_layout_and_seeded_split(tmp_path, rng):
    n = 50
    x, y, edges = write_igb(tmp_path, "tiny", rng, n)
    ds = load_dataset("igb-tiny", root=tmp_path, seed=1, progress=False)
    assert_graph(ds.graph, *expected_csr(edges[:, 0], edges[:, 1], n, undirected=True))
    np.testing.assert_array_equal(ds.x.numpy(), x)
    np.testing.assert_array_equal(ds.y.numpy(), y.astype(np.int64))
    assert_partition(ds, np.arange(n))
    assert (int(ds.train_mask.sum()), int(ds.val_mask.sum()), int(ds.test_mask.sum())) == (
        30,
        10,
        10,
    )
    assert torch.equal(load_dataset("igb-tiny", root=tmp_path, seed=1).val_mask, ds.val_mask)
    assert not torch.equal(load_dataset("igb-tiny", root=tmp_path, seed=2).val_mask, ds.val_mask)
    directed = load_dataset("igb-tiny", root=tmp_path, undirected=False)
    assert_graph(directed.graph, *expected_csr(edges[:, 0], edges[:, 1], n, undirected=False))


def test_igb_full_raw_memmaps_labelled_prefix(tmp_path, rng):
    n, labelled = 48, 40
    x, y, edges = write_igb(tmp_path, "full", rng, n, raw=True, classes=2983)
    ds = load_dataset(
        "igb-full", root=tmp_path, num_classes=2983, num_nodes=n, num_labelled=labelled
    )
    np.testing.assert_array_equal(ds.x.numpy(), x)
    np.testing.assert_array_equal(ds.y[:labelled].numpy(), y[:labelled].astype(np.int64))
    assert bool((ds.y[labelled:] == -1).all())
    assert_partition(ds, np.arange(labelled))
    with pytest.raises(ValueError, match="needs"):
        load_dataset("igb-full", root=tmp_path, num_classes=2983, num_nodes=n + 1)


def test_igb_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="node_label_19.npy"):
        load_dataset("igb-small", root=tmp_path)
    with pytest.raises(ValueError, match="19 or 2983"):
        load_dataset("igb-small", root=tmp_path, num_classes=20)


# ---------------------------------------------------------------------------- AmazonProducts
def test_amazon_products_graphsaint_layout(tmp_path, rng):
    n, c = 35, 107
    folder = tmp_path / "amazon-products"
    folder.mkdir()
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)
    adj = sp.coo_matrix((np.ones(240), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n)).tocsr()
    adj.setdiag(1.0)  # a self-loop the loader must drop
    sp.save_npz(folder / "adj_full.npz", adj)
    feats = rng.standard_normal((n, 7))
    np.save(folder / "feats.npy", feats)
    labels = (rng.random((n, c)) < 0.3).astype(int)
    order = rng.permutation(n)  # json keys in any order
    (folder / "class_map.json").write_text(json.dumps({str(i): labels[i].tolist() for i in order}))
    role = {"tr": order[:20].tolist(), "va": order[20:27].tolist(), "te": order[27:].tolist()}
    (folder / "role.json").write_text(json.dumps(role))
    ds = load_dataset("amazon-products", root=tmp_path, progress=False)
    ref = adj.tocoo()
    assert_graph(ds.graph, *expected_csr(ref.col, ref.row, n, undirected=False))
    np.testing.assert_array_equal(ds.x.numpy(), feats)
    np.testing.assert_array_equal(ds.y.numpy(), labels)
    np.testing.assert_array_equal(ds.val_mask.nonzero()[:, 0].numpy(), np.sort(role["va"]))
    assert ds.multi_label and ds.metric == "f1_micro" and ds.num_classes == c
    logits = torch.randn(n, c)
    te = np.sort(role["te"])
    want = f1_score(labels[te], (logits.numpy()[te] > 0).astype(int), average="micro")
    assert ds.evaluate(logits, mask=ds.test_mask) == pytest.approx(want)
    (folder / "role.json").unlink()
    with pytest.raises(FileNotFoundError, match="role.json"):
        load_dataset("amazon-products", root=tmp_path)


# ---------------------------------------------------------------------------- synthetic
def test_synthetic_is_deterministic_power_law_and_homophilous():
    kw = dict(num_nodes=6000, avg_degree=12, num_classes=6, homophily=0.6)
    ds = load_dataset("synthetic", seed=3, **kw)
    again = load_dataset("synthetic", seed=3, **kw)
    other = load_dataset("synthetic", seed=4, **kw)
    assert torch.equal(ds.graph.indices, again.graph.indices) and torch.equal(ds.x, again.x)
    assert not torch.equal(ds.graph.indices, other.graph.indices)
    g = ds.graph
    src, dst = g.indices, g.dst_of_csr()
    assert torch.equal(
        torch.sort(dst * g.num_nodes + src).values, torch.sort(src * g.num_nodes + dst).values
    ), "not symmetric"
    assert not bool((src == dst).any())
    degree = g.in_degrees().double()
    assert 0.85 * 12 < degree.mean() < 12.5
    assert degree.max() > 8 * degree.median()  # hubs: a heavy tail, not a Poisson degree
    same = (ds.y[src] == ds.y[dst]).double().mean().item()
    assert abs(same - (0.6 + 0.4 / 6)) < 0.03
    # features: the class centres are recoverable from the training nodes
    y, x = ds.y, ds.x
    centres = torch.stack([x[ds.train_mask & (y == k)].mean(0) for k in range(6)])
    nearest = torch.cdist(x[ds.test_mask], centres).argmin(1)
    assert (nearest == y[ds.test_mask]).double().mean() > 1.5 / 6


def test_synthetic_rejects_bad_parameters():
    with pytest.raises(ValueError, match="homophily"):
        load_dataset("synthetic", homophily=1.5)
    with pytest.raises(ValueError, match="exponent"):
        load_dataset("synthetic", exponent=1.5)
    with pytest.raises(ValueError, match="no root"):
        load_dataset("synthetic", root="somewhere")


# ---------------------------------------------------------------------------- metrics
def test_metrics_against_sklearn(rng):
    logits = torch.randn(50, 9)
    y = torch.as_tensor(rng.integers(0, 9, 50))
    assert accuracy(logits, y) == pytest.approx(float((logits.argmax(1) == y).double().mean()))
    truth = torch.as_tensor(rng.random((50, 9)) < 0.3)
    want = f1_score(truth.numpy().astype(int), (logits > 0).numpy().astype(int), average="micro")
    assert f1_micro(logits, truth) == pytest.approx(want)


def test_evaluate_checks_logits(data_dir):
    ds = load_dataset("cora", root=data_dir)
    with pytest.raises(ValueError, match=r"\[num_nodes, 7\]"):
        ds.evaluate(torch.zeros(ds.num_nodes, 6))


def test_ogb_papers100m_binary_layout_symmetrised_with_unlabelled_nodes(tmp_path, rng):
    """ogb's binary layout (raw/data.npz, raw/node-label.npz with NaN for the unlabelled),
    as its papers100M download unpacks it, at a tiny size."""
    n, folder = 50, tmp_path / "ogbn_papers100M"
    src, dst = rng.integers(0, n, 160), rng.integers(0, n, 160)
    keep = src != dst
    edge_index = np.stack([src[keep], dst[keep]])
    x = rng.standard_normal((n, 4)).astype(np.float16)
    label = rng.integers(0, 172, n).astype(np.float64)
    label[rng.random(n) < 0.3] = np.nan
    (folder / "raw").mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    np.savez(
        folder / "raw" / "data.npz",
        edge_index=edge_index,
        num_nodes_list=np.array([n]),
        num_edges_list=np.array([edge_index.shape[1]]),
        node_feat=x,
        node_year=rng.integers(1990, 2020, (n, 1)),
    )
    np.savez(folder / "raw" / "node-label.npz", node_label=label[:, None])
    perm = rng.permutation(np.flatnonzero(~np.isnan(label)))  # the splits hold labelled nodes
    for part, idx in {"train": perm[:15], "valid": perm[15:25], "test": perm[25:]}.items():
        _write_csv_gz(folder / "split" / "time" / f"{part}.csv.gz", idx, "%d")
    ds = load_dataset("ogbn-papers100M", root=tmp_path, download=False, progress=False)
    assert_graph(ds.graph, *expected_csr(edge_index[0], edge_index[1], n, undirected=True))
    assert ds.x.dtype == torch.float16
    np.testing.assert_array_equal(ds.x.numpy(), x)
    np.testing.assert_array_equal(ds.y.numpy(), np.where(np.isnan(label), -1, label))
    assert ds.num_classes == 172 and ds.metric == "accuracy"
    np.testing.assert_array_equal(ds.val_mask.nonzero()[:, 0].numpy(), np.sort(perm[15:25]))
