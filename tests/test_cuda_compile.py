"""Run-time CUDA compilation without a GPU: the ``--check`` command line, the on-disk cubin
cache and the errors of the runtime on a machine with no usable device."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from flashgnn._cuda import compiler, runtime, sources
from flashgnn._cuda.check import load_all_sources
from flashgnn._cuda.sources import SOURCES, KernelSource
from tests.helpers import REPO_ROOT

ARCHS = ("sm_80", "sm_90")
ELF_MAGIC = b"\x7fELF"


def run_check(cache_dir, *args) -> subprocess.Popen:
    env = dict(os.environ, FLASHGNN_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "flashgnn.cuda", "--check", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def registered_sources() -> list[KernelSource]:
    load_all_sources()
    return list(SOURCES.values())


def registered_kernels() -> list[tuple[str, str]]:
    return [(src.file, name) for src in registered_sources() for name in src.name_expressions]


@pytest.fixture
def src() -> KernelSource:
    """The smallest registered source (quick to compile), with two instantiations."""
    load_all_sources()
    return SOURCES["mebcrs_build.cu"]


def cache_files(cache_dir, suffix: str) -> list:
    return sorted(cache_dir.glob(f"*{suffix}")) if cache_dir.is_dir() else []


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty cubin cache for in-process compiles."""
    path = tmp_path / "cache"
    monkeypatch.setenv("FLASHGNN_CACHE_DIR", str(path))
    return path


@pytest.fixture
def kernel_copy(tmp_path, monkeypatch):
    """A writable copy of kernels/ that the compiler reads instead of the repository's."""
    path = tmp_path / "kernels"
    shutil.copytree(sources.kernel_dir(), path)
    monkeypatch.setattr(sources, "kernel_dir", lambda: path)
    monkeypatch.setattr(compiler, "kernel_dir", lambda: path)
    return path


def test_check_compiles_every_kernel_for_each_arch(tmp_path):
    rc, out, err = finish(run_check(tmp_path, "--arch", ",".join(ARCHS)))
    assert rc == 0, f"--check failed:\n{out}\n{err}"
    kernels = registered_kernels()
    assert kernels, "no kernel is registered"
    for arch in ARCHS:
        for file, name in kernels:
            row = re.compile(rf"^{arch}\s+{re.escape(file)}\s+{re.escape(name)}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$",
                             re.MULTILINE)
            m = row.search(out)
            assert m, f"no register report for {name} ({file}) on {arch}:\n{out}"
            assert int(m.group(1)) > 0, f"{name} on {arch} reports {m.group(1)} registers"
    # it really compiled: one cubin per source and architecture, each an ELF image
    cubins = cache_files(tmp_path, ".cubin")
    assert len(cubins) == len(registered_sources()) * len(ARCHS)
    assert all(c.read_bytes()[:4] == ELF_MAGIC for c in cubins)


def test_second_compile_is_a_cache_hit(src, cache_dir, monkeypatch):
    first = compiler.compile_source(src, "sm_80")
    files = cache_files(cache_dir, "")
    assert files, "nothing was written to the cache"
    stamps = {f: f.stat().st_mtime_ns for f in files}

    import cuda.core

    def no_compiler(*args, **kwargs):
        raise AssertionError("NVRTC ran although the cache holds this kernel")

    monkeypatch.setattr(cuda.core, "Program", no_compiler)
    second = compiler.compile_source(src, "sm_80")
    assert second.cubin == first.cubin and second.symbols == first.symbols
    assert {f: f.stat().st_mtime_ns for f in cache_files(cache_dir, "")} == stamps
    # without the cache NVRTC must run, so the patched compiler above was really in the way
    with pytest.raises(RuntimeError, match="NVRTC failed"):
        compiler.compile_source(src, "sm_80", use_cache=False)


