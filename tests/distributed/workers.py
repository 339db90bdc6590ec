"""A group of worker processes that tests reuse (gloo on the CPU, or NCCL with one GPU per
rank, rank r on cuda:r): started once (spawned, meeting in a
file),
they run one task after another, each task a module-level function called on every rank as
``fn(rank, world, *args)``; the results come back as a list by rank. A task that raises on
any rank, or does not finish within the timeout, fails the test with the workers' tracebacks,
and the group is stopped (its collectives could not go on)."""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import traceback
from datetime import timedelta

import torch.multiprocessing as mp

START_TIMEOUT = 120  # seconds for the workers to import torch and join the group


def _serve(
    rank: int, world: int, rendezvous: str, backend: str, tasks, results, timeout: float
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method=f"file://{rendezvous}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout),
        )
        results.put((rank, True, "ready"))
    except Exception:
        results.put((rank, False, traceback.format_exc()))
        return
    while True:
        task = tasks.get()
        if task is None:
            break
        fn, args = task
        try:
            results.put((rank, True, fn(rank, world, *args)))
        except Exception:
            results.put((rank, False, traceback.format_exc()))
    dist.destroy_process_group()


class WorkerGroup:
    """``world`` processes serving tasks (see the module doc) on ``backend`` ("gloo" or
    "nccl"). ``timeout``: seconds a task (and each collective in it) may take."""

    def __init__(self, world: int, timeout: float = 60.0, backend: str = "gloo"):
        ctx = mp.get_context("spawn")
        self.world, self.timeout = world, timeout
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(world)]
        # the ranks meet in a file, not on a port another process could take first
        self._folder = tempfile.mkdtemp(prefix="flashgnn-workers-")
        rendezvous = os.path.join(self._folder, "rendezvous")
        self.procs = [
            ctx.Process(
                target=_serve,
                args=(rank, world, rendezvous, backend, self.tasks[rank], self.results, timeout),
                daemon=True,
            )
            for rank in range(world)
        ]
        for p in self.procs:
            p.start()
        self.broken = None
        self._collect(START_TIMEOUT, "starting the workers")

    def run(self, fn, *args) -> list:
        """``fn(rank, world, *args)`` on every rank; the list of its results by rank."""
        if self.broken:
            raise RuntimeError(f"the worker group stopped after an earlier failure: {self.broken}")
        for q in self.tasks:
            q.put((fn, args))
        return self._collect(self.timeout, fn.__name__)

    def _collect(self, timeout: float, what: str) -> list:
        out, errors = [None] * self.world, []
        for _ in range(self.world):
            try:
                rank, ok, value = self.results.get(timeout=timeout)
            except queue.Empty:
                errors.append(f"no answer within {timeout} s")
                break
            if ok:
                out[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
                if len(errors) == 1:  # the other ranks may wait in a collective: give them
                    timeout = min(timeout, 15)  # a little time to fail too, not the whole
        if errors:
            self.broken = what
            self.close()
            raise AssertionError(f"{what} failed on the workers:\n" + "\n".join(errors))
        return out

    def close(self) -> None:
        for q in self.tasks:
            try:
                q.put(None)
            except (ValueError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        shutil.rmtree(self._folder, ignore_errors=True)
