"""Runs that a failure cannot damage: everything is checked before the run folder is touched,
a folder holding a run is not silently replaced, a run that fails before its first
checkpoint leaves the folder as it found it, and an interrupted run (Ctrl-C, SIGKILL)
resumes bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from flashgnn.cli import main as cli_main
from flashgnn.training import ConfigError, apply_overrides, checkpoint, load_config, train
from flashgnn.training import loop as training_loop
from flashgnn.training.checkpoint import CheckpointError
from flashgnn.training.run_folder import RunExistsError
from tests.helpers import run_losses

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "gcn-synthetic-small.yaml"


pytestmark = pytest.mark.usefixtures("one_thread")


def config(out: Path, **train_kw) -> dict:
    return {
        "dataset": {"name": "synthetic", "num_nodes": 600, "avg_degree": 6, "num_classes": 4},
        "model": {"name": "gcn", "hidden_feats": 8, "dropout": 0.5},
        "train": {"epochs": 4, "progress": False, "patience": None, **train_kw},
        "output": {"dir": str(out)},
    }


def snapshot(folder: Path) -> dict:
    """Every file under ``folder``: relative path -> bytes (a missing folder: None)."""
    if not folder.exists():
        return None
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def fail_at_step(monkeypatch, call: int, error: BaseException) -> None:
    """Make the ``call``-th training step (1-based) raise ``error``."""
    real, calls = training_loop.train_step, []

    def step(*args, **kw):
        calls.append(1)
        if len(calls) == call:
            raise error
        return real(*args, **kw)

    monkeypatch.setattr(training_loop, "train_step", step)


# ---------------------------------------------------------------------------- resume
def test_a_failed_resume_leaves_the_run_as_it_was(tmp_path):
    """A resume whose model does not fit the checkpoint fails before writing anything, so the
    run's config is not rewritten and a plain resume still works."""
    run = tmp_path / "run"
    train(config(run, epochs=3))
    before = snapshot(run)
    changed = apply_overrides(load_config(run / "config.yaml"), ["model.hidden_feats=32"])
    with pytest.raises(CheckpointError, match=r"does not fit the model.*size mismatch"):
        train(changed, resume=run)
    assert snapshot(run) == before
    longer = apply_overrides(load_config(run / "config.yaml"), ["train.epochs=5"])
    assert train(longer, resume=run)["epochs_run"] == 5


