"""Checkpoints of a run: ``last.pt`` (everything needed to resume) and ``best.pt`` (the
weights of the best validation epoch). Written atomically (a temporary file, then a
rename), so a run killed mid-save keeps its previous checkpoint; read back with
``weights_only=True``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

LAST = "last.pt"
BEST = "best.pt"


def save(path: Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load(path: Path, device: torch.device) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location=device, weights_only=True)


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
