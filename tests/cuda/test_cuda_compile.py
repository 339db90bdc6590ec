"""Run-time CUDA on a machine without a GPU: ``python -m flashgnn.cuda --check`` compiles every
registered kernel with NVRTC, the cubin cache (hits, keys, two processes at once) and the
errors a user meets with no GPU or a wrong architecture."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from flashgnn._cuda import compiler, runtime, sources
from flashgnn._cuda.check import load_all_sources
from flashgnn._cuda.check import main as check_main
from flashgnn._cuda.sources import SOURCES, KernelSource
from tests.cuda.tiny_kernel import ELF_MAGIC, TINY, TINY_HEADER, TINY_SOURCE, cubins
from tests.helpers import REPO_ROOT

ARCHS = ["sm_80", "sm_90"]


def run_cli(cache_dir, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLASHGNN_CACHE_DIR=str(cache_dir))
    return subprocess.run(
        [sys.executable, "-m", "flashgnn.cuda", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# ---------------------------------------------------------------------------- --check
def test_check_compiles_every_registered_kernel(tmp_path):
    result = run_cli(tmp_path, "--check", "--arch", ",".join(ARCHS))
    assert result.returncode == 0, result.stdout + result.stderr
    load_all_sources()
    assert SOURCES, "no kernel source is registered"
    for arch in ARCHS:
        for src in SOURCES.values():
            for name in src.name_expressions:
                line = re.search(
                    rf"^{arch}\s+{re.escape(src.file)}\s+{re.escape(name)}"
                    r"\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$",
                    result.stdout,
                    re.MULTILINE,
                )
                assert line, (
                    f"no resource line for {name} of {src.file} on {arch}:\n{result.stdout}"
                )
                assert int(line.group(1)) > 0, f"{name} on {arch}: {line.group(1)} registers"
    assert "all kernels compiled" in result.stdout
    # it compiled for real: one ELF cubin per source and architecture
    files = cubins(tmp_path)
    assert len(files) == len(SOURCES) * len(ARCHS)
    assert all(f.read_bytes()[:4] == ELF_MAGIC for f in files)


def run_check_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``python -m flashgnn.cuda`` without starting an interpreter: (exit status, stdout,
    stderr)."""
    try:
        status = check_main(list(args))
    except SystemExit as e:  # argparse errors
        status = e.code
    out = capsys.readouterr()
    return status, out.out, out.err


def test_check_reports_an_arch_nvrtc_rejects(cache_dir, capsys):
    status, out, err = run_check_in_process(capsys, "--check", "--arch", "sm_10")
    assert status == 1
    assert "FAILED" in out
    assert "NVRTC failed to compile" in err and "sm_10" in err


def test_check_rejects_a_malformed_arch_with_a_message(cache_dir, capsys):
    status, out, err = run_check_in_process(capsys, "--check", "--arch", "sm80")
    assert status != 0
    assert "--arch" in err and "'sm80'" in err


def test_check_with_no_arch_is_an_error(cache_dir, capsys):
    status, out, err = run_check_in_process(capsys, "--check", "--arch", ",")
    assert status != 0, f"nothing was compiled, yet --check exited 0:\n{out}"


# ---------------------------------------------------------------------------- compiler and cache
@pytest.mark.parametrize("arch", ["sm80", "ampere", "compute_80", "80", "sm_90 "])
def test_malformed_arch_is_a_value_error(arch, cache_dir, tiny_kernels):
    with pytest.raises(ValueError, match="architecture must look like 'sm_90'"):
        compiler.compile_source(TINY, arch)


def test_second_compile_is_a_cache_hit(cache_dir, tiny_kernels, nvrtc_runs):
    first = compiler.compile_source(TINY, "sm_80")
    assert len(nvrtc_runs) == 1
    assert first.cubin[:4] == ELF_MAGIC and set(first.symbols) == set(TINY.name_expressions)
    stamps = {f: f.stat().st_mtime_ns for f in cache_dir.iterdir()}
    assert len(stamps) == 2  # cubin + metadata

    second = compiler.compile_source(TINY, "sm_80")
    assert len(nvrtc_runs) == 1, "NVRTC ran although the cache held the cubin"
    assert (second.cubin, second.symbols, second.log) == (first.cubin, first.symbols, first.log)
    assert {f: f.stat().st_mtime_ns for f in cache_dir.iterdir()} == stamps

    compiler.compile_source(TINY, "sm_80", use_cache=False)
    assert len(nvrtc_runs) == 2