def test_a_failed_resume_from_the_command_line_keeps_the_config(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_main(["train", "--config", str(CONFIG), "--output", str(run), *SMALL]) == 0
    before = snapshot(run)
    assert cli_main(["train", "--resume", str(run), "model.hidden_feats=32"]) == 2
    assert snapshot(run) == before
    err = capsys.readouterr().err
    assert "does not fit the model" in err and "Traceback" not in err
    assert cli_main(["train", "--resume", str(run), "train.epochs=4"]) == 0
    assert len(run_losses(run)) == 4


def test_a_resume_checks_its_epochs_and_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    train(config(run, epochs=3))
    with pytest.raises(ConfigError, match="'train.epochs' is 2, but the run .* trained 3 epochs"):
        train(config(run, epochs=2), resume=run)
    (run / "last.pt").write_bytes((run / "last.pt").read_bytes()[:100])
    before = snapshot(run)
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint .*last\.pt: truncated"):
        train(config(run, epochs=5), resume=run)
    assert snapshot(run) == before


def test_a_run_without_a_checkpoint_cannot_be_resumed(tmp_path):
    (tmp_path / "config.yaml").write_text("name: x\n")
    with pytest.raises(FileNotFoundError, match="no last.pt .*before its first checkpoint"):
        train(config(tmp_path), resume=tmp_path)


# ---------------------------------------------------------------------------- new runs
SMALL = ["train.epochs=3", "train.progress=false", "dataset.num_nodes=600"]


def test_a_new_run_refuses_a_folder_that_holds_a_run(tmp_path):
    run = tmp_path / "run"
    train(config(run, epochs=3))
    before = snapshot(run)
    with pytest.raises(RunExistsError, match=r"already holds a run \(config.yaml.*--overwrite"):
        train(config(run, epochs=2))
    assert snapshot(run) == before
    summary = train(config(run, epochs=2), overwrite=True)
    assert summary["epochs_run"] == 2 and len(run_losses(run)) == 2
    assert sorted(os.listdir(run)) == sorted(
        ["config.yaml", "metrics.csv", "last.pt", "best.pt", "summary.json"]
    )
    with pytest.raises(ValueError, match="pass one"):
        train(config(run), resume=run, overwrite=True)


def test_the_command_line_refuses_a_run_folder_unless_told_to_overwrite(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", "--config", str(CONFIG), "--output", str(run), *SMALL]
    assert cli_main(args) == 0
    before = snapshot(run)
    assert cli_main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert snapshot(run) == before
    assert cli_main([*args, "--overwrite"]) == 0
    assert len(run_losses(run)) == 3


def test_compare_refuses_run_folders_before_loading_anything(tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    args = ["compare", "--config", str(CONFIG), "--precisions", "fp32", "--seeds", "1"]
    assert cli_main([*args, "--output", str(out), *SMALL]) == 0
    before = snapshot(out)

    def no_load(section):
        raise AssertionError("the dataset was loaded")

    monkeypatch.setattr("flashgnn.compare.load_configured_dataset", no_load)
    assert cli_main([*args, "--output", str(out), *SMALL]) == 2
    assert snapshot(out) == before


# ---------------------------------------------------------------------------- failures
@pytest.mark.parametrize(
    "override, error",
    [
        ({"model": {"name": "gcn", "hidden_feats": 0}}, ConfigError),
        ({"dataset": {"name": "no-such-graph", "root": "{tmp}"}}, FileNotFoundError),
        ({"dataset": {"name": "synthetic", "num_classes": 1}}, ValueError),
        ({"train": {"batch_size": 64, "fanouts": [5, 5, 5]}}, ConfigError),
    ],
)
def test_a_failed_run_leaves_nothing_behind(tmp_path, override, error):
    """A new folder (and its new parents) is removed; a folder that existed keeps exactly
    what it had."""
    override = {
        k: {kk: str(tmp_path) if vv == "{tmp}" else vv for kk, vv in v.items()}
        for k, v in override.items()
    }
    fresh = tmp_path / "a" / "b" / "run"
    cfg = config(fresh)
    cfg["train"].update(override.pop("train", {}))
    with pytest.raises(error):
        train({**cfg, **override})
    assert not (tmp_path / "a").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    with pytest.raises(error):
        train({**config(existing), **override, "train": cfg["train"]})
    assert snapshot(existing) == {"notes.txt": b"mine"}


@pytest.mark.parametrize("error", [RuntimeError("CUDA out of memory"), KeyboardInterrupt()])
def test_a_run_that_fails_before_its_first_checkpoint_is_undone(tmp_path, monkeypatch, error):
    fresh = tmp_path / "new" / "run"
    fail_at_step(monkeypatch, 1, error)
    with pytest.raises(type(error)):
        train(config(fresh))
    assert not (tmp_path / "new").exists()


def test_an_overwrite_that_fails_before_its_first_checkpoint_keeps_the_old_run(
    tmp_path, monkeypatch
):
    run = tmp_path / "run"
    train(config(run, epochs=3))
    before = snapshot(run)
    fail_at_step(monkeypatch, 1, RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        train(config(run, epochs=2), overwrite=True)
    assert snapshot(run) == before


def test_a_resume_that_fails_before_its_first_checkpoint_keeps_the_run(tmp_path, monkeypatch):
    """Its config (with the new overrides), metrics and best checkpoint are put back."""
    run = tmp_path / "run"
    train(config(run, epochs=3))
    before = snapshot(run)
    fail_at_step(monkeypatch, 1, RuntimeError("CUDA out of memory"))
    with pytest.raises(RuntimeError, match="out of memory"):
        train(config(run, epochs=6, lr=0.02), resume=run)
    assert snapshot(run) == before


# ---------------------------------------------------------------------------- interruptions
# checkpoints every epoch, or (an hour apart) after the first epoch only until the last
@pytest.mark.parametrize("every_s, kept", [(0, 3), (3600, 1)])
def test_ctrl_c_after_a_checkpoint_resumes_bit_for_bit(tmp_path, monkeypatch, every_s, kept):
    straight = train(config(tmp_path / "straight", epochs=6))
    run = tmp_path / "run"
    fail_at_step(monkeypatch, 4, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        train(config(run, epochs=6, checkpoint_every_s=every_s))
    monkeypatch.undo()
    assert len(run_losses(run)) == kept and not list(run.glob("*.tmp"))
    assert checkpoint.load(run / "last.pt", torch.device("cpu"))["epoch"] == kept
    assert not (run / ".rollback").exists()
    resumed = train(config(run, epochs=6, checkpoint_every_s=every_s), resume=run)
    assert run_losses(run) == run_losses(tmp_path / "straight")
    assert resumed["test"] == straight["test"]


def test_sigkill_mid_run_resumes_bit_for_bit(tmp_path):
    """A process killed at its fourth step keeps the checkpoint of epoch 3."""
    straight = train(config(tmp_path / "straight", epochs=6))
    run = tmp_path / "run"
    script = textwrap.dedent(
        f"""
        import os, signal, torch
        from flashgnn.training import loop, train
        torch.set_num_threads(1)
        real, calls = loop.train_step, []
        def step(*args, **kw):
            calls.append(1)
            if len(calls) == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kw)
        loop.train_step = step
        train({config(run, epochs=6, checkpoint_every_s=0)!r})
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()
    assert len(run_losses(run)) == 3
    resumed = train(config(run, epochs=6), resume=run)
    assert run_losses(run) == run_losses(tmp_path / "straight")
    assert resumed["test"] == straight["test"]
