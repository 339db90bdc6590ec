"""The GPU builder of ME-BCRS (``_cuda/build.py``), registered for CUDA devices with
``flashgnn.formats.device_builders``, through which ``MEBCRS.from_csr(..., device="cuda")`` and a
Graph's formats reach it: the format modules import no kernels. ``require_device`` also checks
a CUDA device before the 16x1 format is built on it."""

from __future__ import annotations

from .._cuda.build import build_mebcrs_cuda
from .._cuda.runtime import require_device
from ..formats.device_builders import register_builder

register_builder("cuda", build_mebcrs_cuda, check=require_device)
