"""On-disk cache of compiled cubins, keyed by source hash, architecture, options and NVRTC
version. Writes are atomic (temporary file + rename), so concurrent compiles are safe."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("FLASHGNN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "flashgnn"
    )
    return Path(root)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(key: str) -> tuple[bytes, dict] | None:
    """(cubin, metadata) stored under ``key``, or None."""
    base = cache_dir() / key
    try:
        meta = json.loads(base.with_suffix(".json").read_text())
        cubin = base.with_suffix(".cubin").read_bytes()
    except (OSError, ValueError):
        return None
    return cubin, meta


def store(key: str, cubin: bytes, meta: dict) -> None:
    base = cache_dir() / key
    # cubin first: a reader finds the metadata only once the cubin is complete
    _atomic_write(base.with_suffix(".cubin"), cubin)
    _atomic_write(base.with_suffix(".json"), json.dumps(meta).encode())
