"""The halo exchange: each rank receives the rows of the remote source nodes its rows of A
read (its halo) from their owners, with ``torch.distributed.all_to_all_single``, and sends
the gradients of those rows back in the backward pass.

``HaloPlan`` holds who sends what to whom, computed once per graph, and moves rows both
ways (``send``, ``send_back``, at once or asynchronously); ``aggregation`` exchanges each
layer's rows through it in blocks of columns. It works with gloo (CPU tensors) and NCCL
(CUDA tensors) in any dtype, and the rows travel in the dtype of the input.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from .group import group_size


class HaloPlan:
    """The exchange lists of one rank.

    send_index: int64 [S], the own rows (local ids, 0 .. num_own - 1) each peer needs, peer 0's
    first, each peer's in the order that peer lists them in its halo; send_counts[p] and
    recv_counts[p] (Python ints): the rows sent to and received from peer p. The halo rows
    arrive grouped by owner, in increasing global id: the order of the local graph's sources
    after the own nodes."""

    def __init__(
        self,
        send_index: Tensor,
        send_counts: list[int],
        recv_counts: list[int],
        num_own: int,
        group=None,
    ):
        self.send_index = send_index
        self.send_counts = list(send_counts)
        self.recv_counts = list(recv_counts)
        self.num_own = num_own
        self.num_halo = sum(self.recv_counts)
        self.group = group

    @classmethod
    def build(cls, halo_ids: Tensor, part_ptr: Tensor, rank: int, group=None) -> HaloPlan:
        """Collective. ``halo_ids``: int64 [H], the global ids of the rank's remote sources,
        sorted and unique, on the device the group communicates on; ``part_ptr``: int64
        [world + 1], the parts' boundaries. One all-to-all of counts and one of ids."""
        world = group_size(group)
        device = halo_ids.device
        if world == 1:  # a group of one: nothing is exchanged (no collective either)
            lo, hi = int(part_ptr[rank]), int(part_ptr[rank + 1])
            return cls(halo_ids.new_empty(0), [0], [0], hi - lo, group)
        ptr = part_ptr.to(device)
        owners = torch.searchsorted(ptr, halo_ids, right=True) - 1
        recv = torch.bincount(owners, minlength=world)
        send = torch.empty_like(recv)
        dist.all_to_all_single(send, recv, group=group)
        recv_counts, send_counts = recv.tolist(), send.tolist()
        requested = halo_ids.new_empty(sum(send_counts))
        dist.all_to_all_single(requested, halo_ids, send_counts, recv_counts, group=group)
        lo, hi = int(part_ptr[rank]), int(part_ptr[rank + 1])
        send_index = requested - lo
        if requested.numel() and (int(requested.min()) < lo or int(requested.max()) >= hi):
            raise RuntimeError(
                f"rank {rank}: a peer asked for rows outside its part [{lo}, {hi}); the ranks "
                "disagree on the part boundaries"
            )
        return cls(send_index, send_counts, recv_counts, hi - lo, group)

    def send(self, x_own: Tensor, async_op: bool = False):
        """Send the rows of ``x_own`` [num_own, ...] that peers need; returns (halo rows
        [num_halo, ...], the work handle or None, the send buffer to keep alive until done)."""
        self._check_rows(x_own, self.num_own, "x_own")
        buffer = x_own.index_select(0, self.send_index)
        halo = x_own.new_empty((self.num_halo, *x_own.shape[1:]))
        if len(self.send_counts) == 1:  # no peer
            return halo, None, buffer
        work = dist.all_to_all_single(
            halo, buffer, self.recv_counts, self.send_counts, group=self.group, async_op=async_op
        )
        return halo, work, buffer

    def send_back(self, halo: Tensor, async_op: bool = False):
        """The reverse of ``send``: ``halo`` [num_halo, ...] goes to the owners of its rows;
        returns (rows received [S, ...] matching ``send_index``, work handle or None, buffer)."""
        self._check_rows(halo, self.num_halo, "halo")
        halo = halo.contiguous()
        received = halo.new_empty((self.send_index.numel(), *halo.shape[1:]))
        if len(self.send_counts) == 1:  # no peer
            return received, None, halo
        work = dist.all_to_all_single(
            received, halo, self.send_counts, self.recv_counts, group=self.group, async_op=async_op
        )
        return received, work, halo

    def add_to_owners(self, own: Tensor, received: Tensor) -> Tensor:
        """``own`` [num_own, ...] with the rows ``received`` from ``send_back`` added at
        ``send_index`` (in place). One index_add per peer: a peer's rows are distinct, so no
        row is added twice in one call and the sums come in peer order, the same every run."""
        start = 0
        for count in self.send_counts:
            if count:
                end = start + count
                own.index_add_(0, self.send_index[start:end], received[start:end])
                start = end
        return own

    def gather(self, x_own: Tensor) -> Tensor:
        """[x_own; halo rows] without autograd (degree counts, ids)."""
        halo, _, _ = self.send(x_own)
        return torch.cat([x_own, halo])

    def sum_to_owners(self, local: Tensor) -> Tensor:
        """Without autograd: per own node, the sum over ranks of ``local`` [num_own + num_halo,
        ...] (every rank's value for its copy of the node)."""
        received, _, _ = self.send_back(local[self.num_own :])
        return self.add_to_owners(local[: self.num_own].clone(), received)

    @staticmethod
    def _check_rows(t: Tensor, rows: int, name: str) -> None:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 1 or t.shape[0] != rows:
            raise ValueError(f"{name} must have {rows} rows, got shape {tuple(t.shape)}")
