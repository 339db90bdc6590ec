"""Graph: a directed graph stored for aggregation at destinations, with its ME-BCRS cached.

Edges go src -> dst and messages aggregate at dst, so the matrix a layer multiplies by is A
with ``A[dst, src] = w(edge)``: the CSR kept here has one row per destination listing its
in-edges (sources), sorted by source. ``Y = A @ X`` sums in-neighbours; gradients use A^T.

A graph is square (one node set: ``num_nodes``) or bipartite (``num_src_nodes`` sources,
``num_dst_nodes`` destinations, A of shape [num_dst, num_src]), as DGL's blocks of mini-batch
training are: give ``num_nodes=(num_src, num_dst)``. Layers then read source features [num_src, F]
and write [num_dst, F]; a single feature tensor holds the sources, of which the first num_dst are
the destinations (DGL's block convention).

Every edge keeps its id (its position in the input: the column of an ``edge_index``, the
DGL edge id, the nonzero of a sparse matrix in row-major order), so per-edge tensors given in
edge order (weights, attention) can be placed into the format and read back.

Duplicate edges: an edge list (``edge_index``, CSR arrays, PyG ``Data``, DGL graph) with the
same (src, dst) twice raises ValueError, because attention layers would have to treat the two
as separate neighbours while the format stores one value per (dst, src). A sparse *matrix*
(scipy, torch sparse COO) is taken as the matrix it denotes: duplicate entries are summed,
as scipy and torch define them. Explicitly stored zeros stay edges.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from .formats.block_diagonal import block_diagonal
from .formats.mebcrs import MEBCRS, build_canonical
from .formats.windowed import MAX_DIM, check_csr
from .ops.gcn_norm import NORMS, gcn_norm_factor, gcn_norm_values
from .reorder import Reordering, check_method, node_order
from .reorder.undirected import csr_rows
from .tensor_cache import built_for_reuse, tensor_version


def _device_key(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _as_tensor(a, name: str) -> torch.Tensor:
    if isinstance(a, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(a))
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(a).__name__}")
    return a


def _index_tensor(a, name: str) -> torch.Tensor:
    t = _as_tensor(a, name)
    if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
        raise TypeError(f"{name} must hold integer node ids, got {t.dtype}")
    ids = t.to(torch.int64)
    # an unsigned id of 2^63 or more wraps to a negative one
    if t.dtype == torch.uint64 and ids.numel() and bool((ids < 0).any()):
        raise ValueError(f"{name} holds ids of 2^63 or more, beyond int64")
    return ids


def _weight_tensor(w, num_edges: int, device: torch.device, name: str = "edge_weight"):
    """Validated per-edge weights [E] (floating point, on ``device``), or None."""
    if w is None:
        return None
    t = _as_tensor(w, name)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.shape != (num_edges,):
        raise ValueError(
            f"{name} must have shape ({num_edges},) (one value per edge), got {tuple(t.shape)}"
        )
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the edges are on {device}")
    bad = int((~torch.isfinite(t)).sum())
    if bad:
        raise ValueError(f"{name} holds {bad} NaN or infinite values")
    return t


# a complex sparse matrix: a cast to real would drop its imaginary part
_COMPLEX = (
    "the adjacency matrix is complex ({}); edge weights are real: pass its real part or magnitude"
)


def _count(n, name: str) -> int:
    """``n`` as an int, checked to be a number of nodes: at most MAX_DIM, as every format
    indexes nodes with int32 (a larger graph would wrap its column indices)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    if n > MAX_DIM:
        raise ValueError(
            f"{name} = {n} is more than 2^31 - 1 = {MAX_DIM}, the most nodes a graph can hold "
            "(its formats index nodes with int32)"
        )
    return int(n)


def _node_counts(num_nodes, ids: torch.Tensor) -> tuple[int, int]:
    """(num_src, num_dst) from ``num_nodes``: an int (a square graph), a pair (num_src, num_dst)
    (a bipartite one) or None (square, one more than the largest id in ``ids``, an
    ``edge_index`` [2, E], which must then be below MAX_DIM: checked before anything the size
    of the graph is allocated)."""
    if num_nodes is None:
        n = int(ids.max()) + 1 if ids.numel() else 0
        if n > MAX_DIM:
            row, pos = ((ids >= MAX_DIM).nonzero()[0]).tolist()
            raise ValueError(
                f"node id {int(ids[row, pos])} in edge_index[{row}] (edge {pos}) needs more than "
                f"2^31 - 1 = {MAX_DIM} nodes, the most a graph can hold (its formats index nodes "
                "with int32); number the nodes from 0"
            )
        return n, n
    if isinstance(num_nodes, (tuple, list)):
        if len(num_nodes) != 2:
            raise ValueError(
                f"num_nodes must be an int or a pair (num_src, num_dst), got {num_nodes!r}"
            )
        return _count(num_nodes[0], "num_src"), _count(num_nodes[1], "num_dst")
    n = _count(num_nodes, "num_nodes")
    return n, n


