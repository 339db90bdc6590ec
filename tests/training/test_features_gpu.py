"""On CUDA the whole-graph run keeps features stored in the run's half type in that type
(fp16/bf16 precision: autocast and the SpMM round them to it anyway, and float32 would take
twice the memory and a cast copy), and converts them to float32 otherwise."""

from __future__ import annotations

import pytest
import torch

from flashgnn.data.local_rows import load_generated_igb
from flashgnn.training import resolve_config, run_data
from flashgnn.training.ranks import Ranks
from tests.helpers import GPU

pytestmark = GPU


@pytest.mark.parametrize("precision,dtype", [("fp16", torch.float16), ("fp32", torch.float32)])
def test_whole_graph_features_keep_their_half_type(precision, dtype):
    dataset = load_generated_igb("medium", num_nodes=3000, num_edges=30000, num_features=16)
    assert dataset.x.dtype == torch.float16
    cfg = resolve_config(
        {"dataset": {"name": "generated-igb-medium"}, "train": {"precision": precision}}
    )
    data = run_data.whole_graph(cfg, Ranks(0, 1, torch.device("cuda", 0)), dataset, 0.0)
    assert data.x.dtype == dtype and data.x.is_cuda
    assert torch.equal(data.x.cpu().float(), dataset.x.float())
