"""The graphs benchmarks run on: the real graphs of the shared datasets folder and generated
power-law graphs at OGB scale (cached on disk after the first generation)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.generators import power_law_csr

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = REPO_ROOT / ".data" / "generated"


@dataclass(frozen=True)
class GeneratedSpec:
    """Arguments of ``power_law_csr`` (symmetric graphs) and what the graph stands for."""

    num_nodes: int
    num_edges: int
    exponent: float
    like: str
    seed: int = 0

    def scaled(self, divisor: int) -> GeneratedSpec:
        edges = self.num_edges // divisor
        return GeneratedSpec(
            self.num_nodes // divisor, edges - edges % 2, self.exponent, self.like, self.seed
        )


# The exponents put the largest degree near the real graph's (17k for ogbn-products, 22k for
# Reddit); the average degrees are about 25 and 365.
GENERATED = {
    "powerlaw_products": GeneratedSpec(2_449_029, 60_000_000, 3.0, "ogbn-products"),
    "powerlaw_reddit": GeneratedSpec(232_965, 85_000_000, 3.5, "Reddit"),
}


@dataclass
class BenchGraph:
    """A square graph in canonical CSR: indptr int64 [num_nodes + 1], indices int32 [nnz]."""

    name: str
    indptr: np.ndarray
    indices: np.ndarray
    num_nodes: int
    generated: bool

    @property
    def nnz(self) -> int:
        return int(self.indices.size)


def data_dir(override: str | os.PathLike | None = None) -> Path | None:
    """The real datasets: ``override``, else ``$FLASHGNN_DATA``, else ``<repo>/../shared/datasets``;
    None when the folder does not exist."""
    path = Path(
        override or os.environ.get("FLASHGNN_DATA") or REPO_ROOT.parent / "shared" / "datasets"
    )
    return path if path.is_dir() else None


def real_graph_names(root: Path | None) -> list[str]:
    """Graph files of the datasets folder (every .npz but the DLMC weight matrices), sorted."""
    if root is None:
        return []
    return sorted(p.stem for p in root.glob("*.npz") if not p.stem.startswith("dlmc"))


def resolve_names(spec: str, root: Path | None, generated=tuple(GENERATED)) -> list[str]:
    """Graph names from a comma list that may also hold ``real``, ``generated`` and ``all``;
    ``generated``: the names of the benchmark's generated graphs."""
    real = real_graph_names(root)
    groups = {"real": real, "generated": list(generated), "all": real + list(generated)}
    names: list[str] = []
    for token in filter(None, (t.strip() for t in spec.split(","))):
        if token in groups:
            names += groups[token]
        elif token in real or token in generated:
            names.append(token)
        else:
            where = f"in {root}" if root else "(no datasets folder found: set FLASHGNN_DATA)"
            raise ValueError(
                f"unknown graph {token!r}: use real, generated, all, {', '.join(generated)} or "
                f"a graph {where}"
            )
    return list(dict.fromkeys(names))


def load_graph(
    name: str, root: Path | None, scale_divisor: int = 1, cache_dir: Path | None = DEFAULT_CACHE_DIR
) -> BenchGraph:
    """Graph ``name``: a real graph read from ``root``, or a generated one (its nodes and edges
    divided by ``scale_divisor``), read from ``cache_dir`` when generated before."""
    if name in GENERATED:
        spec = GENERATED[name].scaled(scale_divisor) if scale_divisor > 1 else GENERATED[name]
        label = name if scale_divisor == 1 else f"{name}/{scale_divisor}"
        indptr, indices = _generated_csr(spec, cache_dir)
        return BenchGraph(label, indptr, indices, spec.num_nodes, generated=True)
    if root is None:
        raise ValueError(f"graph {name!r} needs the datasets folder: set FLASHGNN_DATA")
    with np.load(root / f"{name}.npz") as d:
        indptr = d["indptr"].astype(np.int64)
        indices = d["indices"].astype(np.int32)
        num_nodes = int(d["num_nodes"])
    return BenchGraph(name, indptr, indices, num_nodes, generated=False)


def _generated_csr(spec: GeneratedSpec, cache_dir: Path | None) -> tuple[np.ndarray, np.ndarray]:
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / (
            f"powerlaw_n{spec.num_nodes}_e{spec.num_edges}_x{spec.exponent:g}_s{spec.seed}.npz"
        )
        if path.is_file():
            with np.load(path) as d:
                return d["indptr"], d["indices"]
    indptr, indices = power_law_csr(
        spec.num_nodes, spec.num_edges, exponent=spec.exponent, seed=spec.seed, symmetric=True
    )
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(partial, indptr=indptr, indices=indices)
            os.replace(partial, path)
        except OSError as e:  # a read-only checkout still benchmarks, it just regenerates
            print(f"note: could not cache {path.name} in {cache_dir}: {e}")
    return indptr, indices
