"""Reading a dataset's files so that a damaged one is named: what numpy, scipy or json raise
on a truncated, empty or foreign file (BadZipFile, "contains pickled data", EOFError) becomes
a ``DataFileError`` that names the file, says what is wrong with it and what was expected."""

from __future__ import annotations

import contextlib
import json
import zipfile
import zlib
from pathlib import Path

import numpy as np


class DataFileError(ValueError):
    """A data file that cannot be read as its layout says; the message names the file."""


def _problem(e: BaseException) -> str:
    text = str(e)
    if isinstance(e, zipfile.BadZipFile | zlib.error):
        return f"it is not a complete zip archive: truncated, damaged or not an .npz file ({text})"
    if "pickled" in text or "allow_pickle" in text:
        return (
            "it holds pickled Python objects, or it is neither .npy nor .npz data; such files "
            "are not unpickled, as that could run code"
        )
    if "mmap length" in text or "Failed to read all data" in text:
        return f"it is shorter than its header says: truncated ({text})"
    if isinstance(e, EOFError):
        return f"it ends early: empty or truncated ({text})"
    if isinstance(e, json.JSONDecodeError):
        return f"it is not valid JSON: truncated or damaged ({text})"
    return f"{type(e).__name__}: {text}"


@contextlib.contextmanager
def reading(path: Path, expected: str):
    """Inside, a reader's failure on ``path`` raises DataFileError naming the file, the
    problem and ``expected`` (what the file should hold)."""
    try:
        yield
    except DataFileError:
        raise
    except (
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        ValueError,
        KeyError,
        OSError,
    ) as e:
        if isinstance(e, FileNotFoundError | PermissionError):
            raise
        raise DataFileError(f"cannot read {path}: {_problem(e)}; expected {expected}") from e


def read_npz(path: Path, required: tuple[str, ...], expected: str) -> dict[str, np.ndarray]:
    """Every array of the .npz archive ``path``, read now (no pickle); the archive must hold
    the arrays ``required``."""
    with reading(path, expected):
        archive = np.load(path)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise DataFileError(
                f"cannot read {path}: it is one .npy array, not an .npz archive of named arrays; "
                f"expected {expected}"
            )
        with archive:
            arrays = {key: archive[key] for key in archive.files}
    absent = [key for key in required if key not in arrays]
    if absent:
        raise DataFileError(
            f"{path} lacks the arrays {absent} (it holds {sorted(arrays)}); expected {expected}"
        )
    return arrays


def load_npy(path: Path, expected: str, mmap_mode: str | None = None) -> np.ndarray:
    """The .npy array ``path`` (memory-mapped with ``mmap_mode``), no pickle."""
    with reading(path, expected):
        return np.load(path, mmap_mode=mmap_mode)


def load_json(path: Path, expected: str):
    with reading(path, expected):
        with open(path) as f:
            return json.load(f)
