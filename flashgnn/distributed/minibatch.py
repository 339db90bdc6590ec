"""Mini-batch training across ranks: every rank holds the whole graph and draws the same
batches in the same order; each takes its share of every batch's seed nodes, samples their
blocks with the one NeighborSampler, and the model, wrapped in DistributedDataParallel,
averages the gradients across ranks.

The shares of a batch are the pieces of ``Tensor.tensor_split(world)`` (sizes differ by one
at most; a piece may be empty), so together they are the batch of a one-process run. A rank's
loss is the sum of its seeds' losses times ``world / len(batch)``: DDP's mean over the ranks
then gives the gradients of the batch's mean loss, as one process computes them.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel


def rank_seeds(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s share of ``batch`` (int64 [B] seed ids): the ``rank``-th piece of
    ``batch.tensor_split(world)``."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    return batch.tensor_split(world)[rank]


def loss_divisor(batch_size: int, world: int) -> float:
    """What a rank divides its seeds' summed loss by so that DDP's gradient mean over
    ``world`` ranks equals the gradient of the batch's mean loss."""
    return batch_size / world


def data_parallel(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    """``model`` (already on ``device``) in DistributedDataParallel on the default process
    group; building it copies rank 0's parameters to every rank."""
    return DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
