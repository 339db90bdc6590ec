"""Fixtures of the training tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Torch at one intra-op thread for the rest of the module: the training tests' graphs are
    too small for threads to pay off, and on a busy machine two OpenMP threads waiting on each
    other cost ten times the work itself. Modules whose every test trains use it through
    ``pytestmark`` (module scope, so that their module-scoped fixtures run under it too)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