def _check_node_ids(
    ids: torch.Tensor,
    num_nodes: int,
    what: str,
    bounds: tuple[int, int] | None = None,
    unit: str = "edge",
) -> None:
    """Raise ValueError naming the first id of ``ids`` outside [0, num_nodes) and its position
    (``unit`` says what a position is); ``bounds``: (min, max) of ids when already read from
    the device."""
    if ids.numel() == 0:
        return
    lo, hi = bounds if bounds is not None else torch.stack([ids.min(), ids.max()]).tolist()
    if lo >= 0 and hi < num_nodes:
        return
    pos = int(((ids < 0) | (ids >= num_nodes)).nonzero()[0, 0])
    bad = int(ids[pos])
    if bad < 0:
        raise ValueError(f"negative node id {bad} in {what} ({unit} {pos})")
    raise ValueError(
        f"node id {bad} in {what} ({unit} {pos}) is out of range for {num_nodes} nodes"
    )


def _permutation_check(ids: torch.Tensor, n: int) -> torch.Tensor:
    """Whether ``ids`` (int64 [n]) holds every one of 0 .. n - 1, as a bool tensor on its
    device (read it when convenient: reading synchronises)."""
    in_range = (ids >= 0) & (ids < n)
    seen = torch.zeros(n + 1, dtype=torch.bool, device=ids.device)
    seen.index_fill_(0, torch.where(in_range, ids, n), True)
    return in_range.all() & seen[:n].all()


def _is_permutation(ids: torch.Tensor, n: int) -> bool:
    """Whether ``ids`` (int64) holds every one of 0 .. n - 1 (one host synchronisation)."""
    return ids.shape == (n,) and bool(_permutation_check(ids, n))


