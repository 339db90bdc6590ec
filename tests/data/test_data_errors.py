"""Bad data gets a clear message: damaged or foreign files are named with what is wrong,
labels out of range and unknown splits are refused at load time, and every dataset name is
accepted in the spellings a user types."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.data import BUILTIN, DataFileError, Dataset, load_dataset
from flashgnn.data.metrics import scorer
from flashgnn.data.names import builtin_name


def write_graph(path, rng, n=30, **arrays):
    """A small graph in the shared .npz layout: a ring plus random edges, features x, labels
    of 3 classes; ``arrays`` replace or add arrays (None drops one)."""
    src = np.r_[np.arange(n), rng.integers(0, n, 60)]
    dst = np.r_[(np.arange(n) + 1) % n, rng.integers(0, n, 60)]
    a = sp.coo_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)).tocsr()
    a = a + a.T
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    content = {
        "indptr": a.indptr.astype(np.int64),
        "indices": a.indices.astype(np.int32),
        "num_nodes": np.int64(n),
        "x": rng.standard_normal((n, 4)).astype(np.float16),
        "y": np.arange(n) % 3,
        "num_classes": np.int64(3),
    }
    content.update(arrays)
    np.savez(path, **{k: v for k, v in content.items() if v is not None})
    return path


# ---------------------------------------------------------------------------- damaged files
def test_a_truncated_npz_is_named_as_truncated(tmp_path, rng):
    path = write_graph(tmp_path / "g.npz", rng)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFileError, match=r"g\.npz.*truncated"):
        load_dataset("g", root=tmp_path)


def test_a_damaged_npz_member_is_named(tmp_path, rng):
    path = write_graph(tmp_path / "g.npz", rng)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside a stored array: the zip's CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(DataFileError, match=r"g\.npz.*(damaged|CRC)"):
        load_dataset("g", root=tmp_path)


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "empty or truncated"),
        (b"indptr,indices\n0,1\n", "pickled Python objects, or it is neither"),
        (None, r"one \.npy array, not an \.npz archive"),
    ],
)
def test_a_file_that_is_not_an_npz_archive_is_named(tmp_path, content, problem):
    path = tmp_path / "g.npz"
    if content is None:
        with open(path, "wb") as f:
            np.save(f, np.arange(5))
    else:
        path.write_bytes(content)
    with pytest.raises(DataFileError, match=rf"cannot read .*g\.npz: .*{problem}"):
        load_dataset("g", root=tmp_path)


def test_an_archive_of_objects_is_not_unpickled(tmp_path, rng):
    write_graph(tmp_path / "g.npz", rng, y=np.array([{"label": 1}] * 30, dtype=object))
    with pytest.raises(DataFileError, match=r"g\.npz: it holds pickled Python objects"):
        load_dataset("g", root=tmp_path)


def test_an_archive_without_the_layout_names_what_it_lacks(tmp_path, rng):
    write_graph(tmp_path / "g.npz", rng, num_nodes=None)
    with pytest.raises(DataFileError, match=r"g\.npz lacks the arrays \['num_nodes'\]"):
        load_dataset("g", root=tmp_path)


def write_amazon(root, rng, n=12, c=5):
    folder = root / "amazon-products"
    folder.mkdir()
    src, dst = rng.integers(0, n, 30), rng.integers(0, n, 30)
    adj = sp.coo_matrix((np.ones(60), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n)).tocsr()
    sp.save_npz(folder / "adj_full.npz", adj)
    np.save(folder / "feats.npy", rng.standard_normal((n, 3)))
    labels = (rng.random((n, c)) < 0.3).astype(int)
    (folder / "class_map.json").write_text(
        json.dumps({str(i): labels[i].tolist() for i in range(n)})
    )
    role = {"tr": list(range(6)), "va": list(range(6, 9)), "te": list(range(9, n))}
    (folder / "role.json").write_text(json.dumps(role))
    return folder


@pytest.mark.parametrize(
    "name, cut, problem",
    [
        ("adj_full.npz", 0.5, "truncated"),
        ("feats.npy", 0.7, "truncated"),
        ("role.json", 0.5, "not valid JSON"),
        ("class_map.json", 0.5, "not valid JSON"),
    ],
)
def test_amazon_products_names_a_truncated_file(tmp_path, rng, name, cut, problem):
    folder = write_amazon(tmp_path, rng)
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(DataFileError, match=rf"{name}: .*{problem}"):
        load_dataset("amazon-products", root=tmp_path, progress=False)


def test_igb_names_a_truncated_feature_file(tmp_path, rng):
    folder = tmp_path / "tiny" / "processed"
    (folder / "paper").mkdir(parents=True)
    (folder / "paper__cites__paper").mkdir()
    n = 20
    np.save(folder / "paper" / "node_feat.npy", rng.standard_normal((n, 8)).astype(np.float32))
    np.save(folder / "paper" / "node_label_19.npy", rng.integers(0, 19, n).astype(np.float32))
    np.save(folder / "paper__cites__paper" / "edge_index.npy", rng.integers(0, n, (40, 2)))
    feat = folder / "paper" / "node_feat.npy"
    feat.write_bytes(feat.read_bytes()[:300])
    with pytest.raises(DataFileError, match=r"node_feat\.npy: it is shorter than its header"):
        load_dataset("igb-tiny", root=tmp_path, progress=False)


# ---------------------------------------------------------------------------- labels
def test_labels_beyond_num_classes_are_refused(tmp_path, rng):
    y = np.arange(30) % 3
    y[17] = 5
    write_graph(tmp_path / "g.npz", rng, y=y)
    with pytest.raises(
        ValueError, match=r"labels must be class ids in \[0, num_classes=3\).*node 17 has label 5"
    ):
        load_dataset("g", root=tmp_path)


def test_labels_below_minus_one_are_refused(tmp_path, rng):
    y = np.arange(30) % 3
    y[4] = -2
    write_graph(tmp_path / "g.npz", rng, y=y)
    with pytest.raises(ValueError, match=r"node 4 has label -2"):
        load_dataset("g", root=tmp_path)


def test_a_split_of_unlabelled_nodes_is_refused(tmp_path, rng):
    y = np.arange(30) % 3
    y[[2, 5]] = -1
    train = np.zeros(30, bool)
    train[:10] = True
    val, test = np.roll(train, 10), np.roll(train, 20)
    write_graph(tmp_path / "g.npz", rng, y=y, train_mask=train, val_mask=val, test_mask=test)
    with pytest.raises(ValueError, match=r"train_mask selects 2 unlabelled nodes.*node 2"):
        load_dataset("g", root=tmp_path)


def test_a_dataset_checks_its_labels_when_made(rng):
    ds = load_dataset("synthetic", num_nodes=200, num_classes=3)
    fields = dict(
        graph=ds.graph,
        x=ds.x,
        train_mask=ds.train_mask,
        val_mask=ds.val_mask,
        test_mask=ds.test_mask,
        multi_label=False,
        metric="accuracy",
        scorer=scorer("accuracy"),
    )
    with pytest.raises(ValueError, match=r"num_classes=2\).*has label 2"):
        Dataset("d", y=ds.y, num_classes=2, **fields)
    with pytest.raises(ValueError, match="integers, got torch.float32"):
        Dataset("d", y=ds.y.float(), num_classes=3, **fields)
    with pytest.raises(ValueError, match="multi-label y must hold 0 or 1, found 2"):
        y = torch.zeros(200, 3, dtype=torch.long)
        y[7, 1] = 2
        Dataset("d", y=y, num_classes=3, **{**fields, "multi_label": True})


# ---------------------------------------------------------------------------- splits
def test_a_split_the_file_does_not_have_is_refused(tmp_path, rng):
    masks = {
        f"{s}_mask": np.roll(np.arange(30) < 10, 10 * i)
        for i, s in enumerate(("train", "val", "test"))
    }
    write_graph(tmp_path / "one.npz", rng, **masks)
    write_graph(tmp_path / "none.npz", rng)
    assert load_dataset("one", root=tmp_path, split=0).train_mask.sum() == 10
    with pytest.raises(
        ValueError, match=r"split=3 is not a split of .*one\.npz, which has one split"
    ):
        load_dataset("one", root=tmp_path, split=3)
    with pytest.raises(
        ValueError, match=r"split=1 is not a split of .*none\.npz.*at random by seed"
    ):
        load_dataset("none", root=tmp_path, split=1)
    for split in ("public", True, 1.0):
        with pytest.raises(ValueError, match=rf"split must be an integer.*got {split!r}"):
            load_dataset("one", root=tmp_path, split=split)


def test_ten_splits_name_the_file(tmp_path, rng):
    masks = {
        f"{s}_masks": np.stack([np.roll(np.arange(30) < 10, 10 * i + k) for k in range(10)])
        for i, s in enumerate(("train", "val", "test"))
    }
    write_graph(tmp_path / "ten.npz", rng, **masks)
    assert torch.equal(
        load_dataset("ten", root=tmp_path, split=4).val_mask,
        torch.from_numpy(masks["val_masks"][4]),
    )
    with pytest.raises(
        ValueError, match=r"split must be in \[0, 10\) for the 10 splits of .*ten\.npz"
    ):
        load_dataset("ten", root=tmp_path, split=-1)


# ---------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "typed, canonical",
    [
        ("AmazonProducts", "amazon-products"),
        ("amazon_products", "amazon-products"),
        ("Amazon-Products", "amazon-products"),
        ("AMAZONPRODUCTS", "amazon-products"),
        ("ogbn_arxiv", "ogbn-arxiv"),
        ("OGBN-Products", "ogbn-products"),
        ("IGB_Small", "igb-small"),
        ("igbTiny", "igb-tiny"),
        ("Synthetic", "synthetic"),
        ("cora", None),
        ("amazon", None),
    ],
)
def test_builtin_names_in_the_spellings_users_type(typed, canonical):
    assert builtin_name(typed) == canonical
    assert all(builtin_name(name) == name for name in BUILTIN)


@pytest.mark.parametrize("typed", ["AmazonProducts", "amazon_products", "AMAZON-products"])
def test_amazon_products_loads_by_the_readme_spelling(tmp_path, rng, typed):
    write_amazon(tmp_path, rng)
    ds = load_dataset(typed, root=tmp_path, progress=False)
    assert ds.name == "amazon-products" and ds.num_classes == 5 and ds.multi_label


def test_other_builtin_names_route_to_their_loader(tmp_path):
    assert load_dataset("Synthetic", num_nodes=100).name == "synthetic"
    with pytest.raises(FileNotFoundError, match=r"(?s)IGB homogeneous small.*node_feat\.npy"):
        load_dataset("IGB_Small", root=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"ogbn-arxiv \(ogb layout"):
        load_dataset("OGBN_Arxiv", root=tmp_path, download=False)
    with pytest.raises(ValueError, match="unknown IGB size 'huge'"):
        load_dataset("IGB_Huge", root=tmp_path)


def test_npz_graphs_load_by_any_spelling_of_their_file_name(tmp_path, rng):
    write_graph(tmp_path / "twitch_DE.npz", rng)
    for typed in ("twitch_DE", "twitch-de", "Twitch_DE", "twitchde"):
        assert load_dataset(typed, root=tmp_path).name == "twitch_DE"
    write_graph(tmp_path / "twitch-DE.npz", rng)
    assert load_dataset("twitch-DE", root=tmp_path).name == "twitch-DE"  # the exact name first
    with pytest.raises(ValueError, match="matches several graphs"):
        load_dataset("TWITCH_de", root=tmp_path)


def test_an_unknown_name_lists_the_graphs_and_builtin_datasets(tmp_path, rng):
    write_graph(tmp_path / "cora.npz", rng)
    with pytest.raises(
        FileNotFoundError, match=r"(?s)corra\.npz.*graphs there: cora.*amazon-products"
    ):
        load_dataset("corra", root=tmp_path)
