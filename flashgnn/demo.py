"""``flashgnn demo``: the sparse ops forward and backward on a generated power-law graph,
checked against scipy in float64."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
import torch

from .data.generators import power_law_csr
from .formats.mebcrs import MEBCRS
from .ops import PRECISIONS, edge_softmax, sddmm, spmm


def add_arguments(p) -> None:
    p.add_argument("--nodes", type=int, default=20000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)


def _rel_err(y: torch.Tensor, ref: np.ndarray) -> float:
    return float(
        np.linalg.norm(y.detach().double().cpu().numpy() - ref) / max(np.linalg.norm(ref), 1e-300)
    )


def run(args) -> int:
    rng = np.random.default_rng(args.seed)
    indptr, indices = power_law_csr(args.nodes, int(args.nodes * args.avg_degree), seed=args.seed)
    a = sp.csr_matrix(
        (rng.standard_normal(indices.size), indices, indptr), shape=(args.nodes, args.nodes)
    )
    device = torch.device(args.device)
    print(f"graph: {a.shape[0]} nodes, {a.nnz} nonzeros, device {device}")
    x = torch.randn(a.shape[1], args.features, generator=torch.Generator().manual_seed(args.seed))
    x_np = x.double().numpy()
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    worst = 0.0
    print(
        f"{'precision':<9} {'k':>2} {'build s':>8} {'spmm err':>10} {'sddmm err':>10} "
        f"{'grad err':>10}"
    )
    for precision in PRECISIONS:
        k = 4 if precision == "tf32" else 8
        t0 = time.perf_counter()
        fmt = MEBCRS.from_csr(
            a.indptr, a.indices, a.data.astype(np.float32), n_cols=a.shape[1], k=k, device=device
        )
        build_s = time.perf_counter() - t0
        xd = x.to(device).clone().requires_grad_()
        y = spmm(fmt, xd, precision)
        y.sum().backward()
        s = sddmm(fmt, y.detach(), xd.detach(), precision)
        p = edge_softmax(fmt, s)
        y_np = a @ x_np
        errs = (
            _rel_err(y, y_np),
            _rel_err(s[fmt.perm], np.einsum("ij,ij->i", y_np[rows], x_np[a.indices])),
            _rel_err(xd.grad, a.T @ np.ones((a.shape[0], args.features))),
        )
        assert torch.isfinite(p).all()
        worst = max(worst, *errs)
        print(
            f"{precision:<9} {k:>2} {build_s:>8.3f} {errs[0]:>10.2e} {errs[1]:>10.2e} "
            f"{errs[2]:>10.2e}"
        )
    print(f"worst relative error against float64 scipy: {worst:.2e}")
    return 0 if worst < 1e-2 else 1