def _sort_keys(key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(key sorted, the stable order that sorts it). On the CPU an already sorted key skips the
    sort (seconds at 60M edges); on a GPU the sort costs less than the synchronisation of
    checking."""
    if not key.is_cuda and (key.numel() < 2 or bool((key[1:] > key[:-1]).all())):
        return key, torch.arange(key.numel(), device=key.device)
    return torch.sort(key, stable=True)


def _check_no_duplicates(key_sorted, order, src, dst, edge_ids=None) -> None:
    """Raise ValueError naming the first duplicate (src, dst) pair: ``key_sorted`` = the sorted
    dst * num_src + src of edges ``src[p]`` -> ``dst[p]``, ``order`` their positions p, whose edge
    ids are ``edge_ids[p]`` (None: p)."""
    dup = key_sorted[1:] == key_sorted[:-1]
    if bool(dup.any()):
        i = int(dup.nonzero()[0, 0])
        p1, p2 = int(order[i]), int(order[i + 1])
        e1, e2 = (p1, p2) if edge_ids is None else sorted((int(edge_ids[p1]), int(edge_ids[p2])))
        raise ValueError(
            f"duplicate edge {int(src[p1])} -> {int(dst[p1])} (edges {e1} and {e2}); "
            "merge duplicates first (e.g. sum their weights with torch_geometric.utils.coalesce)"
        )


def _csr_rows(indptr, indices, num_nodes, eids: torch.Tensor | None = None):
    """Validated (indptr, indices, destination of each position, (num_src, num_dst), whether a
    destination has no in-edge) of a CSR whose rows are destinations (``num_nodes``: None or an
    int for a square CSR, a pair (num_src, num_dst) for a bipartite one); the sources of a row
    may come in any order. ``eids`` (int64, DGL's edge ids), when given, must be a permutation of
    the positions.
    The checks are read from the device at once."""
    indptr = _index_tensor(indptr, "indptr")
    indices = _index_tensor(indices, "indices").to(indptr.device)
    if indptr.dim() != 1 or indices.dim() != 1 or indptr.numel() < 1:
        raise ValueError("indptr (non-empty) and indices must be 1-D")
    n_rows = _count(indptr.numel() - 1, "the rows of indptr")
    num_src, num_dst = (n_rows, n_rows) if num_nodes is None else _node_counts(num_nodes, indices)
    if n_rows != num_dst:
        raise ValueError(
            f"indptr has {n_rows} rows but there are {num_dst} destination nodes "
            f"(num_nodes = {num_nodes!r}); rows are destinations"
        )
    counts = indptr[1:] - indptr[:-1]
    nnz = indices.numel()
    checks = [indptr[0], indptr[-1], (counts < 0).any(), (counts == 0).any()]
    if eids is not None:
        checks.append(eids.shape == (nnz,) and _permutation_check(eids, nnz))
    checks += [indices.min(), indices.max()] if nnz else []
    values = torch.stack(
        [torch.as_tensor(c, device=indptr.device).to(torch.int64) for c in checks]
    ).tolist()
    first, last, decreasing, zero_in = values[:4]
    if first != 0 or last != nnz or decreasing:
        raise ValueError("indptr must start at 0, be non-decreasing and end at len(indices)")
    if eids is not None and not values[4]:
        raise ValueError(f"eids of adj_tensors('csc') must be a permutation of 0..{nnz - 1}")
    _check_node_ids(
        indices, num_src, "indices (sources)", tuple(values[-2:]) if nnz else None, "position"
    )
    dst = torch.repeat_interleave(
        torch.arange(n_rows, device=indptr.device), counts, output_size=nnz
    )
    return indptr, indices, dst, (num_src, num_dst), bool(zero_in)


class Graph:
    """A directed graph, stored as the CSR of A [dst, src]: square on ``num_nodes`` nodes, or
    bipartite from ``num_src_nodes`` sources to ``num_dst_nodes`` destinations.

    Build one with ``from_edge_index``, ``from_csr``, ``from_scipy``, ``from_torch_sparse``,
    ``from_pyg`` or ``from_dgl``; the constructor takes a canonical CSR (rows = destinations,
    sorted duplicate-free sources) and is the low-level entry.

    indptr: int64 [num_dst + 1]; indices: int64 [E], the source of each CSR position;
    num_nodes: an int (square), a pair (num_src, num_dst) (bipartite), or None (square, the
    rows of indptr); edge_ids: int64 [E], the edge id of each CSR position (None: the CSR order
    is the edge order); edge_weight: float [E] in edge order, or None (every weight 1).

    What the graph derives from its edge weights (the values of its formats, GCN's normalised
    values) follows them: it is rebuilt when ``edge_weight`` is modified in place or replaced,
    and while the weights require a gradient it is computed anew in every call with autograd
    on, so that each step's loss reaches them.
    """

    def __init__(self, indptr, indices, num_nodes=None, edge_ids=None, edge_weight=None):
        indptr = _index_tensor(indptr, "indptr")
        indices = _index_tensor(indices, "indices").to(indptr.device)
        if indptr.dim() != 1 or indices.dim() != 1:
            raise ValueError("indptr and indices must be 1-D")
        rows = _count(max(indptr.numel() - 1, 0), "the rows of indptr")
        num_src, num_dst = (rows, rows) if num_nodes is None else _node_counts(num_nodes, indices)
        if indptr.numel() != num_dst + 1:
            raise ValueError(
                f"indptr must have num_dst + 1 = {num_dst + 1} entries, got {indptr.numel()}"
            )
        check_csr(indptr, indices, num_src)
        num_edges = indices.numel()
        if edge_ids is None:
            edge_ids = torch.arange(num_edges, device=indptr.device)
        else:
            edge_ids = _index_tensor(edge_ids, "edge_ids").to(indptr.device)
            if not _is_permutation(edge_ids, num_edges):
                raise ValueError(f"edge_ids must be a permutation of 0..{num_edges - 1}")
        self._set(
            indptr,
            indices,
            (num_src, num_dst),
            edge_ids,
            _weight_tensor(edge_weight, num_edges, indptr.device),
        )

    def _set(self, indptr, indices, num_nodes: tuple[int, int], edge_ids, edge_weight) -> None:
        self.indptr = indptr
        self.indices = indices
        self.edge_ids = edge_ids
        self._edge_weight = edge_weight
        self.num_src_nodes, self.num_dst_nodes = num_nodes
        # formats and per-edge tables, keyed by what they depend on; shared by .to() copies.
        # An entry derived from the edge weights is (value, the weight tensor, its version).
        self._cache: dict = {}

    @property
    def edge_weight(self) -> torch.Tensor | None:
        """The weight of every edge, float [E] in edge-id order, or None (every weight 1).
        May be modified in place, replaced (checked as the constructors check it) or be a
        learnable parameter: what is derived from it follows (class docstring)."""
        return self._edge_weight

    @edge_weight.setter
    def edge_weight(self, weight) -> None:
        self._edge_weight = _weight_tensor(weight, self.num_edges, self.device)

    @property
    def is_bipartite(self) -> bool:
        """Whether sources and destinations are different node sets (of different sizes)."""
        return self.num_src_nodes != self.num_dst_nodes

    @property
    def num_nodes(self) -> int:
        """The number of nodes of a square graph (a bipartite one raises ValueError)."""
        if self.is_bipartite:
            raise ValueError(
                f"this graph is bipartite ({self.num_src_nodes} source, {self.num_dst_nodes} "
                "destination nodes): use num_src_nodes and num_dst_nodes"
            )
        return self.num_dst_nodes

    @property
    def node_counts(self) -> tuple[int, int]:
        """(num_src_nodes, num_dst_nodes), as the constructors' ``num_nodes`` takes them."""
        return self.num_src_nodes, self.num_dst_nodes

    # ------------------------------------------------------------------ constructors
    @classmethod
    def _from_edges(
        cls, src: torch.Tensor, dst: torch.Tensor, num_nodes: tuple[int, int], edge_weight
    ) -> Graph:
        """Edges in edge-id order -> canonical CSR of A [dst, src] on (num_src, num_dst) nodes;
        duplicates raise. The ids and weights must have been checked: the result, canonical by
        construction, is not checked again."""
        num_src, num_dst = num_nodes
        key_sorted, order = _sort_keys(dst * max(num_src, 1) + src)
        _check_no_duplicates(key_sorted, order, src, dst)
        # rows are sorted: each row's start is a binary search (bincount would synchronise)
        indptr = torch.searchsorted(
            key_sorted, torch.arange(num_dst + 1, device=key_sorted.device) * max(num_src, 1)
        )
        return cls._from_canonical(indptr, src[order], num_nodes, order, edge_weight)

    @classmethod
    def _from_canonical(
        cls,
        indptr,
        indices,
        num_nodes: tuple[int, int],
        edge_ids,
        edge_weight,
        zero_in: bool | None = None,
    ) -> Graph:
        """A Graph of a CSR canonical by construction, not checked; ``zero_in``: whether a
        destination has no in-edge, when the caller knows (layers read it)."""
        graph = cls.__new__(cls)
        graph._set(indptr, indices, num_nodes, edge_ids, edge_weight)
        if zero_in is not None:
            graph._cache[("zero_in",)] = zero_in
        return graph

    @classmethod
    def _from_rows(cls, rows: tuple, edge_ids: torch.Tensor | None, edge_weight) -> Graph:
        """The output of ``_csr_rows`` (rows of sources in any order) -> the canonical CSR, each
        row sorted by source (one sort of the whole); ``edge_ids``: the id of each input position
        (None: the position). Duplicates raise; the rest was checked."""
        indptr, indices, dst, num_nodes, zero_in = rows
        key_sorted, order = _sort_keys(dst * max(num_nodes[0], 1) + indices)
        _check_no_duplicates(key_sorted, order, indices, dst, edge_ids)
        return cls._from_canonical(
            indptr,
            indices[order],
            num_nodes,
            order if edge_ids is None else edge_ids[order],
            edge_weight,
            zero_in,
        )

    @classmethod
    def from_edge_index(cls, edge_index, num_nodes=None, edge_weight=None) -> Graph:
        """From ``edge_index`` [2, E] (row 0 = sources, row 1 = destinations, any integer
        dtype); edge i has id i and weight ``edge_weight[i]`` (float [E], default 1).
        ``num_nodes``: an int, (num_src, num_dst) for a bipartite graph (PyG's ``size``), or
        None (one more than the largest id)."""
        ei = _index_tensor(edge_index, "edge_index")
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {tuple(ei.shape)}")
        num_src, num_dst = _node_counts(num_nodes, ei)
        _check_node_ids(ei[0], num_src, "edge_index[0] (sources)")
        _check_node_ids(ei[1], num_dst, "edge_index[1] (destinations)")
        weight = _weight_tensor(edge_weight, ei.shape[1], ei.device)
        return cls._from_edges(ei[0], ei[1], (num_src, num_dst), weight)

    @classmethod
    def from_csr(cls, indptr, indices, num_nodes=None, edge_weight=None) -> Graph:
        """From a CSR whose rows are destinations: ``indices[indptr[d]:indptr[d+1]]`` are the
        sources of the in-edges of node d, in any order. Edge ids follow the CSR positions.
        ``num_nodes``: None or an int (square), or (num_src, num_dst)."""
        rows = _csr_rows(indptr, indices, num_nodes)
        weight = _weight_tensor(edge_weight, rows[1].numel(), rows[0].device)
        return cls._from_rows(rows, None, weight)

    @classmethod
    def from_scipy(cls, matrix) -> Graph:
        """From a scipy sparse matrix with ``matrix[dst, src]`` = weight of edge src -> dst
        (rows are destinations; [num_dst, num_src], bipartite when not square). Duplicate
        entries are summed; edge ids follow the row-major order of the nonzeros; weights are
        float32 (float64 kept)."""
        import scipy.sparse as sp

        if not sp.issparse(matrix):
            raise TypeError(f"expected a scipy sparse matrix, got {type(matrix).__name__}")
        if np.issubdtype(matrix.dtype, np.complexfloating):
            raise TypeError(_COMPLEX.format(matrix.dtype))
        m = sp.csr_matrix(matrix, copy=True)
        m.sum_duplicates()
        data = m.data if m.data.dtype == np.float64 else m.data.astype(np.float32)
        return cls(
            m.indptr.astype(np.int64),
            m.indices.astype(np.int64),
            (m.shape[1], m.shape[0]),
            edge_weight=torch.from_numpy(data),
        )

    @classmethod
    def from_torch_sparse(cls, t: torch.Tensor) -> Graph:
        """From a torch sparse COO or CSR tensor with ``t[dst, src]`` = weight ([num_dst,
        num_src], bipartite when not square). COO entries are coalesced (duplicates summed);
        edge ids follow the coalesced COO order or the CSR positions."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected a torch sparse tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"the adjacency matrix must be 2-D, got shape {tuple(t.shape)}")
        n = (t.shape[1], t.shape[0])
        if t.is_complex():
            raise TypeError(_COMPLEX.format(t.dtype))
        if t.layout == torch.sparse_coo:
            t = t.coalesce()
            rows, cols = t.indices()
            values = t.values()
            weight = values if values.is_floating_point() else values.to(torch.float32)
            if weight.dim() != 1:
                raise ValueError("sparse tensors with dense value dimensions are not supported")
            return cls.from_edge_index(torch.stack([cols, rows]), n, weight)
        if t.layout == torch.sparse_csr:
            values = t.values()
            weight = values if values.is_floating_point() else values.to(torch.float32)
            return cls.from_csr(t.crow_indices(), t.col_indices(), n, weight)
        raise ValueError(
            f"unsupported sparse layout {t.layout}; use torch.sparse_coo or torch.sparse_csr"
        )

    @classmethod
    def from_pyg(cls, data) -> Graph:
        """From a PyG ``Data``: ``edge_index`` ([src; dst]) and ``num_nodes``; the weights are
        ``edge_weight`` if set, else ``edge_attr`` when it holds one value per edge (a
        multi-dimensional ``edge_attr`` is edge features, not weights, and is not used)."""
        edge_index = getattr(data, "edge_index", None)
        if edge_index is None:
            raise ValueError("the PyG data object has no edge_index")
        weight = getattr(data, "edge_weight", None)
        if weight is None:
            attr = getattr(data, "edge_attr", None)
            if (
                attr is not None
                and attr.is_floating_point()
                and (attr.dim() == 1 or (attr.dim() == 2 and attr.shape[1] == 1))
            ):
                weight = attr
        return cls.from_edge_index(edge_index, data.num_nodes, weight)

    @classmethod
    def from_dgl(cls, g, edge_weight=None) -> Graph:
        """From a DGL graph or block, read through its interface (dgl is not imported): the
        in-edges of ``g.adj_tensors('csc')`` -> (indptr, indices, eids), where column d lists
        the sources of the edges into d and ``eids`` the edge id at each position (empty: 0, 1,
        ...), on ``g.num_src_nodes()`` sources and ``g.num_dst_nodes()`` destinations.
        ``edge_weight``: float [E] in DGL edge-id order, or the name of a key of ``g.edata``."""
        n_src, n_dst = int(g.num_src_nodes()), int(g.num_dst_nodes())
        indptr, indices, eids = g.adj_tensors("csc")
        eids = _index_tensor(eids, "eids").to(_as_tensor(indptr, "indptr").device)
        rows = _csr_rows(indptr, indices, (n_src, n_dst), eids if eids.numel() else None)
        if isinstance(edge_weight, str):
            edge_weight = g.edata[edge_weight]
        weight = _weight_tensor(edge_weight, rows[1].numel(), rows[0].device)
        return cls._from_rows(rows, eids if eids.numel() else None, weight)

    # ------------------------------------------------------------------ structure
    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    def dst_of_csr(self) -> torch.Tensor:
        """Destination of each CSR position, int64 [E] (cached)."""
        return self._cached(
            ("csr_dst",),
            lambda: torch.repeat_interleave(
                torch.arange(self.num_dst_nodes, device=self.device),
                self.indptr[1:] - self.indptr[:-1],
                output_size=self.num_edges,
            ),
        )

    def csr_pos(self) -> torch.Tensor:
        """CSR position of each edge id, int64 [E] (the inverse of ``edge_ids``, cached)."""

        def build():
            pos = torch.empty_like(self.edge_ids)
            pos[self.edge_ids] = torch.arange(self.num_edges, device=self.device)
            return pos

        return self._cached(("csr_pos",), build)

    @property
    def edge_index(self) -> torch.Tensor:
        """int64 [2, E]: [sources; destinations] in edge-id order."""
        pos = self.csr_pos()
        return torch.stack([self.indices[pos], self.dst_of_csr()[pos]])

    def in_degrees(self) -> torch.Tensor:
        """Number of in-edges of every destination node, int64 [num_dst_nodes]."""
        return self.indptr[1:] - self.indptr[:-1]

    def out_degrees(self) -> torch.Tensor:
        """Number of out-edges of every source node, int64 [num_src_nodes]."""
        ones = torch.ones_like(
            self.indices
        )  # index_add, unlike bincount, needs no host synchronisation
        return torch.zeros(self.num_src_nodes, dtype=torch.int64, device=self.device).index_add_(
            0, self.indices, ones
        )

    def has_zero_in_degree(self) -> bool:
        return self._cached(("zero_in",), lambda: bool((self.in_degrees() == 0).any()))

    def add_self_loops(self, fill_value: float = 1.0) -> Graph:
        """A new graph with a self-loop on every node that has none (existing loops are kept,
        so no duplicate arises). New loops get the ids E, E+1, ... and weight ``fill_value``.
        Square graphs only (a block's destinations are not its sources by id); not with a
        learnable weight (``_check_weight_copy``)."""
        if self.is_bipartite:
            raise ValueError(
                f"add_self_loops needs a square graph, got {self.num_src_nodes} source and "
                f"{self.num_dst_nodes} destination nodes"
            )
        self._check_weight_copy("add_self_loops")
        dst = self.dst_of_csr()
        has_loop = torch.zeros(self.num_nodes, dtype=torch.bool, device=self.device)
        has_loop[dst[self.indices == dst]] = True
        new = (~has_loop).nonzero()[:, 0]
        ei = self.edge_index
        weight = self.edge_weight
        if weight is not None or fill_value != 1.0:
            old = weight if weight is not None else torch.ones(self.num_edges, device=self.device)
            weight = torch.cat([old, old.new_full((new.numel(),), fill_value)])
        return Graph.from_edge_index(torch.cat([ei, new.expand(2, -1)], 1), self.num_nodes, weight)

    def reorder(self, method: str = "rcm", device=None) -> tuple[Graph, Reordering]:
        """(the graph renumbered by ``method``, its ``Reordering``): new node i is node
        ``perm[i]`` of this graph, so rows that share neighbours fall in the same ME-BCRS
        windows and neighbouring columns lie close. ``method``: one of ``reorder.METHODS``
        ("none", "rcm", "community", "degree", "metis"; ``reorder.node_order`` describes them),
        deterministic. The order and the renumbered CSR are computed on ``device`` (default:
        the graph's; a GPU for large graphs), the result lives on the graph's device.

        Edge ids, and so the edge weights (the same tensor, learnable or not), are kept: only
        node ids change. Node tensors move with ``Reordering.apply_to_nodes`` and come back to
        this graph's order with ``Reordering.restore``: a layer's output on the new graph from
        ``apply_to_nodes(x)``, restored, is its output on this one. Square graphs only; "none"
        returns this graph itself."""
        check_method(method)
        if self.is_bipartite:
            raise ValueError(
                f"reorder needs a square graph (one node set), got {self.num_src_nodes} source "
                f"and {self.num_dst_nodes} destination nodes"
            )
        if method == "none":
            return self, Reordering.identity(self.num_nodes, self.device)
        on = _device_key(self.device if device is None else device)
        indptr, indices = self.indptr.to(on), self.indices.to(on)
        reordering = Reordering.from_perm(node_order(indptr, indices, method), method)
        n = self.num_nodes
        new_dst = reordering.inverse[csr_rows(indptr, self.num_edges)]
        new_src = reordering.inverse[indices]
        key_sorted, order = _sort_keys(new_dst * max(n, 1) + new_src)
        new_indptr = torch.searchsorted(key_sorted, torch.arange(n + 1, device=on) * max(n, 1))
        graph = Graph._from_canonical(
            new_indptr.to(self.device),
            new_src[order].to(self.device),
            self.node_counts,
            self.edge_ids.to(on)[order].to(self.device),
            self._edge_weight,
            self._cache.get(("zero_in",)),
        )
        return graph, reordering.to(self.device)

    def to(self, device) -> Graph:
        """The same graph on ``device``; formats already built for any device are shared. A
        learnable weight cannot move (``_check_weight_copy``)."""
        device = torch.device(device)
        if _device_key(device) != self.device:
            self._check_weight_copy(f"to({str(device)!r})")
        moved = Graph.__new__(Graph)
        moved._set(
            *(t.to(device) for t in (self.indptr, self.indices)),
            self.node_counts,
            self.edge_ids.to(device),
            None if self.edge_weight is None else self.edge_weight.to(device),
        )
        moved._cache = {
            key: value for key, value in self._cache.items() if len(key) > 1 and key[1] == "format"
        }
        return moved

    def _check_weight_copy(self, method: str) -> None:
        """Raise when ``method`` would copy edge weights that are a learnable leaf tensor (a
        Parameter): the new graph would keep their values of now while training changes them."""
        weight = self._edge_weight
        if weight is not None and weight.is_leaf and weight.requires_grad:
            raise ValueError(
                f"Graph.{method} would copy the edge weights, a tensor that requires a gradient: "
                "the copy would keep their current values while training changes them. Build "
                "the new graph without them and set its edge_weight to a parameter of its own"
            )

    def __repr__(self) -> str:
        weighted = ", weighted" if self.edge_weight is not None else ""
        nodes = (
            f"num_src_nodes={self.num_src_nodes}, num_dst_nodes={self.num_dst_nodes}"
            if self.is_bipartite
            else f"num_nodes={self.num_nodes}"
        )
        return f"Graph({nodes}, num_edges={self.num_edges}, device={self.device}{weighted})"

    # ------------------------------------------------------------------ formats
    def _cached(self, key, build):
        if key not in self._cache:
            self._cache[key] = built_for_reuse(build)
        return self._cache[key]

    def _learns_weight(self) -> bool:
        """Whether the edge weights take part in autograd now: what is derived from them is
        then computed in the caller's autograd graph, never cached (a cached graph would be
        freed by the first backward, and hold the first step's weights)."""
        weight = self._edge_weight
        return weight is not None and weight.requires_grad and torch.is_grad_enabled()

    def _from_weight(self, key, build, *args):
        """The entry ``key`` derived from the edge weights: ``build(*args, stale)`` from the
        weights as they are now (detached), ``stale`` being the entry built from other weights
        or None, rebuilt when the weight tensor is replaced or modified in place (its version
        moves)."""
        weight = self._edge_weight
        version = None if weight is None else tensor_version(weight)
        entry = self._cache.get(key)
        if entry is None or entry[1] is not weight or entry[2] != version:
            stale = None if entry is None else entry[0]
            entry = self._cache[key] = (
                built_for_reuse(lambda: build(*args, stale)),
                weight,
                version,
            )
        return entry[0]

    def adj(self, k: int = 8, device=None) -> MEBCRS:
        """A [dst, src] in ME-BCRS with block width ``k`` (8: fp32/fp16/bf16, 4: tf32) on
        ``device`` (default: the graph's), values = edge weights as float32 (or 1). Built once
        per (device, k) and cached, its values refreshed when the weights change (while they
        require a gradient, a format of the cached pattern with values in this call's autograd
        graph); ``adj(...).transpose()`` is A^T, cached on it."""
        device = _device_key(self.device if device is None else device)
        if self._learns_weight():
            pattern = self._pattern(k, device)
            return pattern.with_values(pattern.values_from_csr(self._csr_values(True).to(device)))
        return self._from_weight((k, "format", device), self._build_adj, k, device)

    def _pattern(self, k: int, device: torch.device) -> MEBCRS:
        """``adj(k, device)`` as cached, whatever weights its values hold: for what reads its
        pattern only."""
        entry = self._cache.get((k, "format", device))
        if entry is not None:
            return entry[0]
        return self._from_weight((k, "format", device), self._build_adj, k, device)

    def _build_adj(self, k: int, device: torch.device, stale: MEBCRS | None) -> MEBCRS:
        """A's format on ``device`` holding the weights as they are now: ``stale``'s pattern
        when given, else built."""
        values = self._csr_values(False)
        if stale is not None:
            return stale.with_values(stale.values_from_csr(values.to(device)))
        fmt = build_canonical(self.indptr, self.indices, values, self.num_src_nodes, device, k)
        if device == self.device:
            fmt._csr = (self.indptr, self.indices)
        return fmt

    def adj_heads(self, heads: int, k: int = 8) -> MEBCRS:
        """diag(A, ..., A) with ``heads`` blocks on the graph's device (``block_diagonal``): the
        pattern of multi-head ops, one launch for every head, which pass their own values (the
        copies hold none: every value reads 0). Built once per (heads, k), cached; one head is
        ``adj(k)`` itself (unpadded, no copy of A and A^T)."""
        if heads == 1:
            return self.adj(k)
        device = _device_key(self.device)
        return self._cached(
            (k, "format", device, heads),
            lambda: block_diagonal(self._pattern(k, device), heads, with_values=False),
        )

    def edge_slots(self, k: int = 8) -> torch.Tensor:
        """Value slot of every edge of ``adj(k)`` in edge-id order, int64 [E] (cached)."""
        return self._cached(
            ("edge_slots", k),
            lambda: self._pattern(k, _device_key(self.device)).perm[self.csr_pos()],
        )

    def edge_values(self, values: torch.Tensor, k: int = 8) -> torch.Tensor:
        """Place per-edge ``values`` [E, ...] given in edge-id order into ``adj(k)``'s value
        layout [8 * n_vectors, ...]; slots outside the pattern are 0. Differentiable."""
        if values.shape[:1] != (self.num_edges,):
            raise ValueError(
                f"expected one value per edge ({self.num_edges}), got shape {tuple(values.shape)}"
            )
        return self._pattern(k, _device_key(self.device)).values_from_csr(values[self.edge_ids])

    def gcn_values(
        self,
        norm: str,
        k: int = 8,
        dtype: torch.dtype = torch.float32,
        edge_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """A's values for graph convolution in ``adj(k)``'s layout [8 * n_vectors]: the weight
        of each edge (``edge_weight`` [E] in edge-id order, else the graph's own, else 1)
        scaled by the degree normalisation ``norm`` (DGL's semantics, unweighted degrees
        clamped to >= 1): "both" w / sqrt(d_in(dst) d_out(src)), "right" w / d_in(dst),
        "left" w / d_out(src), "none" w. Cached when ``edge_weight`` is None, following the
        graph's weights as ``adj`` does."""
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        if edge_weight is not None:
            weight = _weight_tensor(edge_weight, self.num_edges, self.device)
            return self.edge_values(
                weight.to(dtype) * self._norm_factor(norm, dtype)[self.csr_pos()], k
            )
        if self._learns_weight():
            factor = self._norm_factor(norm, dtype)
            pattern = self._pattern(k, _device_key(self.device))
            return pattern.values_from_csr(factor * self._csr_weight(dtype, True))
        return self._from_weight(
            ("gcn_values", k, norm, dtype), self._build_gcn_values, k, norm, dtype
        )

    def _build_gcn_values(self, k: int, norm: str, dtype: torch.dtype, stale) -> torch.Tensor:
        """``gcn_values(norm, k, dtype)`` of the weights as they are now (detached)."""
        pattern = self._pattern(k, _device_key(self.device))
        weight = self._csr_weight(dtype, False)
        return gcn_norm_values(
            pattern, self.indptr, self.indices, self.num_src_nodes, norm, dtype, weight
        )

    def _csr_weight(self, dtype: torch.dtype, track_grad: bool) -> torch.Tensor | None:
        """The graph's edge weights in CSR order, [E] in ``dtype``, detached unless
        ``track_grad``; None when it has none."""
        weight = self._edge_weight
        if weight is None:
            return None
        return (weight if track_grad else weight.detach())[self.edge_ids].to(dtype)

    def _csr_values(self, track_grad: bool) -> torch.Tensor:
        """A's values in CSR order, float32 [E]: the edge weights (``_csr_weight``), or ones."""
        weight = self._csr_weight(torch.float32, track_grad)
        if weight is None:
            return torch.ones(self.num_edges, dtype=torch.float32, device=self.device)
        return weight

    def _norm_factor(self, norm: str, dtype: torch.dtype) -> torch.Tensor:
        """The degree normalisation of every CSR position, [E] in ``dtype`` (cached)."""
        return self._cached(
            ("norm", norm, dtype),
            lambda: gcn_norm_factor(self.indptr, self.indices, self.num_src_nodes, norm, dtype),
        )


_DGL_GRAPHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def as_graph(graph) -> Graph:
    """``graph`` itself when it is a Graph; a DGL-like graph (anything with ``adj_tensors``)
    converted with ``Graph.from_dgl`` once and remembered for as long as it lives."""
    if isinstance(graph, Graph):
        return graph
    if not hasattr(graph, "adj_tensors"):
        raise TypeError(
            f"expected a flashgnn.Graph or a DGL graph, got {type(graph).__name__}; build one with "
            "Graph.from_edge_index, from_scipy, from_torch_sparse or from_pyg"
        )
    try:
        cached = _DGL_GRAPHS.get(graph)
    except TypeError:  # neither hashable nor weak-referenceable: convert every time
        return Graph.from_dgl(graph)
    if cached is None or cached.num_edges != int(graph.num_edges()):
        cached = Graph.from_dgl(graph)
        try:
            _DGL_GRAPHS[graph] = cached
        except TypeError:
            pass
    return cached
