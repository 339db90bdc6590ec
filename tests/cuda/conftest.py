"""Fixtures of the compiler and cache tests: a kernel cache under tmp_path, the tiny kernel
folder read instead of the repository's, and a count of NVRTC runs."""

from __future__ import annotations

import pytest

from flashgnn._cuda import compiler, sources
from tests.cuda.tiny_kernel import TINY_HEADER, TINY_SOURCE


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """``$FLASHGNN_CACHE_DIR``: a folder under tmp_path, not yet created."""
    path = tmp_path / "cache"
    monkeypatch.setenv("FLASHGNN_CACHE_DIR", str(path))
    return path


@pytest.fixture
def tiny_kernels(tmp_path, monkeypatch):
    """A kernels folder holding only tiny.cu and tiny.cuh, read instead of the repository's."""
    path = tmp_path / "kernels"
    path.mkdir()
    (path / "tiny.cu").write_text(TINY_SOURCE)
    (path / "tiny.cuh").write_text(TINY_HEADER)
    monkeypatch.setattr(sources, "kernel_dir", lambda: path)
    monkeypatch.setattr(compiler, "kernel_dir", lambda: path)
    return path


@pytest.fixture
def nvrtc_runs(monkeypatch) -> list:
    """Records every NVRTC program the compiler creates (cuda.core.Program, counted)."""
    real = compiler._import_cuda_core()
    runs = []

    class CountingCudaCore:
        ProgramOptions = real.ProgramOptions

        @staticmethod
        def Program(*args, **kwargs):
            runs.append(args[0])
            return real.Program(*args, **kwargs)

    monkeypatch.setattr(compiler, "_import_cuda_core", lambda: CountingCudaCore)
    return runs
