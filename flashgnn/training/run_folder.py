"""The folder a run writes into, and what keeps it whole when a run fails.

A run checks everything it can (config, data, model, checkpoint) before it touches its
folder, so a run that fails those checks changes nothing. From the moment it starts
(``begin``) until its first checkpoint is written (``commit``), a failure, Ctrl-C included,
undoes what it did (``rollback``): the files it wrote go, the run files it replaced come back
(they wait in ``.rollback/`` as hard links, or copies where the file system has none) and the
folders it created are removed. From its first checkpoint on, the folder holds a run that
``--resume`` continues.

A new run refuses a folder that already holds one unless asked to overwrite it; a resumed
run needs the folder's ``last.pt``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from .atomic import temp_path
from .checkpoint import BEST, LAST

CONFIG = "config.yaml"
METRICS = "metrics.csv"
SUMMARY = "summary.json"
RUN_FILES = (CONFIG, METRICS, LAST, BEST, SUMMARY)
_BACKUP = ".rollback"


class RunExistsError(FileExistsError):
    """A new run pointed at a folder that holds a run."""


def run_files(path: Path) -> list[str]:
    """The names of the run files in folder ``path``."""
    return [name for name in RUN_FILES if (path / name).is_file()]


def _keep(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # no hard links on this file system
        shutil.copy2(src, dst)


class RunFolder:
    """Folder ``path`` of a run: checked when made, changed from ``begin`` on."""

    def __init__(self, path: Path, *, resume: bool, overwrite: bool):
        path = Path(path)
        if resume and overwrite:
            raise ValueError(
                "--resume continues the run in a folder and --overwrite replaces it: pass one"
            )
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(f"the run folder {path} is a file")
        held = run_files(path) if path.is_dir() else []
        if resume and LAST not in held:
            stopped = (
                f" (it holds {', '.join(held)}: the run stopped before its first checkpoint; "
                "start it again with --overwrite)"
                if held
                else ""
            )
            raise FileNotFoundError(f"cannot resume: no {LAST} in {path}{stopped}")
        if held and not resume and not overwrite:
            raise RunExistsError(
                f"{path} already holds a run ({', '.join(held)}); continue it with --resume "
                f"{path}, or pass --overwrite (train(..., overwrite=True)) to replace it"
            )
        self.path = path
        self.resume = resume
        self.created: list[Path] = []
        self.before: list[str] | None = None  # the run files found by begin
        self.kept: list[str] = []  # those put aside in .rollback
        self.committed = False

    def begin(self) -> None:
        """Create the folder (and missing parents) and put aside the run files it holds: a
        resumed run's, or those a new run overwrites, which are removed."""
        self.before = run_files(self.path) if self.path.is_dir() else []
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()]
        for folder in reversed(missing):
            folder.mkdir()
            self.created.append(folder)
        backup = self.path / _BACKUP
        shutil.rmtree(backup, ignore_errors=True)  # left by a run killed before its checkpoint
        for name in RUN_FILES:
            temp_path(self.path / name).unlink(missing_ok=True)
        if self.before:
            backup.mkdir()
        for name in self.before:
            _keep(self.path / name, backup / name)
            self.kept.append(name)
            if not self.resume:
                (self.path / name).unlink()

    @contextlib.contextmanager
    def started(self):
        """``begin``, then the run; ``rollback`` if the run raises (Ctrl-C included)."""
        try:
            self.begin()
            yield self
        except BaseException:
            self.rollback()
            raise

    def commit(self) -> None:
        """The run's first checkpoint is written: from now on the folder is the run's."""
        if not self.committed:
            self.committed = True
            shutil.rmtree(self.path / _BACKUP, ignore_errors=True)

    def rollback(self) -> None:
        """Undo ``begin`` and every write since (nothing once committed). Best effort: a step
        that fails does not stop the others or hide the run's own error."""
        if self.committed or self.before is None:
            return
        backup = self.path / _BACKUP
        never_kept = set(self.before) - set(self.kept)  # begin failed before putting them aside
        for name in RUN_FILES:
            if name in never_kept:
                continue
            for path in (self.path / name, temp_path(self.path / name)):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
        for name in self.kept:
            with contextlib.suppress(OSError):
                os.replace(backup / name, self.path / name)
        shutil.rmtree(backup, ignore_errors=True)
        for folder in reversed(self.created):
            with contextlib.suppress(OSError):  # not empty: someone else wrote there
                folder.rmdir()
        self.before, self.kept, self.created = None, [], []
