"""Checkpoints of a run: ``last.pt`` (everything needed to resume) and ``best.pt`` (the
weights of the best validation epoch). Written whole (``atomic.write_atomically``), so a run
killed or out of disk space mid-save keeps its previous checkpoint; read back with
``weights_only=True``.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from .atomic import write_atomically

LAST = "last.pt"
BEST = "best.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or that does not fit the run resuming from it; the
    message names the file."""


def save(path: Path, state: dict) -> None:
    write_atomically(path, lambda f: torch.save(state, f), "checkpoint")


def load(path: Path, device: torch.device) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except torch.OutOfMemoryError:
        raise
    except (
        RuntimeError,
        EOFError,
        KeyError,
        ValueError,
        zipfile.BadZipFile,
        pickle.UnpicklingError,
    ) as e:
        lines = str(e).strip().splitlines()
        reason = lines[0][:160] if lines else type(e).__name__
        raise CheckpointError(
            f"cannot read checkpoint {path}: truncated, damaged or not a flashgnn checkpoint "
            f"({reason})"
        ) from e


def rng_state() -> dict:
    """torch's generators (CPU, and every CUDA device in use): dropout draws from them."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
