"""A full disk: a checkpoint, metrics.csv or config.yaml that cannot be written says so and
names the file, the previous version stays intact and no partial temp file is left to keep
the disk full. The device is simulated: writes fail with ENOSPC after part of the file."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest
import torch

from flashgnn.training import atomic, checkpoint, train
from flashgnn.training.atomic import DiskFullError, write_atomically

NO_SPACE = "no space left on device, {} not written, the previous one is intact"


class FullDisk(io.FileIO):
    """A file on a device with ``room`` bytes free: writes beyond them raise ENOSPC."""

    room = 0

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            part = max(self.room - self.tell(), 0)
            super().write(bytes(memoryview(data)[:part]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def fill_disk(monkeypatch, room: int) -> None:
    """From now on, files ``atomic`` opens hold at most ``room`` bytes."""
    FullDisk.room = room
    monkeypatch.setattr(atomic, "open", lambda path, mode: FullDisk(path, mode), raising=False)


def temp_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.tmp"))


def test_a_checkpoint_on_a_full_disk_keeps_the_previous_one(tmp_path, monkeypatch):
    """torch.save reports the failed write as "[enforce fail at inline_container.cc]
    unexpected pos"; the error says what happened instead."""
    path = tmp_path / "last.pt"
    checkpoint.save(path, {"epoch": 1, "w": torch.arange(10.0)})
    fill_disk(monkeypatch, 700)
    with pytest.raises(DiskFullError, match=NO_SPACE.format("checkpoint") + f": {path}") as e:
        checkpoint.save(path, {"epoch": 2, "w": torch.randn(10_000)})
    assert e.value.errno == errno.ENOSPC
    assert not temp_files(tmp_path)
    monkeypatch.undo()
    state = checkpoint.load(path, torch.device("cpu"))
    assert state["epoch"] == 1 and torch.equal(state["w"], torch.arange(10.0))


def test_torch_save_failing_with_enospc_is_reported(tmp_path, monkeypatch):
    path = tmp_path / "best.pt"
    checkpoint.save(path, {"epoch": 1})

    def save_half(state, f):
        f.write(b"PK\x03\x04 partial archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", save_half)
    with pytest.raises(DiskFullError, match=NO_SPACE.format("checkpoint")):
        checkpoint.save(path, {"epoch": 2})
    monkeypatch.undo()
    assert not temp_files(tmp_path)
    assert checkpoint.load(path, torch.device("cpu"))["epoch"] == 1


def test_a_first_file_on_a_full_disk_says_there_was_none(tmp_path, monkeypatch):
    fill_disk(monkeypatch, 3)
    with pytest.raises(DiskFullError, match="config not written, there was none before"):
        write_atomically(tmp_path / "config.yaml", b"name: run\n", "config")
    assert not list(tmp_path.iterdir())


def test_other_write_errors_keep_their_type_and_leave_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"epoch\n1\n")

    def broken(f):
        f.write(b"epoch\n")
        raise RuntimeError("serialiser failed")

    with pytest.raises(RuntimeError, match="serialiser failed"):
        write_atomically(path, broken, "metrics")
    assert path.read_bytes() == b"epoch\n1\n" and not temp_files(tmp_path)


def small_run(out: Path, epochs: int) -> dict:
    return {
        "dataset": {"name": "synthetic", "num_nodes": 600, "avg_degree": 6, "num_classes": 4},
        "model": {"name": "gcn", "hidden_feats": 8},
        "train": {"epochs": epochs, "progress": False, "patience": None, "checkpoint_every_s": 0},
        "output": {"dir": str(out)},
    }


# metrics.csv is written once with its header before the first epoch
@pytest.mark.parametrize("file, failing_write", [("last.pt", 3), ("metrics.csv", 4)])
def test_a_run_that_fills_the_disk_stops_and_resumes_bit_for_bit(
    tmp_path, monkeypatch, one_thread, file, failing_write
):
    """The disk fills up at epoch 3's write of ``file``: the run stops with the message, the
    folder keeps epoch 2's checkpoint and no temp file; once space is free, the resumed run
    repeats the straight run's losses."""
    straight = train(small_run(tmp_path / "straight", 5))
    run = tmp_path / "run"
    real_write, writes = atomic.write_atomically, []

    def write(path, content, what):
        if Path(path).name == file:
            writes.append(path)
            if len(writes) == failing_write:
                fill_disk(monkeypatch, 64)
        return real_write(path, content, what)

    for module in ("checkpoint", "metrics_log"):
        monkeypatch.setattr(f"flashgnn.training.{module}.write_atomically", write)
    with pytest.raises(DiskFullError, match=f"no space left on device.*{file}"):
        train(small_run(run, 5))
    monkeypatch.undo()
    assert not temp_files(run) and not (run / ".rollback").exists()
    assert checkpoint.load(run / "last.pt", torch.device("cpu"))["epoch"] == 2
    resumed = train(small_run(run, 5), resume=run)
    assert (run / "metrics.csv").read_bytes().count(b"\n") == 6
    straight_rows = (tmp_path / "straight" / "metrics.csv").read_text().splitlines()
    rows = (run / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[1] for r in rows] == [r.split(",")[1] for r in straight_rows]
    assert resumed["test"] == straight["test"]
