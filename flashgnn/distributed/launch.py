"""Starting the processes of a multi-process run, and what stops them all when one fails.

Two ways in. ``torchrun --nproc-per-node=N -m flashgnn train ...`` starts the processes and
sets RANK, WORLD_SIZE and LOCAL_RANK (``from_environment`` reads them); ``spawn(fn, N, ...)``
starts N processes itself (torch.multiprocessing, start method "spawn"), with the same
variables and a rendezvous file on this host. Either way each process joins one process group:
NCCL between GPUs (rank r on ``cuda:LOCAL_RANK``), gloo on the CPU, with a timeout on every
collective, so a rank left waiting on a dead peer raises instead of hanging.

A rank that raises writes its traceback for the parent and exits with status 1; the parent
then stops the other ranks (SIGTERM, then SIGKILL after a grace period), prints the failing
rank's traceback on stderr and raises ``RankFailedError`` with its last line.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DEFAULT_TIMEOUT_S = {"cuda": 300.0, "cpu": 60.0}
"""Seconds a collective may wait for its peers, per device type (config key
``distributed.timeout_s`` overrides it)."""
GRACE_PERIOD_S = 5.0
"""Seconds the surviving ranks get to exit after one failed, before they are terminated."""
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class RankFailedError(RuntimeError):
    """A rank of a spawned run raised (or died); ``rank`` is its index, ``details`` its
    traceback (or how it died)."""

    def __init__(self, rank: int, world: int, summary: str, details: str):
        super().__init__(f"rank {rank} of {world} failed: {summary}")
        self.rank = rank
        self.details = details


@dataclass(frozen=True)
class Placement:
    """Where this process sits in a run: ``rank`` of ``world`` processes, ``local_rank`` on
    its host (its GPU index)."""

    rank: int
    world: int
    local_rank: int


def from_environment() -> Placement | None:
    """The placement that torchrun (or ``spawn``) gives this process through RANK,
    WORLD_SIZE and LOCAL_RANK; None when WORLD_SIZE is not set. A malformed or partial set
    is a ValueError naming the variable."""
    if "WORLD_SIZE" not in os.environ:
        return None
    values = {}
    for key in _ENV:
        text = os.environ.get(key, "0" if key == "LOCAL_RANK" else None)
        if text is None:
            raise ValueError(f"WORLD_SIZE is set but {key} is not: start the run with torchrun")
        try:
            values[key] = int(text)
        except ValueError:
            raise ValueError(f"environment variable {key}={text!r} is not an integer") from None
    place = Placement(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
    if place.world < 1 or not 0 <= place.rank < place.world or place.local_rank < 0:
        raise ValueError(
            f"RANK={place.rank}, WORLD_SIZE={place.world}, LOCAL_RANK={place.local_rank} do not "
            "describe a rank of a run"
        )
    return place


def backend(device_type: str) -> str:
    """The process-group backend for ranks on ``device_type``: nccl on CUDA, else gloo."""
    return "nccl" if device_type == "cuda" else "gloo"


def join_group(
    place: Placement, device_type: str, timeout_s: float, init_method: str | None = None
) -> torch.device:
    """Join the default process group as ``place`` says and return this rank's device:
    ``cuda:<local_rank>`` on CUDA. The ranks meet at ``init_method``, by default torchrun's
    MASTER_ADDR and MASTER_PORT from the environment."""
    device = torch.device("cpu")
    if device_type == "cuda":
        if place.local_rank >= torch.cuda.device_count():
            raise ValueError(
                f"LOCAL_RANK {place.local_rank} has no GPU: {torch.cuda.device_count()} visible"
            )
        device = torch.device("cuda", place.local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend(device_type),
        init_method=init_method,
        rank=place.rank,
        world_size=place.world,
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device if device_type == "cuda" else None,
    )
    return device


def _rank_main(index: int, fn: Callable, world: int, rendezvous: str, device_type, timeout_s, args):
    """Body of spawned process ``index``: the environment torchrun would set, the process
    group (met in the file ``rendezvous``), then ``fn(*args)``."""
    os.environ.update(
        RANK=str(index),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(index),
    )
    # ranks of one host share its cores; more threads than cores slow every rank down (on
    # CUDA too: a rank's host work, building its rows, runs on them)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    # a rank killed by a signal (an abort inside a C++ library) prints every thread's Python
    # stack on its stderr, which the parent's stderr shows: otherwise only the signal is known
    faulthandler.enable(all_threads=True)
    join_group(Placement(index, world, index), device_type, timeout_s, f"file://{rendezvous}")
    fn(*args)
    _leave_together(f"{rendezvous}.leave", index, world, timeout_s)


def _leave_together(path: str, index: int, world: int, timeout_s: float) -> None:
    """Tear the process group down only once every rank has finished its last collective.

    A rank that closes its gloo connections while a peer is still completing the group's
    last operation (even a barrier, whose final messages can be in flight when the first
    rank returns from it) can make that peer abort. A file store outside the group says when
    every rank is past the barrier; only then does any rank destroy the group."""
    dist.barrier()
    store = dist.FileStore(path, world)
    store.set_timeout(datetime.timedelta(seconds=timeout_s))
    store.set(f"left{index}", "1")
    store.wait([f"left{r}" for r in range(world)])
    dist.destroy_process_group()


def spawn(
    fn: Callable, world: int, args: tuple = (), *, device_type: str, timeout_s: float
) -> None:
    """Run ``fn(*args)`` in ``world`` new processes, each a rank of one process group on
    ``device_type`` ("cuda" or "cpu") whose collectives time out after ``timeout_s``. ``fn``
    and ``args`` must be picklable (a module-level function). Returns when every rank has
    returned; raises RankFailedError for the first rank that fails, once the others are
    stopped."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an integer >= 1, got {world!r}")
    if device_type not in DEFAULT_TIMEOUT_S:
        raise ValueError(f"device_type must be 'cuda' or 'cpu', got {device_type!r}")
    # the ranks meet in a file of a fresh folder, not on a TCP port: a port found free can be
    # taken by another process before rank 0 listens on it
    folder = tempfile.mkdtemp(prefix="flashgnn-ranks-")
    context = mp.start_processes(
        _rank_main,
        args=(fn, world, os.path.join(folder, "rendezvous"), device_type, float(timeout_s), args),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    try:
        while not context.join(grace_period=GRACE_PERIOD_S):
            pass
    except mp.ProcessRaisedException as e:
        details = str(e).split("terminated with the following error:\n", 1)[-1].rstrip()
        print(f"rank {e.error_index} of {world} failed:\n{details}", file=sys.stderr)
        raise RankFailedError(e.error_index, world, details.splitlines()[-1], details) from None
    except mp.ProcessExitedException as e:
        raise RankFailedError(e.error_index, world, str(e), str(e)) from None
    finally:
        for process in context.processes:
            if process.is_alive():  # the parent itself was interrupted
                process.kill()
                process.join()
        shutil.rmtree(folder, ignore_errors=True)
