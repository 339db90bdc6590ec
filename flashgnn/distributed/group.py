"""The process group a distributed object runs on: its size, this process's rank in it, and
the device its collectives take tensors on."""

from __future__ import annotations

import torch
import torch.distributed as dist


def check_initialized() -> None:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call torch.distributed.init_process_group "
            "(or start the processes with torchrun) first"
        )


def group_size(group=None) -> int:
    check_initialized()
    return dist.get_world_size(group)


def group_rank(group=None) -> int:
    check_initialized()
    return dist.get_rank(group)


def check_device(device: torch.device, group=None) -> None:
    """ValueError when the group's backend cannot take tensors on ``device``: NCCL moves CUDA
    tensors, gloo CPU tensors (a backend string naming both, e.g. "cpu:gloo,cuda:nccl",
    takes either)."""
    backend = str(dist.get_backend(group)).lower()
    if backend == "nccl" and device.type != "cuda":
        raise ValueError(
            f"the process group's backend is NCCL, which needs a CUDA device, got {device}"
        )
    if backend == "gloo" and device.type != "cpu":
        raise ValueError(
            f"the process group's backend is gloo, which exchanges CPU tensors, got {device}; "
            "use NCCL for CUDA devices"
        )


def comm_device(group=None) -> torch.device:
    """A device the group's collectives take tensors on: the current CUDA device for NCCL,
    else the CPU."""
    if str(dist.get_backend(group)).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def first_rank(group=None) -> int:
    """The global rank of the group's rank 0 (what broadcast's ``src`` takes)."""
    check_initialized()
    return 0 if group is None else dist.get_global_rank(group, 0)
