"""A training run's view of its processes: which rank this is, and the few collectives the
loop needs beyond the gradients (sums of counts and losses, objects for the report).

One process is the world of one rank, where every collective is the identity, so the loop
reads the same either way. Counts travel as float64 on the run's device (NCCL moves device
tensors only), which holds integers exactly up to 2^53.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """Rank ``rank`` of ``world`` processes of the default process group (world 1: no
    group); collectives run on ``device``."""

    rank: int
    world: int
    device: torch.device

    @classmethod
    def of_this_process(cls, device: torch.device) -> Ranks:
        """This process's rank in the default process group, or rank 0 of 1 without one."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), device)
        return cls(0, 1, device)

    @property
    def writer(self) -> bool:
        """Whether this rank writes the run folder (rank 0 only)."""
        return self.rank == 0

    def sum(self, values: Sequence[float] | torch.Tensor) -> list[float]:
        """The element-wise sum over ranks of ``values`` (numbers, or a tensor of them)."""
        t = torch.as_tensor(values, dtype=torch.float64).flatten().to(self.device)
        if self.world > 1:
            dist.all_reduce(t)
        return t.tolist()

    def gather(self, obj) -> list:
        """``obj`` of every rank, in rank order (any picklable object)."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers into every rank's ``module``."""
        if self.world > 1:
            for t in module.state_dict().values():
                dist.broadcast(t, 0)

    def rank_seed(self, seed: int, epoch: int) -> int:
        """The seed of this rank's own random stream (dropout, sampling) from ``epoch`` on;
        rank 0 keeps ``seed``'s stream, which makes a one-rank run the single-process one."""
        return int(np.random.SeedSequence([seed, self.rank, epoch]).generate_state(1)[0])


def score_parts(metric: str, logits: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """The two sums behind ``metric`` on these rows, which add up across ranks: accuracy as
    (correct, rows), micro-F1 as (2 * true positives, 2 * true positives + wrong labels)."""
    if metric == "accuracy":
        return float((logits.argmax(dim=-1) == y).sum()), float(y.shape[0])
    if metric == "f1_micro":
        pred, truth = logits > 0, y.bool()
        tp = 2 * float((pred & truth).sum())
        return tp, tp + float((pred ^ truth).sum())
    raise ValueError(
        f"the metric {metric!r} is not a sum over nodes, so it is not aggregated across ranks; "
        "train this dataset with train.devices=1"
    )


def aggregate_scores(
    ranks: Ranks, metric: str, logits: torch.Tensor, y: torch.Tensor, masks: Sequence
) -> list[float]:
    """The score of each split (``masks``: bool over the rows of ``logits``) over the rows of
    every rank: one all-reduce for them all. Micro-F1 of a split without any label or
    prediction is 1, as ``metrics.f1_micro`` has it."""
    parts = []
    for mask in masks:
        rows = mask.nonzero().flatten()
        parts.extend(score_parts(metric, logits.index_select(0, rows), y.index_select(0, rows)))
    sums = ranks.sum(parts)
    scores = []
    for num, den in zip(sums[0::2], sums[1::2]):
        if den == 0 and metric == "accuracy":
            raise ValueError("accuracy of an empty set of nodes")
        scores.append(num / den if den else 1.0)
    return scores