def test_cache_key_changes_with_arch_source_header_and_instantiations(src, cache_dir, kernel_copy):
    compiler.compile_source(src, "sm_80")
    assert len(cache_files(cache_dir, ".cubin")) == 1
    compiler.compile_source(src, "sm_90")
    assert len(cache_files(cache_dir, ".cubin")) == 2

    (kernel_copy / src.file).write_text(src.text() + "\n// a changed source\n")
    compiler.compile_source(src, "sm_80")
    assert len(cache_files(cache_dir, ".cubin")) == 3

    header = kernel_copy / "common.cuh"
    header.write_text(header.read_text() + "\n// a changed header\n")
    compiler.compile_source(src, "sm_80")
    assert len(cache_files(cache_dir, ".cubin")) == 4

    fewer = KernelSource(src.file, src.name_expressions[:1])
    assert fewer.name_expressions != src.name_expressions, "the source needs two instantiations for this check"
    compiler.compile_source(fewer, "sm_80")
    assert len(cache_files(cache_dir, ".cubin")) == 5


def test_two_processes_compiling_into_one_cache(tmp_path):
    procs = [run_check(tmp_path, "--arch", ",".join(ARCHS)) for _ in range(2)]
    results = [finish(p) for p in procs]
    for rc, out, err in results:
        assert rc == 0, f"a concurrent --check failed:\n{out}\n{err}"
    assert results[0][1] == results[1][1], "the two processes report different kernels or registers"
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left in the cache"
    cubins = cache_files(tmp_path, ".cubin")
    assert len(cubins) == len(registered_sources()) * len(ARCHS)
    symbols = set()
    for cubin in cubins:
        assert cubin.read_bytes()[:4] == ELF_MAGIC
        symbols |= set(json.loads(cubin.with_suffix(".json").read_text())["symbols"])
    assert symbols == {name for _, name in registered_kernels()}


@pytest.mark.parametrize("arch", ["sm_8x", "compute_80", "80", "sm_90 "])
def test_malformed_arch_is_a_clear_error(arch, src, cache_dir):
    with pytest.raises(ValueError, match="architecture must look like 'sm_90'"):
        compiler.compile_source(src, arch)


def test_check_rejects_a_malformed_arch(tmp_path):
    rc, out, err = finish(run_check(tmp_path, "--arch", "sm_8x"))
    assert rc != 0
    assert "architecture must look like 'sm_90', got 'sm_8x'" in err


def test_check_fails_on_an_arch_nvrtc_does_not_support(tmp_path):
    rc, out, err = finish(run_check(tmp_path, "--arch", "sm_52"))
    assert rc == 1
    assert "FAILED" in out
    assert "NVRTC failed to compile" in err and "sm_52" in err
    assert not cache_files(tmp_path, ".cubin")


def test_check_with_no_arch_is_an_error(tmp_path):
    rc, out, err = finish(run_check(tmp_path, "--arch", ","))
    assert rc != 0, f"--check compiled nothing yet exited 0:\n{out}"


def test_require_device_without_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        runtime.require_device(torch.device("cuda"))


def test_require_device_rejects_pre_ampere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "Tesla T4")
    with pytest.raises(RuntimeError, match=r"Tesla T4 has compute capability 7\.5.*8\.0 or newer"):
        runtime.require_device(torch.device("cuda"))


def test_launch_without_gpu_is_a_clear_error(monkeypatch):
    from flashgnn._cuda.build import scatter_values

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    values = torch.ones(3)
    perm = torch.tensor([0, 2, 5])
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        scatter_values(values, perm, 8)


def test_building_on_cuda_without_gpu_is_a_clear_error(monkeypatch):
    from flashgnn.format import MEBCRS

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        MEBCRS.from_csr([0, 1, 2], [1, 0], device="cuda")


def test_missing_cuda_python_is_a_clear_error(src, monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.core", None)  # makes `import cuda.core` fail
    with pytest.raises(RuntimeError, match=r"pip install 'flashgnn\[cuda\]'"):
        compiler.compile_source(src, "sm_80", use_cache=False)
