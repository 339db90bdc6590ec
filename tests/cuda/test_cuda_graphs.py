"""The capture mechanism of ``flashgnn.cuda_graphs`` without a GPU: torch's CUDA streams and
graphs replaced by stand-ins that record what happens, so that the recipe (warm-ups on the
capture stream of the caller's stream, the caller's stream restored, random numbers left as
found, failures raised or warned) and the arbitration with the layers' replay are checked on
the CPU. The GPU tests (test_cuda_graph_gpu.py, test_cuda_graph_training_gpu.py,
test_replay.py) run the real thing."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from flashgnn import cuda_graphs
from flashgnn.ops.replay import NodeReplay


class FakeStream:
    def __init__(self, device=None):
        self.device_index, self.cuda_stream, self.device = 0, id(self), "cuda:0"
        self.waited_for = []

    def wait_stream(self, other):
        self.waited_for.append(other)


class FakeGraph:
    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


class FakeCuda:
    """The current stream, whether it is capturing, and the torch.cuda functions using them."""

    def __init__(self):
        self.current = FakeStream()
        self.capturing = False

    @contextlib.contextmanager
    def graph(self, graph, stream=None, capture_error_mode="global"):
        # like torch's: on failure the capture's stream stays current
        previous, self.current, self.capturing = self.current, stream, True
        try:
            yield
        finally:
            self.capturing = False
        self.current = previous


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    for name, value in {
        "device": lambda device: contextlib.nullcontext(),
        "current_device": lambda: 0,
        "current_stream": lambda device=None: fake.current,
        "set_stream": lambda stream: setattr(fake, "current", stream),
        "Stream": FakeStream,
        "CUDAGraph": FakeGraph,
        "graph": fake.graph,
        "is_current_stream_capturing": lambda: fake.capturing,
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
    }.items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(cuda_graphs, "_CAPTURE_STREAMS", {})
    return fake


def test_a_step_warms_up_on_the_capture_stream_then_captures_there(cuda):
    caller = cuda.current
    seen = []

    def fn():
        seen.append((cuda.current, cuda.capturing, cuda_graphs.capturing()))
        return len(seen)

    step = cuda_graphs.CudaGraphStep(fn)
    assert [step() for _ in range(cuda_graphs.WARMUP_CALLS)] == [1, 2] and not step.captured
    out = step()  # captures (fn runs once more, recording) and replays
    assert step.captured and out == 3 and step() == 3 and step.graph.replays == 2
    assert len(seen) == cuda_graphs.WARMUP_CALLS + 1  # replays do not call fn
    side = seen[0][0]
    assert side is not caller and all(stream is side for stream, _, _ in seen)
    assert [capturing for _, capturing, _ in seen] == [False, False, True]
    assert all(held for _, _, held in seen)  # warm-ups and capture: a nested replay runs eagerly
    assert cuda.current is caller and not cuda_graphs.capturing()
    assert caller in side.waited_for and side in caller.waited_for  # ordered both ways

    cuda.current = FakeStream()  # another caller's stream: another capture stream
    cuda_graphs.graphed(fn)
    assert seen[-1][0] not in (side, caller)


def test_a_failed_capture_raises_the_reason_and_restores_the_caller_s_stream(cuda):
    caller = cuda.current

    def fn():
        if cuda.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        return 1

    step = cuda_graphs.CudaGraphStep(fn)
    step()
    step()
    failed = "synchronises with the host.*train.cuda_graph=false"
    with pytest.raises(cuda_graphs.CaptureError, match=failed) as e:
        step()
    assert "operation not permitted" in str(e.value) and isinstance(e.value, RuntimeError)
    assert cuda.current is caller and not cuda_graphs.capturing()
    warned = "capturing a layer's kernels in a CUDA graph failed, it runs eagerly: operation not"
    with pytest.warns(UserWarning, match=warned):
        cuda_graphs.warn_eager("a layer's kernels", e.value)


def test_warm_ups_inside_a_capture_leave_the_random_numbers_as_found(cuda):
    torch.manual_seed(3)
    want = torch.rand(4)
    torch.manual_seed(3)
    graph, out = cuda_graphs.capture(lambda: torch.rand(4), "cuda", warmup=2)
    # the capture's own run draws what an eager call would: the warm-ups took nothing
    assert torch.equal(out, want) and isinstance(graph, FakeGraph)


def test_a_step_needs_a_warm_up(cuda):
    with pytest.raises(ValueError, match="warm-up"):
        cuda_graphs.CudaGraphStep(lambda: None, warmup=0)


def test_layers_replay_outside_captures_only(cuda):
    x = SimpleNamespace(is_cuda=True)  # all that applies() reads of the features
    replay = NodeReplay(True)
    assert replay.applies(x, 10)
    cuda.capturing = True  # the caller's own torch.cuda.graph
    assert not replay.applies(x, 10)
    cuda.capturing = False
    inside = []
    cuda_graphs.graphed(lambda: inside.append(replay.applies(x, 10)))
    assert inside == [False] * (cuda_graphs.WARMUP_CALLS + 1) and replay.applies(x, 10)
    with pytest.raises(ZeroDivisionError), cuda_graphs.on_capture_stream("cuda"):
        1 / 0
    assert replay.applies(x, 10)  # a failure inside does not leave the layers eager
