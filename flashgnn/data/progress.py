"""The progress bar shown while large graphs are read and converted."""

from __future__ import annotations

from tqdm import tqdm


def progress_bar(total: int, desc: str, unit: str, progress: bool | None) -> tqdm:
    """A tqdm bar; ``progress`` None shows it only on a terminal, True always, False never."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        disable=None if progress is None else not progress,
    )
