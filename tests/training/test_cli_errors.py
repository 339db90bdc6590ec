"""The command line's errors: one line on stderr naming the problem, exit status 2 for bad
input and 1 for other failures, 130 for Ctrl-C, and the traceback only with --debug."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashgnn.cli import main as cli_main
from flashgnn.train import example_main
from flashgnn.training import loop as training_loop
from flashgnn.training.atomic import DiskFullError

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "gcn-synthetic-small.yaml"
SMALL = ["train.epochs=2", "train.progress=false", "dataset.num_nodes=400"]


pytestmark = pytest.mark.usefixtures("one_thread")


def failing_step(monkeypatch, error: BaseException) -> None:
    def step(*args, **kw):
        raise error

    monkeypatch.setattr(training_loop, "train_step", step)


def train_args(tmp_path: Path) -> list[str]:
    return ["train", "--config", str(CONFIG), "--output", str(tmp_path / "run"), *SMALL]


def test_an_unexpected_error_is_one_line_with_status_1(tmp_path, monkeypatch, capsys):
    failing_step(monkeypatch, RuntimeError("CUDA error: an illegal memory access\nmore detail"))
    assert cli_main(train_args(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err == (
        "flashgnn train: error: RuntimeError: CUDA error: an illegal memory access "
        "(--debug shows the traceback)\n"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(tmp_path, monkeypatch, where):
    failing_step(monkeypatch, RuntimeError("CUDA error: an illegal memory access"))
    args = train_args(tmp_path)
    args = ["--debug", *args] if where == "before" else [args[0], "--debug", *args[1:]]
    with pytest.raises(RuntimeError, match="illegal memory access"):
        cli_main(args)


def test_ctrl_c_is_one_line_with_status_130(tmp_path, monkeypatch, capsys):
    failing_step(monkeypatch, KeyboardInterrupt())
    assert cli_main(train_args(tmp_path)) == 130
    assert capsys.readouterr().err == "flashgnn train: interrupted\n"


def test_a_full_disk_is_named(tmp_path, monkeypatch, capsys):
    def save(path, state):
        raise DiskFullError(28, f"no space left on device, checkpoint not written: {path}")

    monkeypatch.setattr(training_loop.checkpoint, "save", save)
    assert cli_main(train_args(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "DiskFullError: no space left on device, checkpoint not written" in err
    assert "Traceback" not in err


def test_bad_input_beyond_value_errors_is_status_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    args = ["train", "--config", str(CONFIG), "--output", str(tmp_path / "file"), *SMALL]
    assert cli_main(args) == 2
    assert f"error: the run folder {tmp_path / 'file'} is a file" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "run" / "config.yaml").write_text("name: broken\n")
    assert cli_main(["train", "--resume", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "cannot read checkpoint" in err and "last.pt" in err and "Traceback" not in err


def test_the_example_scripts_report_errors_the_same_way(tmp_path, monkeypatch, capsys):
    failing_step(monkeypatch, RuntimeError("boom"))
    argv = ["--output", str(tmp_path / "run"), *SMALL]
    assert example_main(CONFIG, "example", argv) == 1
    assert "flashgnn train: error: RuntimeError: boom" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="boom"):
        example_main(CONFIG, "example", [*argv, "--debug"])
