"""Whole-file writes of a run's records: a reader (or a resumed run) finds the previous file or
the new one, never part of one, and a failed write leaves nothing behind.

The bytes go to ``<name>.tmp`` beside the file, are flushed to the disk (fsync) and the temp
file is renamed over the file. When anything fails the temp file is removed, so a full disk
does not stay full; running out of space raises ``DiskFullError`` naming the file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(OSError):
    """No space (or no quota) left on the device: the file was not written, the previous one
    is intact. ``errno`` is ENOSPC or EDQUOT; the message names the file."""

    def __str__(self) -> str:
        return self.strerror


def temp_path(path: Path) -> Path:
    """Where ``write_atomically`` stages ``path``."""
    return path.with_name(path.name + ".tmp")


def _space_error(e: BaseException) -> OSError | None:
    """The out-of-space OSError behind ``e``, if any. torch.save reports a failed write as a
    RuntimeError ("unexpected pos") whose context is the OSError, or the other way round."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return e
        e = e.__cause__ or e.__context__
    return None


def write_atomically(path: Path, content: bytes | Callable[[BinaryIO], None], what: str) -> None:
    """Replace ``path`` by ``content`` (bytes, or a function writing into a binary file) as a
    whole. ``what`` names the file in errors ("checkpoint", "metrics")."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            else:
                content(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        full = _space_error(e)
        if full is not None:
            previous = "the previous one is intact" if path.exists() else "there was none before"
            raise DiskFullError(
                full.errno, f"no space left on device, {what} not written, {previous}: {path}"
            ) from e
        raise
