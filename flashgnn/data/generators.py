"""Random graphs with power-law degrees, generated vectorised in NumPy.

Used where a benchmark or test needs a graph at OGB scale that is not on disk: the
ogbn-products-like graph (2.4M nodes, ~60M nonzeros) and the Reddit-like one (233k nodes,
~85M nonzeros) of the kernel benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

_MAX_ROUNDS = 64


def power_law_csr(
    num_nodes: int, num_edges: int, exponent: float = 2.5, seed: int = 0, symmetric: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """A random graph whose degrees follow a power law P(d) ~ d^-exponent, as canonical CSR.

    A Chung-Lu model: node of rank i (1-based) gets weight i^(-1 / (exponent - 1)), both
    ends of every edge are drawn with probability proportional to the weights, node ids are
    shuffled (so hubs are not packed into the first rows), self loops and duplicates are
    dropped and sampling continues until exactly ``num_edges`` nonzeros remain.

    num_edges counts stored nonzeros; with ``symmetric`` every edge is stored in both
    directions, so it must be even. Returns (indptr int64 [num_nodes + 1], indices int32
    [num_edges]): columns sorted within each row, no duplicates, no self loops.
    Deterministic for a given seed.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0:
        raise ValueError(f"num_nodes must be a non-negative integer, got {num_nodes!r}")
    if num_nodes >= 2**31:
        raise ValueError(f"num_nodes must be below 2^31 (int32 column indices), got {num_nodes}")
    if isinstance(num_edges, bool) or not isinstance(num_edges, (int, np.integer)) or num_edges < 0:
        raise ValueError(f"num_edges must be a non-negative integer, got {num_edges!r}")
    if not exponent > 1:
        raise ValueError(f"exponent must be > 1 (P(d) ~ d^-exponent), got {exponent}")
    if symmetric and num_edges % 2:
        raise ValueError(
            f"a symmetric graph stores every edge twice: num_edges must be even, got {num_edges}"
        )
    n = int(num_nodes)
    pairs = num_edges // 2 if symmetric else int(num_edges)
    possible = n * (n - 1) // 2 if symmetric else n * (n - 1)
    if pairs > possible // 2:
        raise ValueError(
            f"{num_edges} nonzeros is more than half of the {possible * (2 if symmetric else 1)} "
            f"possible on {n} nodes; a power-law sampler cannot fill a graph that dense"
        )
    rng = np.random.default_rng(seed)
    keys = _sample_edge_keys(rng, n, pairs, 1.0 / (exponent - 1.0), symmetric)
    if symmetric:
        low, high = np.divmod(keys, n)
        keys = np.sort(np.concatenate([keys, high * n + low]))
    src, dst = np.divmod(keys, n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst.astype(np.int32)


def _sample_edge_keys(
    rng: np.random.Generator, n: int, target: int, alpha: float, undirected: bool
) -> np.ndarray:
    """``target`` distinct edges as sorted int64 keys src * n + dst (src < dst when undirected)."""
    relabel = rng.permutation(n).astype(np.int64)
    keys = np.empty(0, dtype=np.int64)
    draw = int(target * 1.05) + 16
    for _ in range(_MAX_ROUNDS):
        if keys.size >= target:
            break
        src = relabel[_power_law_ranks(rng, n, alpha, draw)]
        dst = relabel[_power_law_ranks(rng, n, alpha, draw)]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        if undirected:
            src, dst = np.minimum(src, dst), np.maximum(src, dst)
        before = keys.size
        keys = _sorted_unique(np.concatenate([keys, src * n + dst]))
        # how many draws gave a new edge this round predicts how many the rest will need
        yield_rate = max((keys.size - before) / draw, 1e-3)
        draw = min(int((target - keys.size) / yield_rate * 1.1) + 16, 4 * target + 16)
    if keys.size < target:
        raise RuntimeError(
            f"power_law_csr: only {keys.size} of {target} distinct edges after {_MAX_ROUNDS} "
            f"rounds; "
            "ask for fewer edges or a larger exponent (lighter hubs)"
        )
    if keys.size > target:
        drop = rng.choice(keys.size, size=keys.size - target, replace=False)
        keys = np.delete(keys, drop)
    return keys


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values; one in-place sort (np.unique hashes first, and is much slower)."""
    keys.sort()
    first = np.ones(keys.size, dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def _power_law_ranks(rng: np.random.Generator, n: int, alpha: float, size: int) -> np.ndarray:
    """``size`` ranks in [0, n) drawn with P(rank i) ~ (i + 1)^-alpha, by inverting the CDF of
    the continuous density x^-alpha on [1, n + 1) (a Zipf law without a search per draw)."""
    u = rng.random(size)
    if abs(alpha - 1.0) < 1e-9:
        x = np.exp(u * np.log(n + 1.0))
    else:
        a = 1.0 - alpha
        x = (1.0 + u * ((n + 1.0) ** a - 1.0)) ** (1.0 / a)
    return np.minimum(x.astype(np.int64) - 1, n - 1)


BLOCK_NODES = 1 << 16
"""Nodes per block of ``igb_like_rows``: each block's rows come from a generator seeded by
(seed, block), so any range of rows is the same whoever generates it."""


def _coprime_multiplier(n: int, seed: int) -> int:
    """An odd multiplier near 0.618 n, coprime to ``n``: node id = (m * rank + offset) mod n
    spreads the hubs (low popularity ranks) over the whole id range."""
    m = int(n * 0.6180339887) | 1
    m += seed % 1024 * 2
    while math.gcd(m, n) != 1:
        m += 2
    return m % n or 1


class IGBLike:
    """A directed power-law graph at IGB scale, generated one block of destination rows at a
    time with nothing global but a few numbers, so that a rank builds its own rows alone.

    Node v has a popularity rank r (v = (m r + offset) mod n, a bijection), its class is
    r mod ``num_classes``, its in-degree Poisson with mean proportional to (r + 1)^-alpha
    (alpha = 1 / (exponent - 1)), capped at sqrt(num_edges), and every in-edge's source has
    a popularity rank drawn with P(r) ~ (r + 1)^-alpha: within v's class with probability
    ``homophily``, else among all nodes. Self-loops and repeated sources are dropped, so a
    graph holds somewhat fewer than ``num_edges`` edges. Features are the class centre
    (``signal`` * N(0, 1) per entry) plus N(0, 1) noise, as float16; each node is in train,
    val or test with probability 0.6, 0.2, 0.2.
    """

    def __init__(
        self,
        num_nodes: int,
        num_edges: int,
        num_features: int = 1024,
        num_classes: int = 19,
        exponent: float = 2.5,
        homophily: float = 0.6,
        signal: float = 0.3,
        seed: int = 0,
    ):
        for name, value, low in (
            ("num_nodes", num_nodes, 2),
            ("num_edges", num_edges, 0),
            ("num_features", num_features, 1),
            ("num_classes", num_classes, 2),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if num_classes > num_nodes:
            raise ValueError(f"num_classes ({num_classes}) exceeds num_nodes ({num_nodes})")
        if not exponent > 1:
            raise ValueError(f"exponent must be > 1, got {exponent}")
        if not 0 <= homophily <= 1 or not signal >= 0:
            raise ValueError(
                f"homophily must be in [0, 1] and signal >= 0, got {homophily}, {signal}"
            )
        self.n, self.num_edges = int(num_nodes), int(num_edges)
        self.num_features, self.num_classes = int(num_features), int(num_classes)
        self.alpha, self.homophily, self.seed = 1.0 / (exponent - 1.0), homophily, int(seed)
        self.mult = _coprime_multiplier(self.n, self.seed)
        self.offset = int(np.random.default_rng([self.seed, 0]).integers(self.n))
        # sum of (r + 1)^-alpha over r < n, by the integral on [0.5, n + 0.5)
        a = 1.0 - self.alpha
        if abs(a) < 1e-9:
            total = math.log((self.n + 0.5) / 0.5)
        else:
            total = ((self.n + 0.5) ** a - 0.5**a) / a
        self.degree_scale = self.num_edges / total
        self.max_degree = max(1.0, math.sqrt(self.num_edges))
        self.centres = signal * np.random.default_rng([self.seed, 1]).standard_normal(
            (self.num_classes, self.num_features), dtype=np.float32
        )

    def popularity(self, nodes: np.ndarray) -> np.ndarray:
        """int64 popularity rank of each node id."""
        inverse = pow(self.mult, -1, self.n)
        return (nodes - self.offset) % self.n * inverse % self.n

    def node_ids(self, ranks: np.ndarray) -> np.ndarray:
        return (ranks * self.mult + self.offset) % self.n

    def labels(self, nodes: np.ndarray) -> np.ndarray:
        return self.popularity(nodes) % self.num_classes

    def _bounds(self, b: int) -> tuple[int, int]:
        return b * BLOCK_NODES, min(self.n, (b + 1) * BLOCK_NODES)

    @property
    def num_blocks(self) -> int:
        return -(-self.n // BLOCK_NODES)

    def split(self, b: int) -> np.ndarray:
        """int8 [rows] of block ``b``: 0 train, 1 val, 2 test."""
        lo, hi = self._bounds(b)
        u = np.random.default_rng([self.seed, 4, b]).random(hi - lo)
        return (u >= 0.6).astype(np.int8) + (u >= 0.8)

    def block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Block ``b``'s rows: (indptr int64 [rows + 1], indices int64 [nnz] source ids,
        sorted and distinct per row)."""
        lo, hi = self._bounds(b)
        rng = np.random.default_rng([self.seed, 2, b])
        dst = np.arange(lo, hi, dtype=np.int64)
        rank = self.popularity(dst)
        mean = np.minimum(self.degree_scale * (rank + 1.0) ** -self.alpha, self.max_degree)
        degree = rng.poisson(mean)
        rows = np.repeat(np.arange(hi - lo, dtype=np.int64), degree)
        same = rng.random(rows.size) < self.homophily
        cls = (rank % self.num_classes)[rows]
        count = np.where(same, (self.n - cls + self.num_classes - 1) // self.num_classes, self.n)
        drawn = _power_law_ranks(rng, count, self.alpha, rows.size)
        src = self.node_ids(np.where(same, drawn * self.num_classes + cls, drawn))
        keep = src != dst[rows]
        keys = _sorted_unique(rows[keep] * self.n + src[keep])
        rows, src = np.divmod(keys, self.n)
        indptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=hi - lo), out=indptr[1:])
        return indptr, src

    def features(self, b: int, out: np.ndarray | None = None) -> np.ndarray:
        """float16 [rows, num_features] of block ``b``, written into ``out`` (a contiguous
        float16 array of that shape) when given. The noise comes from torch's generator
        (seeded by (seed, block)), several times faster than numpy's normals: at IGB-large
        scale a rank draws 25 billion of them."""
        lo, hi = self._bounds(b)
        seed = int(np.random.SeedSequence([self.seed, 3, b]).generate_state(1, np.uint64)[0])
        generator = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
        labels = torch.from_numpy(self.labels(np.arange(lo, hi, dtype=np.int64)))
        shape = (hi - lo, self.num_features)
        x = None if out is None else torch.from_numpy(out)
        x = torch.randn(shape, generator=generator, dtype=torch.float16, out=x)
        x += torch.nn.functional.embedding(labels, torch.from_numpy(self.centres).half())
        return x.numpy()

    def rows_of(
        self,
        nodes: np.ndarray,
        features: bool = True,
        workers: int = 1,
        features_out: Callable[[tuple[int, int]], np.ndarray | None] | None = None,
    ):
        """The rows of ``nodes`` (int64, ascending, distinct): (indptr int64 [len + 1], indices
        int64 source ids, labels int64 [len], split int8 [len], features float16 [len, F] or
        None), built from the blocks that hold them, ``workers`` blocks at a time on threads
        (each block draws from its own seeded streams: any number of workers gives the same
        rows). ``features_out(shape)``: the float16 array the features are written into (e.g.
        registered host memory), or None for a new one."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if nodes.size and (nodes[0] < 0 or nodes[-1] >= self.n or np.any(np.diff(nodes) <= 0)):
            raise ValueError(f"nodes must be ascending distinct ids of the {self.n} nodes")
        split = np.empty(nodes.size, dtype=np.int8)
        x = None
        if features:
            shape = (nodes.size, self.num_features)
            x = None if features_out is None else features_out(shape)
            if x is None:
                x = np.empty(shape, dtype=np.float16)
            elif x.shape != shape or x.dtype != np.float16:
                raise ValueError(f"features_out gave {x.dtype} {x.shape}, not float16 {shape}")
        block_of = nodes // BLOCK_NODES

        def rows_of_block(b: int) -> tuple[np.ndarray, np.ndarray]:
            at = np.flatnonzero(block_of == b)
            local = nodes[at] - b * BLOCK_NODES
            indptr, src = self.block(int(b))
            starts, lengths = indptr[local], indptr[local + 1] - indptr[local]
            placed = np.cumsum(lengths) - lengths  # where each row's edges go in the result
            take = np.repeat(starts - placed, lengths) + np.arange(int(lengths.sum()))
            split[at] = self.split(int(b))[local]
            if features:
                if local.size == BLOCK_NODES or local.size == self.n - b * BLOCK_NODES:
                    # the whole block, in consecutive rows: drawn in place
                    self.features(int(b), out=x[at[0] : at[0] + local.size])
                else:
                    x[at] = self.features(int(b))[local]
            return lengths, src[take]

        blocks = np.unique(block_of)
        if workers > 1 and blocks.size > 1:
            # one intra-op thread per block: the blocks are the parallelism
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                with ThreadPoolExecutor(min(workers, blocks.size)) as pool:
                    done = list(pool.map(rows_of_block, blocks))
            finally:
                torch.set_num_threads(threads)
        else:
            done = [rows_of_block(b) for b in blocks]
        counts = [np.zeros(1, dtype=np.int64)] + [lengths for lengths, _ in done]
        parts = [np.zeros(0, dtype=np.int64)] + [src for _, src in done]
        del done
        labels = self.labels(nodes)
        return np.cumsum(np.concatenate(counts)), np.concatenate(parts), labels, split, x

    def rows(self, lo: int, hi: int, features: bool = True, workers: int = 1):
        """``rows_of`` the nodes lo .. hi - 1."""
        if not 0 <= lo <= hi <= self.n:
            raise ValueError(f"rows [{lo}, {hi}) are not a range of the {self.n} nodes")
        return self.rows_of(np.arange(lo, hi, dtype=np.int64), features, workers)

    def split_sizes(self) -> tuple[int, int, int]:
        """Nodes in train, val and test of the whole graph (the splits alone, no edges)."""
        counts = sum(np.bincount(self.split(b), minlength=3) for b in range(self.num_blocks))
        return tuple(int(c) for c in counts)