def test_cache_key_covers_source_header_arch_and_instantiations(
    cache_dir, tiny_kernels, nvrtc_runs
):
    def compile_and_count(src=TINY, arch="sm_80") -> int:
        compiler.compile_source(src, arch)
        return len(cubins(cache_dir))

    assert compile_and_count() == 1
    assert compile_and_count(arch="sm_90") == 2
    (tiny_kernels / "tiny.cu").write_text(TINY_SOURCE + "// edited\n")
    assert compile_and_count() == 3
    (tiny_kernels / "tiny.cuh").write_text(TINY_HEADER + "// edited\n")
    assert compile_and_count() == 4
    assert compile_and_count(KernelSource("tiny.cu", ("scale<float>",))) == 5
    assert len(nvrtc_runs) == 5
    (tiny_kernels / "tiny.cu").write_text(TINY_SOURCE)
    (tiny_kernels / "tiny.cuh").write_text(TINY_HEADER)
    assert compile_and_count() == 5 and len(nvrtc_runs) == 5, "the original source missed the cache"


CONCURRENT_COMPILE = """
import sys, time
from pathlib import Path
from flashgnn._cuda import compiler, sources
from flashgnn._cuda.sources import KernelSource
kernels, barrier, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
sources.kernel_dir = compiler.kernel_dir = lambda: kernels
src = KernelSource("tiny.cu", ("scale<float>", "scale<double>"))
(barrier / me).touch()
deadline = time.time() + 120
while len(list(barrier.iterdir())) < 2 and time.time() < deadline:  # start together
    time.sleep(0.001)
for arch in ("sm_80", "sm_90"):
    out = compiler.compile_source(src, arch)
    assert out.cubin[:4] == b"\\x7fELF" and len(out.symbols) == 2
"""


def test_two_processes_compile_into_one_cache(tmp_path, tiny_kernels, nvrtc_runs, monkeypatch):
    """Both processes start compiling at the same moment into one empty cache; both succeed and
    the cache ends with one complete cubin and metadata per key, no temporary files."""
    cache = tmp_path / "shared_cache"
    env = dict(os.environ, FLASHGNN_CACHE_DIR=str(cache))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_COMPILE, str(tiny_kernels), str(barrier), str(i)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    names = sorted(f.name for f in cache.iterdir())
    assert len(names) == 4 and len(cubins(cache)) == 2, names  # no temporary file left
    monkeypatch.setenv("FLASHGNN_CACHE_DIR", str(cache))
    for arch in ("sm_80", "sm_90"):
        hit = compiler.compile_source(TINY, arch)
        assert hit.cubin[:4] == ELF_MAGIC and set(hit.symbols) == set(TINY.name_expressions)
    assert not nvrtc_runs, "the cache the two processes wrote was not readable"


# ---------------------------------------------------------------------------- no GPU
no_gpu_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the errors of a machine without a GPU"
)


