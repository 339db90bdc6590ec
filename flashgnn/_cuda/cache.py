"""On-disk cache of compiled cubins in ``$FLASHGNN_CACHE_DIR``, keyed by source hash,
architecture, options, NVRTC version and name expressions.

Nothing read from it is trusted. The folder must belong to this user and be writable by nobody
else (it is created 0700): whoever can write there can plant code that runs on the GPU in this
process, so another owner or a group/world-writable mode is refused with an error. An entry is
a cubin and its metadata: what keys it, the symbol map and ptxas log of the compile that made
it, the cubin's size and sha256, and a sha256 over all of that. An entry that fails any check
(unreadable, not JSON, a missing or extra field, another key, a symbol map that does not cover
exactly the name expressions, a digest that does not match) is treated as absent: the source is
recompiled and the entry rewritten. The digests catch corrupt, truncated, stale and hand-edited
entries; a forger who can write to the folder is kept out by its owner and mode, not by them.
Each file is written to a temporary file, fsynced and renamed into place, so concurrent
compiles are safe and a crash leaves the previous file or the complete new one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path

ENV = "FLASHGNN_CACHE_DIR"
ELF_MAGIC = b"\x7fELF"
# fields of an entry's metadata besides those that key it
_COMPILED_FIELDS = frozenset({"symbols", "log", "cubin_bytes", "cubin_sha256"})


class UnsafeCacheDir(RuntimeError):
    """The cache folder belongs to another user or others may write to it."""


def cache_dir() -> Path:
    root = os.environ.get(ENV) or os.path.join(os.path.expanduser("~"), ".cache", "flashgnn")
    return Path(root)


def open_dir() -> Path | None:
    """The cache folder, created mode 0700 (with any parents it lacks) where missing, once it is
    known to be writable by this user alone. None, with a warning, where it cannot be created
    or read: kernels then compile without the cache. Raises UnsafeCacheDir for a folder owned
    by another user or writable by group or others."""
    path = cache_dir()
    try:
        _make_private_dirs(path)
        st = os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{path} is not a folder")
    except OSError as e:
        _warn(
            f"the kernel cache folder {path} ({ENV}) cannot be used ({e}); kernels compile uncached"
        )
        return None
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafeCacheDir(
            f"flashgnn: the kernel cache folder {path} belongs to uid {st.st_uid}, not to you "
            f"(uid {uid}); a kernel planted there would run on your GPU. Set {ENV} to a folder "
            "of your own."
        )
    if st.st_mode & 0o022:
        raise UnsafeCacheDir(
            f"flashgnn: the kernel cache folder {path} is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); a kernel planted there would run on your GPU. "
            f"Run `chmod 700 {path}` or set {ENV} to a folder of your own."
        )
    return path


def _make_private_dirs(path: Path) -> None:
    """Create ``path`` and each missing parent with mode 0700."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.mkdir(folder, 0o700)


def digest(fields: dict) -> str:
    """sha256 of ``fields`` as canonical JSON (sorted keys, no spaces, ASCII)."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def load(
    folder: Path, key: str, keyed: dict, names: tuple[str, ...]
) -> tuple[bytes, dict[str, str], str] | None:
    """(cubin, symbol map, log) stored under ``key``, or None where the entry is missing or
    fails a check: its key fields must equal ``keyed`` (JSON values) and its symbol map must
    map exactly the name expressions ``names``."""
    base = folder / key
    try:
        meta = json.loads(_read_own(base.with_suffix(".json")))
        cubin = _read_own(base.with_suffix(".cubin"))
    except (OSError, ValueError):
        return None
    if not _checks_out(meta, keyed, names, cubin):
        return None
    entry = meta["entry"]
    return cubin, entry["symbols"], entry["log"]


def _read_own(path: Path) -> bytes:
    """The bytes of ``path``, a regular file of this user's (a file left by another user is
    not read)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not a file of this user's")
        return f.read()


def _checks_out(meta, keyed: dict, names: tuple[str, ...], cubin: bytes) -> bool:
    if not isinstance(meta, dict) or meta.keys() != {"entry", "sha256"}:
        return False
    entry = meta["entry"]
    if not isinstance(entry, dict) or meta["sha256"] != digest(entry):
        return False
    if entry.keys() != keyed.keys() | _COMPILED_FIELDS:
        return False
    if any(entry[field] != value for field, value in keyed.items()):
        return False
    symbols = entry["symbols"]
    if not (
        isinstance(symbols, dict)
        and symbols.keys() == set(names)
        and all(isinstance(mangled, str) and mangled for mangled in symbols.values())
        and isinstance(entry["log"], str)
    ):
        return False
    return (
        len(cubin) == entry["cubin_bytes"]
        and cubin.startswith(ELF_MAGIC)
        and hashlib.sha256(cubin).hexdigest() == entry["cubin_sha256"]
    )


def store(
    folder: Path, key: str, keyed: dict, cubin: bytes, symbols: dict[str, str], log: str
) -> None:
    """Write the entry ``key``: ``cubin``, and metadata holding ``keyed`` (JSON values), the
    symbol map, the log and the digests. A failed write (a full disk, a read-only folder) is
    a warning: the compile stands, only the cache misses it, and no temporary file remains."""
    entry = {
        **keyed,
        "symbols": symbols,
        "log": log,
        "cubin_bytes": len(cubin),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
    }
    meta = {"entry": entry, "sha256": digest(entry)}
    base = folder / key
    try:
        # cubin first: a reader finds the metadata only once the cubin is complete
        _atomic_write(base.with_suffix(".cubin"), cubin)
        _atomic_write(base.with_suffix(".json"), json.dumps(meta).encode())
    except OSError as e:
        _warn(
            f"kernel cache entry {key} not written to {folder} ({e}); it compiles again next time"
        )


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _warn(message: str) -> None:
    warnings.warn(f"flashgnn: {message}", RuntimeWarning, stacklevel=3)
