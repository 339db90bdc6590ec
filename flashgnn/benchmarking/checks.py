"""Checks of a benchmark's results against a float64 reference: the relative error and its
bound per precision, and the SDDMM's padding slots."""

from __future__ import annotations

import torch

from ..formats.mebcrs import MEBCRS

ERROR_BOUND = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (||out - ref|| when ref is all zeros); ``ref`` float64."""
    diff = torch.linalg.vector_norm(out.to(torch.float64) - ref).item()
    scale = torch.linalg.vector_norm(ref).item()
    return diff / scale if scale > 0 else diff


def sddmm_check(fmt: MEBCRS, ref: torch.Tensor):
    """A check of an SDDMM output on ``fmt`` (float32 [n_slots]) against ``ref`` (float64, the
    nonzeros in CSR order): (relative error of the real slots, a problem when a padding slot is
    not 0, else None)."""

    def check(out):
        padding = torch.ones(out.numel(), dtype=torch.bool, device=out.device)
        padding[fmt.perm] = False
        written = int(torch.count_nonzero(out[padding]))
        problem = f"{written} padding slots are not 0" if written else None
        return relative_error(out[fmt.perm], ref), problem

    return check
