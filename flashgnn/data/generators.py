"""Random graphs with power-law degrees, generated vectorised in NumPy.

Used where a benchmark or test needs a graph at OGB scale that is not on disk: the
ogbn-products-like graph (2.4M nodes, ~60M nonzeros) and the Reddit-like one (233k nodes,
~85M nonzeros) of the kernel benchmark.
"""

from __future__ import annotations

import numpy as np

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