@no_gpu_only
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_require_device_without_gpu(device, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        runtime.require_device(torch.device(device))


@no_gpu_only
def test_require_device_rejects_pre_ampere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Tesla T4")
    with pytest.raises(RuntimeError, match=r"Tesla T4 has compute capability 7\.5.*8\.0 or newer"):
        runtime.require_device(torch.device("cuda", 0))


@no_gpu_only
def test_building_on_cuda_without_gpu_is_a_clear_error():
    from flashgnn.formats.mebcrs import MEBCRS

    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        MEBCRS.from_csr([0, 1, 2], [1, 0], device="cuda")


def test_stride_blocks_gives_a_thread_per_item_up_to_the_block_cap():
    from flashgnn._cuda.runtime import MAX_GRID_BLOCKS, stride_blocks

    assert (
        stride_blocks(1, 256) == (1,)
        and stride_blocks(256, 256) == (1,)
        and stride_blocks(257, 256) == (2,)
    )
    assert stride_blocks(1000, 128) == (8,)
    assert stride_blocks(MAX_GRID_BLOCKS * 256 * 3, 256) == (MAX_GRID_BLOCKS,)


def test_every_kernel_waits_for_the_previous_one():
    """Programmatic dependent launch is safe only if a kernel touches no memory before the one
    ahead of it has finished: every registered kernel begins with wait_for_previous_kernel()."""
    load_all_sources()
    late = [src.file for src in SOURCES.values() if not src.waits_for_previous_kernel]
    assert not late, f"kernels of {late} do not all begin with wait_for_previous_kernel()"


def test_dependent_launch_needs_every_kernel_of_a_file_to_wait():
    waits = "__global__ void a(int* x) {\n    wait_for_previous_kernel();\n    *x = 1;\n}\n"
    namespaced = (
        "template <int N>\n"
        "__global__ void __launch_bounds__(128) b(int* x) { fg::wait_for_previous_kernel(); }\n"
    )
    touches_first = "__global__ void c(int* x) {\n    *x = 1;\n    wait_for_previous_kernel();\n}\n"
    assert sources.kernels_wait_first(waits) and sources.kernels_wait_first(waits + namespaced)
    assert not sources.kernels_wait_first(waits + touches_first)
    assert not sources.kernels_wait_first(TINY_SOURCE)
    assert not sources.kernels_wait_first("__device__ int f() { return 1; }\n")


def test_spmm_preamble_needs_a_dependent_launch_read_segments_and_unchanged_values():
    """What the SpMM stages before waiting for the previous kernel: nothing on a first launch on
    its segments or without dependent launch; the pattern after that; the values too once a
    launch has read that values tensor, until it is modified in place."""
    from types import SimpleNamespace

    from flashgnn._cuda import spmm as launcher

    seg, values = SimpleNamespace(launched=False), torch.ones(16)
    assert launcher.preamble_for(seg, values, True) == launcher.NO_PREAMBLE
    seg.launched = True
    assert launcher.preamble_for(seg, values, False) == launcher.NO_PREAMBLE
    assert launcher.preamble_for(seg, values, True) == launcher.PATTERN
    launcher._VALUES_READ.set(values, True)
    assert launcher.preamble_for(seg, values, True) == launcher.PATTERN_AND_VALUES
    assert (
        launcher.preamble_for(seg, None, True) == launcher.PATTERN
    )  # GAT: attention computed, not read
    values.mul_(2.0)
    assert launcher.preamble_for(seg, values, True) == launcher.PATTERN


def test_sddmm_takes_its_one_chunk_kernel_exactly_when_k_is_one_whole_chunk():
    """<precision, WHOLE, RUN>, aligned, one chunk: the one-chunk instantiation (no K loop) only
    for aligned launches whose K is exactly the 4 runs of one chunk."""
    from flashgnn._cuda import sddmm as launcher

    def choice(k, precision, dtype=torch.float16, misaligned=False):
        x = torch.zeros(8 * k + 1, dtype=dtype)[int(misaligned) :][: 8 * k].view(8, k)
        return launcher._tensor_core_kernel(x, x, precision)

    assert choice(32, "fp16") == ("0, true, 8", True, True)
    assert choice(32, "bf16", torch.bfloat16) == ("1, true, 8", True, True)
    assert choice(16, "fp16") == ("0, true, 4", True, True)
    assert choice(8, "fp16") == ("0, true, 2", True, True)
    assert choice(16, "tf32", torch.float32) == ("2, true, 4", True, True)
    assert choice(64, "fp16") == ("0, true, 8", True, False)
    assert choice(32, "tf32", torch.float32) == ("2, true, 4", True, False)
    assert choice(24, "fp16") == ("0, false, 8", True, False)
    assert choice(32, "fp16", misaligned=True) == ("0, false, 8", False, False)
    names = launcher.SOURCE.name_expressions
    assert (
        "fg::sddmm_kernel<0, true, 8, true>" in names
        and "fg::sddmm_kernel<0, false, 8, true>" not in names
    )
