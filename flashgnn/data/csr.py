"""Edge lists and raw adjacencies to canonical CSR, chunk by chunk.

Canonical means what ``flashgnn.Graph`` and the ME-BCRS builder expect: int64 ``indptr``,
columns sorted and distinct within each row, no self-loops. Rows are destinations and
columns sources, so ``out[dst] += x[src]`` is one SpMM. Inputs may be memory-mapped: they
are read in chunks of ``chunk_size`` entries, so the extra memory is the output plus a
few chunks, and a progress bar (tqdm; hidden off a terminal) follows every pass.
"""

from __future__ import annotations

import numpy as np

from .progress import progress_bar

CHUNK_SIZE = 1 << 24


def _index_dtype(num_nodes: int) -> np.dtype:
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def _directed_chunks(src, dst, undirected: bool, chunk_size: int):
    """(rows, cols) chunks of the edges src -> dst (rows = dst), and of dst -> src too when
    ``undirected``."""
    directions = ((dst, src), (src, dst)) if undirected else ((dst, src),)
    for rows, cols in directions:
        for start in range(0, len(rows), chunk_size):
            stop = min(len(rows), start + chunk_size)
            yield (
                np.asarray(rows[start:stop], dtype=np.int64),
                np.asarray(cols[start:stop], dtype=np.int64),
            )


def _kept(rows: np.ndarray, cols: np.ndarray, num_nodes: int, drop_self_loops: bool):
    if rows.size:
        lo = min(int(rows.min()), int(cols.min()))
        hi = max(int(rows.max()), int(cols.max()))
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"edge endpoint {lo if lo < 0 else hi} is out of range [0, {num_nodes})"
            )
    if drop_self_loops:
        keep = rows != cols
        return rows[keep], cols[keep]
    return rows, cols


def _sorted_groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For sorted ``rows``: (distinct rows, their counts, start of each entry's group)."""
    if rows.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    counts = np.diff(np.r_[first, rows.size])
    return rows[first], counts, np.repeat(first, counts)


def _add_counts(counts: np.ndarray, rows: np.ndarray) -> None:
    """counts[r] += number of times r occurs in rows."""
    if len(counts) <= 8 * rows.size:
        counts += np.bincount(rows, minlength=len(counts))
    else:  # a short chunk of a huge graph: O(chunk log chunk), not O(num_nodes)
        distinct, n, _ = _sorted_groups(np.sort(rows))
        counts[distinct] += n


def edges_to_csr(
    src,
    dst,
    num_nodes: int,
    *,
    undirected: bool = False,
    drop_self_loops: bool = True,
    chunk_size: int = CHUNK_SIZE,
    progress: bool | None = None,
    desc: str = "edges -> CSR",
) -> tuple[np.ndarray, np.ndarray]:
    """Canonical CSR of the edges ``src[i] -> dst[i]`` (rows = destinations).

    src, dst: integer arrays [E] (NumPy arrays or memory maps). ``undirected`` adds every
    edge in both directions; duplicates are merged and, with ``drop_self_loops``, loops
    dropped. Returns (indptr int64 [num_nodes + 1], indices int32 [nnz], int64 when
    num_nodes >= 2^31).
    """
    if len(src) != len(dst):
        raise ValueError(f"src and dst must have the same length, got {len(src)} and {len(dst)}")
    num_nodes = int(num_nodes)
    total = len(src) * (2 if undirected else 1)
    counts = np.zeros(num_nodes, dtype=np.int64)
    with progress_bar(total, f"{desc} (count)", "edge", progress) as bar:
        for rows, cols in _directed_chunks(src, dst, undirected, chunk_size):
            rows, _ = _kept(rows, cols, num_nodes, drop_self_loops)
            _add_counts(counts, rows)
            bar.update(len(cols))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=_index_dtype(num_nodes))
    cursor = indptr[:-1].copy()
    with progress_bar(total, f"{desc} (fill)", "edge", progress) as bar:
        for rows, cols in _directed_chunks(src, dst, undirected, chunk_size):
            n_in = len(cols)
            rows, cols = _kept(rows, cols, num_nodes, drop_self_loops)
            # sorting one int64 key is several times faster than an argsort by rows
            rows, cols = np.divmod(np.sort(rows * num_nodes + cols), num_nodes)
            distinct, n, group_start = _sorted_groups(rows)
            indices[cursor[rows] + np.arange(rows.size) - group_start] = cols
            cursor[distinct] += n
            bar.update(n_in)
    return canonical_csr(
        indptr,
        indices,
        num_nodes,
        drop_self_loops=False,
        chunk_size=chunk_size,
        progress=progress,
        desc=desc,
    )


def canonical_csr(
    indptr,
    indices,
    num_cols: int,
    *,
    drop_self_loops: bool = True,
    chunk_size: int = CHUNK_SIZE,
    progress: bool | None = None,
    desc: str = "CSR",
) -> tuple[np.ndarray, np.ndarray]:
    """Sort the columns of every row, merge duplicates and (with ``drop_self_loops``)
    drop the diagonal. ``indices`` is rewritten in place when it is a writable array of the
    output dtype; the input is not otherwise copied. Returns (indptr int64, indices)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n_rows = len(indptr) - 1
    dtype = _index_dtype(max(num_cols, n_rows))
    if not (
        isinstance(indices, np.ndarray)
        and indices.dtype == dtype
        and indices.flags.writeable
        and not isinstance(indices, np.memmap)
    ):
        indices = np.array(indices, dtype=dtype)
    if (
        n_rows < 0
        or int(indptr[0]) != 0
        or int(indptr[-1]) != len(indices)
        or np.any(np.diff(indptr) < 0)
    ):
        raise ValueError("indptr must start at 0, be non-decreasing and end at len(indices)")
    new_counts = np.zeros(n_rows, dtype=np.int64)
    written = 0
    row = 0
    with progress_bar(len(indices), f"{desc} (sort)", "nnz", progress) as bar:
        while row < n_rows:
            # a block of rows holding about chunk_size entries (at least one row)
            end = int(np.searchsorted(indptr, indptr[row] + chunk_size, side="right")) - 1
            end = min(max(end, row + 1), n_rows)
            a, b = int(indptr[row]), int(indptr[end])
            cols = indices[a:b].astype(np.int64)
            if cols.size and (int(cols.min()) < 0 or int(cols.max()) >= num_cols):
                raise ValueError(
                    f"column index out of range [0, {num_cols}) in rows {row}..{end - 1}"
                )
            local = np.repeat(np.arange(end - row, dtype=np.int64), np.diff(indptr[row : end + 1]))
            keys = np.sort(local * num_cols + cols)
            keep = np.r_[True, keys[1:] != keys[:-1]] if keys.size else np.zeros(0, dtype=bool)
            local_rows, cols = np.divmod(keys[keep], num_cols)
            if drop_self_loops:
                off_diagonal = local_rows + row != cols
                local_rows, cols = local_rows[off_diagonal], cols[off_diagonal]
            # written <= a, so this never overwrites entries a later block still has to read
            indices[written : written + cols.size] = cols
            written += cols.size
            new_counts[row:end] = np.bincount(local_rows, minlength=end - row)
            bar.update(b - a)
            row = end
    out_ptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(new_counts, out=out_ptr[1:])
    # keep a view when little was dropped; copy to give the memory back when much was
    out = indices[:written] if written >= 0.75 * len(indices) else indices[:written].copy()
    return out_ptr, out
