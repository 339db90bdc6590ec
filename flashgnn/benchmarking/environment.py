"""Where a benchmark ran, written beside every result file: the commit, UTC date and command
(``results.provenance``), torch, python; the GPU (name, driver, CUDA, SMs, memory, copy bandwidth)
or the CPU."""

from __future__ import annotations

import platform
import subprocess

import torch

from .errors import describe_error
from .results import provenance
from .timing import Timer


def copy_bandwidth_gbps(timer: Timer) -> float:
    """Device-to-device copy of 1 GiB: (bytes read + bytes written) / time."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=timer.device)
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src)).ms
    return 2 * src.numel() / ms / 1e6


def _copy_bandwidth_text(timer: Timer) -> str:
    try:
        return f"{copy_bandwidth_gbps(timer):.0f} GB/s (device-to-device copy, read + write)"
    except Exception as e:  # noqa: BLE001 - e.g. a kernel left the context unusable
        return f"not measured ({describe_error(e)})"


def driver_version() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it (torch does not expose it)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return out.split()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown (nvidia-smi did not answer)"


def environment(timer: Timer) -> dict[str, str]:
    """Where a benchmark ran: the commit, UTC date and command, torch, python; the GPU
    (name, driver, CUDA, SMs, memory, copy bandwidth, timed by ``timer``) or the CPU."""
    device = timer.device
    env = {**provenance(), "torch": torch.__version__, "python": platform.python_version()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu=props.name,
            driver=driver_version(),
            cuda=str(torch.version.cuda),
            sms=str(props.multi_processor_count),
            memory_gib=f"{props.total_memory / 2**30:.0f}",
            copy_bandwidth=_copy_bandwidth_text(timer),
        )
    else:
        env.update(cpu=platform.processor() or platform.machine())
    return env
