"""``metrics.csv``, a run's record of every epoch: one row per epoch, rewritten whole with each
checkpoint (``atomic.write_atomically``), so a run killed or out of disk space mid-write
keeps the previous version, never a torn last line."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .atomic import write_atomically
from .checkpoint import CheckpointError

FIELDS = ("epoch", "loss", "train", "val", "test", "epoch_time_s", "eval_time_s")


def rows_up_to(path: Path, epoch: int) -> list[dict]:
    """The rows of ``path`` for epochs 1..``epoch`` (a resumed run drops the rows written
    after its checkpoint); none when the file is absent."""
    if not path.is_file():
        return []
    try:
        with open(path, newline="") as f:
            return [r for r in csv.DictReader(f) if int(r["epoch"]) <= epoch]
    except (KeyError, ValueError, TypeError, csv.Error, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"cannot resume: {path} is not a metrics file of flashgnn (a CSV with an integer "
            f"'epoch' column): {type(e).__name__}: {e}"
        ) from e


class MetricsLog:
    """The rows of ``path``: those kept from before (``rows``), then one per ``append``;
    ``write`` puts them on disk."""

    def __init__(self, path: Path, rows: list[dict]):
        self.path = path
        self.rows = list(rows)

    def write(self) -> None:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, FIELDS)
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomically(self.path, text.getvalue().encode(), "metrics")

    def append(self, row: dict) -> None:
        self.rows.append(row)
