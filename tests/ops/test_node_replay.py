"""The bookkeeping of ``ops.replay`` that needs no GPU: which storages count as held elsewhere,
when a configuration captures, takes a second slot or stays eager, and that copies of a layer
start without graphs."""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch

from flashgnn.nn import GCNConv
from flashgnn.ops import replay as R


def test_statics_see_every_other_holder_of_their_storage():
    out, grad = torch.randn(5, 3), torch.randn(3)
    statics = R.Statics(out, grad, None, out)  # a tensor twice, and a missing one, count once
    assert not statics.held_elsewhere()
    alias = out.detach()
    assert statics.held_elsewhere()
    del alias
    view = grad[1:]
    assert statics.held_elsewhere()
    del view
    assert not statics.held_elsewhere()

    class Saves(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(out.detach())
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return grad.detach()  # AccumulateGrad keeps this alias as .grad

    w = torch.nn.Parameter(torch.randn(3))
    y = Saves.apply(w)
    assert statics.held_elsewhere()  # the saved alias, until the backward frees it
    y.sum().backward()
    assert w.grad.untyped_storage().data_ptr() == grad.untyped_storage().data_ptr()
    assert statics.held_elsewhere()
    w.grad = None
    assert not statics.held_elsewhere()


class FakeSlot:
    def __init__(self):
        self.busy = False
        self.backward_graph = None
        self.forward_statics = self

    def held_elsewhere(self):
        return self.busy


def test_a_configuration_captures_on_its_second_call_and_takes_a_free_slot():
    config = R.Configuration(keep=())
    made, backward = [], []

    def make():
        made.append(FakeSlot())
        return made[-1]

    def make_backward(slot):
        backward.append(slot)
        slot.backward_graph = object()

    assert config.forward_slot(make, make_backward) is None and not made  # the first call warms up
    first = config.forward_slot(make, make_backward)
    assert made == [first] and backward == []  # no eager backward ran yet
    config.backward_warm = True
    assert config.forward_slot(make, make_backward) is first and backward == [first]
    first.busy = True
    second = config.forward_slot(make, make_backward)
    assert second is not first and backward == [first, second]
    second.busy = True
    assert (
        config.forward_slot(make, make_backward) is None and len(made) == R.SLOTS
    )  # every slot busy
    first.busy = False
    assert config.forward_slot(make, None) is first


def test_a_failed_capture_leaves_the_configuration_eager():
    config = R.Configuration(keep=())
    calls = []

    def make():
        calls.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    config.forward_slot(make, None)
    with pytest.warns(UserWarning, match="runs eagerly"):
        assert config.forward_slot(make, None) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.forward_slot(make, None) is None
    assert calls == [1]


def test_configurations_least_recently_used_first():
    replay = R.NodeReplay()
    keys = [("k", i) for i in range(R.CONFIGURATIONS + 1)]
    first = replay.configuration(keys[0], keep=())
    for key in keys[1 : R.CONFIGURATIONS]:
        replay.configuration(key, keep=())
    assert replay.configuration(keys[0], keep=()) is first  # used again: now the most recent
    replay.configuration(keys[-1], keep=())
    assert replay.configuration(keys[0], keep=()) is first
    assert (
        replay.configuration(keys[1], keep=()) is not None
        and len(replay._configurations) == R.CONFIGURATIONS
    )


def test_cpu_calls_and_copies_of_a_layer():
    x = torch.randn(4, 3)
    assert not R.NodeReplay(True).applies(x, 10) and not R.NodeReplay(None).applies(x, 10)
    layer = GCNConv(3, 2, replay=True)
    layer.replay.configuration(("k",), keep=())
    twin = copy.deepcopy(layer)
    assert (
        twin.replay is not layer.replay
        and twin.replay.enabled is True
        and twin.replay.graphs() == (0, 0)
    )
    assert len(twin.replay._configurations) == 0
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.replay.enabled is True and len(loaded.replay._configurations) == 0
    assert "replay=True" in repr(layer) and "replay=None" in repr(GCNConv(3, 2))


def test_statics_leave_out_what_the_body_only_reads():
    weight, out = torch.nn.Parameter(torch.randn(3, 3)), torch.randn(4, 3)
    statics = R.Statics(out, weight, external=(weight,))  # an fp32 W returned as it is
    alias = weight.detach()  # the optimizer's view, a pending backward's saved W: not the slot's
    assert not statics.held_elsewhere()
    held = out[0]
    assert statics.held_elsewhere()
    del alias, held


def test_a_slot_of_several_inputs_copies_each_and_counts_each_held(monkeypatch):
    """A slot whose input is a tuple (GAT's ft, er, el): each given tensor is copied into its
    static buffer before the replay, and any of them held elsewhere makes the slot busy."""

    class Graph:
        def __init__(self, body, outputs):
            self.body, self.outputs = body, outputs

        def replay(self):
            for static, fresh in zip(self.outputs, self.body()):
                static.copy_(fresh)

    def capture(body, device):
        outputs = body()
        return Graph(body, outputs), outputs

    monkeypatch.setattr(R, "capture", capture)
    inputs = (torch.zeros(4, 3), torch.zeros(4, 1))
    slot = R.Slot(inputs, lambda x: (x[0] * x[1], x[1] + 1))
    a, b = torch.randn(4, 3), torch.randn(4, 1)
    out, shifted = slot.replay_forward((a, b))
    assert torch.equal(out, a * b) and torch.equal(shifted, b + 1)
    assert slot.forward_statics.held_elsewhere()  # the aliases returned
    del out, shifted
    assert not slot.forward_statics.held_elsewhere()
    held = inputs[1][2:]
    assert slot.forward_statics.held_elsewhere()
    del held
    with pytest.raises(ValueError):  # one tensor for two inputs
        slot.replay_forward(a)


def test_set_replay_reaches_every_layer_that_replays():
    from flashgnn.nn import AGNNConv, GATConv, set_replay
    from flashgnn.nn import pyg as pyg_layers

    model = torch.nn.ModuleList(
        [GCNConv(4, 4), AGNNConv(), GATConv(4, 2, 2), pyg_layers.GATConv(4, 2, heads=2)]
    )
    set_replay(model, False)
    assert [m.replay.enabled for m in model] == [False] * 4
    assert "replay=None" in repr(GATConv(4, 2, 2))
