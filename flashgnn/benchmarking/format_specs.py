"""The sparse formats the benchmarks run by name (``--formats``, ``--backends``): which class of
``flashgnn.formats`` each name builds, with which arguments, and in which precision its SpMM
runs. A name whose class this flashgnn lacks is an error when the list is read, not a backend
skipped in silence."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import formats


@dataclass(frozen=True)
class FormatSpec:
    """``name`` builds ``flashgnn.formats.<cls>`` by ``from_csr(..., **kwargs)``; ``precision``:
    the one precision its SpMM runs in, None for the caller's; ``k_by_precision``: pass
    ME-BCRS's block width for the precision (4 for tf32, 8 otherwise)."""

    name: str
    cls: str
    about: str
    kwargs: dict = field(default_factory=dict)
    precision: str | None = None
    k_by_precision: bool = False

    def available(self) -> bool:
        return hasattr(formats, self.cls)

    def build(self, indptr, indices, values, n_cols: int, device, precision: str):
        """The format of a canonical CSR matrix on ``device``, for SpMM in ``precision``."""
        kwargs = dict(self.kwargs)
        if self.k_by_precision:
            kwargs["k"] = 4 if precision == "tf32" else 8
        return getattr(formats, self.cls).from_csr(
            indptr, indices, values, n_cols=n_cols, device=torch.device(device), **kwargs
        )

    def spmm_precision(self, precision: str) -> str:
        return self.precision or precision


SPECS = {
    s.name: s
    for s in (
        FormatSpec("mebcrs", "MEBCRS", "FlashSparse's 8x1 vectors (ME-BCRS)", k_by_precision=True),
        FormatSpec("cvse2", "CVSE", "Chen et al.'s 2x1 column vectors", {"vector": 2}),
        FormatSpec("cvse4", "CVSE", "Chen et al.'s 4x1 column vectors", {"vector": 4}),
        FormatSpec("cvse8", "CVSE", "Chen et al.'s 8x1 column vectors", {"vector": 8}),
        FormatSpec("tca", "TCACSR", "TCA-SpMM: plain CSR and a warp schedule"),
        FormatSpec("gcoo", "GCOO", "GCOOSpDM's grouped COO, fp32 on CUDA cores", precision="fp32"),
        FormatSpec("hbell", "HBELL", "HB-ELL: 16x16 blocks, dense at 75% full, else ELL"),
        FormatSpec(
            "blocked",
            "HBELL",
            "every nonempty 16x16 block dense (HB-ELL with dense_fill=0)",
            {"dense_fill": 0.0},
        ),
    )
}


def parse_formats(text: str, option: str = "formats") -> list[FormatSpec]:
    """The specs of the comma list ``text`` (option ``--<option>``), in order, each once.
    ValueError for an unknown name or a name whose format class this flashgnn lacks."""
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise ValueError(f"--{option}: expected a comma list of {', '.join(SPECS)}, got {text!r}")
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        raise ValueError(
            f"--{option}: unknown format {', '.join(map(repr, unknown))}; known: {', '.join(SPECS)}"
        )
    missing = [SPECS[n] for n in names if not SPECS[n].available()]
    if missing:
        raise ValueError(
            f"--{option}: "
            + "; ".join(
                f"{s.name} needs flashgnn.formats.{s.cls}, which is absent" for s in missing
            )
            + " in this flashgnn"
        )
    return [SPECS[n] for n in names]
