"""Fixtures shared by every test module (helpers that are not fixtures: tests/helpers.py)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import NO_DATA, load_npz_graph
from tests.helpers import data_dir as find_data_dir


@pytest.fixture
def data_dir():
    """Folder of the real datasets (``$FLASHGNN_DATA``, default ``<repo>/../shared/datasets``);
    the test is skipped when it is absent."""
    path = find_data_dir()
    if path is None:
        pytest.skip(NO_DATA)
    return path


@pytest.fixture
def load_graph(data_dir):
    """``load_graph(name)`` -> the graph's adjacency as a scipy CSR of float32 ones."""
    return load_npz_graph


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A NumPy generator seeded from the test's id (reproducible, different per test); torch's
    global generator is seeded the same way. The id is read as ``tests/<file>::<test>``, so a
    test keeps its draws when its file moves between the area folders."""
    path, sep, test = request.node.nodeid.partition("::")
    seed = zlib.crc32(f"tests/{Path(path).name}{sep}{test}".encode())
    torch.manual_seed(seed)
    return np.random.default_rng(seed)
