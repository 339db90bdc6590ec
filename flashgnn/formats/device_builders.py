"""The builders of the formats on each device type: the one seam between the formats and the
kernels that build them faster.

The format modules are the executable specification and import no kernels, so that data flows
one way (format -> ops -> _cuda). ``mebcrs.py`` registers its vectorised reference builder for
the CPU; the layer that owns the kernels registers the builder of its device type when it is
imported (``flashgnn.ops`` the CUDA one, and ``import flashgnn`` imports ``flashgnn.ops``).
``MEBCRS.from_csr(..., device=...)`` looks the device's builder up here; a device type with
none registered is a clear error, not a silent fallback to a slower builder.

A builder of ME-BCRS takes a canonical CSR (indptr int64 [n_rows + 1], indices int64 [nnz],
values float [nnz], all on one device, not necessarily the target), n_cols, the block width k
and the target device, and returns the format's arrays on that device, (row_ptr, col_idx,
values, perm, vec_mask) as docs/FORMAT.md defines them; the format module assembles the
MEBCRS. ``check``, when given, raises a clear error where a device of the type cannot be used
(the 16x1 format, built with the same torch code everywhere, only checks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

# (row_ptr, col_idx, values, perm, vec_mask)
MebcrsArrays = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
# (indptr, indices, values, n_cols, k, device) -> MebcrsArrays
MebcrsBuilder = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, int, int, torch.device], MebcrsArrays
]


class DeviceBuilder(NamedTuple):
    build_mebcrs: MebcrsBuilder
    check: Callable[[torch.device], object] | None


_BUILDERS: dict[str, DeviceBuilder] = {}


def register_builder(
    device_type: str,
    build_mebcrs: MebcrsBuilder,
    check: Callable[[torch.device], object] | None = None,
) -> None:
    """Build the formats of ``device_type`` devices ("cpu", "cuda") with ``build_mebcrs``,
    after ``check`` (replaces an earlier registration of the type)."""
    _BUILDERS[device_type] = DeviceBuilder(build_mebcrs, check)


def builder_for(device: torch.device) -> DeviceBuilder:
    """The builder registered for ``device``'s type; RuntimeError when there is none."""
    found = _BUILDERS.get(device.type)
    if found is None:
        registered = ", ".join(sorted(_BUILDERS)) or "none"
        raise RuntimeError(
            f"flashgnn: no format builder is registered for {device.type} devices (registered: "
            f"{registered}); flashgnn.ops registers the CUDA one when imported"
        )
    return found


def check_device(device: torch.device) -> None:
    """Raise a clear error unless formats can be built on ``device``."""
    check = builder_for(device).check
    if check is not None:
        check(device)
