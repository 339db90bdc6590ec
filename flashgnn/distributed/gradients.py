"""What a data-parallel training loop reduces across ranks: the parameters' gradients and
the counts that scale each rank's loss.

Full-graph training computes, on each rank, the loss of its own training nodes. For the
summed gradients to equal the single-process gradient of the mean loss over all N training
nodes, each rank scales its local mean loss by n_local / N (equivalently, sums its nodes'
losses and divides by N), runs backward, and ``all_reduce_gradients`` sums the parameters'
gradients. Every rank must run the backward pass, one without training nodes included
(its loss is then 0 but still depends on the model), because the halo exchanges of the
backward pass are collectives."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .group import check_initialized, comm_device


def global_count(n, group=None) -> int:
    """Collective: the sum over the group's ranks of ``n`` (an int or an integer tensor of one
    element, e.g. ``mask.sum()``)."""
    check_initialized()
    if isinstance(n, torch.Tensor):
        if n.numel() != 1 or n.is_floating_point():
            raise ValueError(
                f"n must be an integer tensor of one element, got {n.dtype} {tuple(n.shape)}"
            )
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int or an integer tensor, got {type(n).__name__}")
    total = torch.tensor([n], dtype=torch.int64, device=comm_device(group))
    dist.all_reduce(total, group=group)
    return int(total)


def all_reduce_gradients(model: nn.Module, group=None) -> None:
    """Collective: replace every parameter's ``.grad`` by its sum over the group's ranks. The
    gradients of one dtype and device travel as one flat buffer (one all-reduce each). A
    parameter that has a gradient on some rank gets one on every rank (zeros where it had
    none); one without a gradient anywhere keeps None. Dense gradients only."""
    check_initialized()
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return
    has = torch.tensor(
        [p.grad is not None for p in params], dtype=torch.int32, device=comm_device(group)
    )
    dist.all_reduce(has, group=group)
    buckets: dict[tuple, list[torch.Tensor]] = {}
    for p, anywhere in zip(params, has.tolist()):
        if not anywhere:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse:
            raise TypeError("all_reduce_gradients takes dense gradients only")
        buckets.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    for grads in buckets.values():
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=group)
        start = 0
        for g in grads:
            g.copy_(flat[start : start + g.numel()].view_as(g))
            start += g.numel()
