"""An autograd node's kernels replayed from CUDA graphs, one configuration at a time.

On graphs of up to a few million edges an eager layer step costs the host several times what
it costs the GPU: every op is a trip through Python, torch's dispatcher and the driver. An op
given a ``NodeReplay`` runs each pass as an entry, run eagerly, which reads what the caller
passes (the features; the incoming gradient) into a static buffer, and a body, captured in a
CUDA graph (``cuda_graphs.capture``) and replayed, which reads only static buffers and tensors
the configuration keeps alive (parameters, the sparse format) and writes static buffers: two
host calls a pass instead of one per op, and the eager kernels' bits.

A configuration (the op's key: the identities of the tensors its body reads, shapes, dtypes,
precision, which gradients are needed, device and stream) is captured on its second call, the
first having filled every lazy cache eagerly; its backward once an eager backward of it ran.

Static tensors leave a replayed node only as aliases (``detach()``), so their storages' use
counts tell whether anything else holds them: an output the caller keeps, the saved tensors of
a forward whose backward has not run, a gradient AccumulateGrad kept as ``.grad``. A replay
overwrites what its graph writes, so it runs only while no one else holds any of that;
otherwise the call takes another slot (graphs and buffers of its own: ``out = model(x)`` still
holds the last step's output while the next forward runs) or, with every slot busy, runs
eagerly. Inside an outer capture or its warm-up (``cuda_graphs.capturing``: a whole step in a
``CudaGraphStep``, or the caller's own ``torch.cuda.graph``) and in inference mode, the op
runs eagerly.

A body may draw random numbers (GAT's attention dropout) from the device's default generator:
every capture registers it with its graph (torch does), so each replay reads the generator's
current seed and offset and advances it as the eager call would, and the replays that only
fill buffers for a capture leave it as they found it (``cuda_graphs.rng_kept``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import Tensor

from .._cuda.runtime import current_stream
from .._torch_private import storage_use_counter
from ..cuda_graphs import capture as capture_graph
from ..cuda_graphs import capturing, rng_kept, warn_eager

SLOTS = 2  # per configuration: the step in flight and the one before it
CONFIGURATIONS = (
    3  # per NodeReplay (training, evaluation, one more); the least recently used goes first
)
AUTO_MAX_NONZEROS = (
    1 << 22
)  # replay=None replays sparse matrices up to this size: beyond, steps are GPU-bound


def capture(
    body: Callable[[], object], device: torch.device
) -> tuple[torch.cuda.CUDAGraph, object]:
    """``cuda_graphs.capture`` of a node's body on ``device``, after one eager run on the
    capture stream (an eager backward may have run on autograd's own thread, so this thread
    may still lack its cuBLAS handle), with autograd off, autocast as the caller has it but
    without its cast cache, and other threads free to use the GPU meanwhile."""
    autocast = torch.autocast(
        "cuda",
        enabled=torch.is_autocast_enabled("cuda"),
        dtype=torch.get_autocast_dtype("cuda"),
        cache_enabled=False,
    )
    with torch.no_grad(), autocast:
        return capture_graph(
            body, device, warmup=1, what="a layer's kernels", capture_error_mode="thread_local"
        )


class Statics:
    """Static tensors, and whether anything besides their owner holds their storage. Tensors
    sharing a storage with one of ``external`` (what the body reads but does not write: a
    parameter it returns unconverted) are not the owner's and are left out."""

    def __init__(self, *tensors: Tensor | None, external: tuple = ()):
        # a data pointer names a storage: live storages with data never share one, and empty
        # ones (all at 0) hold nothing a replay could overwrite
        skip = {t.untyped_storage().data_ptr() for t in external if isinstance(t, Tensor)}
        storages = {}
        for t in tensors:
            if t is not None:
                s = t.untyped_storage()  # kept: the Python storage's own reference stays counted
                if s.data_ptr() not in skip:
                    storages.setdefault(s.data_ptr(), s)
        self._storages = list(storages.values())
        self._counts = [(count, count()) for count in map(storage_use_counter, self._storages)]

    def held_elsewhere(self) -> bool:
        """Whether a tensor other than the owner's shares one of the storages."""
        return any(count() > n for count, n in self._counts)


def _aliases(tensors: tuple) -> tuple:
    return tuple(None if t is None else t.detach() for t in tensors)


def _inputs(input: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return input if isinstance(input, tuple) else (input,)


class Slot:
    """One configuration's static buffers and graphs: ``input`` (written by the forward's entry;
    a tensor, or a tuple of them for an op of several inputs), the forward body's ``outputs``;
    after ``capture_backward``, ``grad_input`` (written by the backward's entry) and the
    backward body's ``grads``. ``external``: tensors the bodies read and may return but never
    write (parameters)."""

    def __init__(
        self,
        input: Tensor | tuple[Tensor, ...],
        body: Callable[[Tensor | tuple[Tensor, ...]], tuple],
        external: tuple = (),
    ):
        self.input = input
        self.device = _inputs(input)[0].device
        self.forward_graph, self.outputs = capture(lambda: body(input), self.device)
        self.forward_statics = Statics(*_inputs(input), *self.outputs, external=external)
        self.grad_input = self.backward_graph = self.grads = self.backward_statics = None

    def capture_backward(self, grad_input: Tensor, body: Callable[[Tensor], tuple]) -> None:
        """Capture the backward (the slot must be free): the forward is replayed first, so that
        the eager run before the capture reads written statics (drawing no numbers of the
        step's: its dropout masks are not the step's)."""
        with rng_kept(self.device):
            self.forward_graph.replay()
        self.backward_graph, self.grads = capture(lambda: body(grad_input), grad_input.device)
        self.grad_input = grad_input
        self.backward_statics = Statics(grad_input, *self.grads)

    def replay_forward(self, x: Tensor | tuple[Tensor, ...]) -> tuple:
        """The forward body's outputs for input ``x`` (copied into ``input``; a tuple like
        ``input``'s), as aliases."""
        for static, given in zip(_inputs(self.input), _inputs(x), strict=True):
            static.copy_(given)
        self.forward_graph.replay()
        return _aliases(self.outputs)

    def replays_backward(self) -> bool:
        """Whether a backward of this slot's forward can replay (else it runs eagerly)."""
        return self.backward_graph is not None and not self.backward_statics.held_elsewhere()

    def replay_backward(self) -> tuple:
        """The backward body's outputs for what the entry wrote into ``grad_input``, as aliases."""
        self.backward_graph.replay()
        return _aliases(self.grads)


class Configuration:
    """One key's state: calls seen, whether an eager backward ran, its slots. ``keep`` holds the
    objects whose ``id`` the key has, so that no other object takes their ids."""

    def __init__(self, keep: tuple):
        self.keep = keep
        self.calls = 0
        self.backward_warm = False
        self.failed = False
        self.slots: list[Slot] = []

    def forward_slot(
        self, make: Callable[[], Slot], make_backward: Callable[[Slot], None] | None
    ) -> Slot | None:
        """A slot to replay this call's forward on, or None to run it eagerly: the first call
        runs eagerly; later ones take a slot nothing else holds, capturing a new one (``make``)
        while there are fewer than SLOTS. ``make_backward(slot)`` captures the slot's backward
        once an eager backward has run (None: no backward is needed)."""
        self.calls += 1
        if self.calls == 1 or self.failed:
            return None
        slot = next((s for s in self.slots if not s.forward_statics.held_elsewhere()), None)
        try:
            if slot is None and len(self.slots) < SLOTS:
                slot = make()
                self.slots.append(slot)
            if (
                slot is not None
                and make_backward is not None
                and self.backward_warm
                and slot.backward_graph is None
            ):
                make_backward(slot)
        except (
            RuntimeError
        ) as e:  # a kernel that cannot be captured: this configuration stays eager
            self.failed = True
            warn_eager("a layer's kernels", e)
            return None
        return slot


def forward_slot(plan: tuple[Configuration, Slot | None] | None) -> Slot | None:
    """The slot an op's forward replays on, from ``NodeReplay.plan``'s result (None: eager)."""
    return None if plan is None else plan[1]


def backward_slot(plan: tuple[Configuration, Slot | None] | None) -> Slot | None:
    """The slot whose backward replays for a forward planned as ``plan``, or None: the op's
    eager backward runs, which warms this configuration's backward for a capture."""
    if plan is None:
        return None
    config, slot = plan
    if slot is not None and slot.replays_backward():
        return slot
    config.backward_warm = True
    return None


class NodeReplay:
    """The replay state an op keeps for one layer: its configurations, least recently used
    dropped first. ``enabled``: True replays every CUDA call it can, False none, None those on
    sparse matrices of at most AUTO_MAX_NONZEROS nonzeros. A copy (``copy.deepcopy``, pickling)
    starts empty."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = enabled
        self._configurations: OrderedDict[tuple, Configuration] = OrderedDict()

    def applies(self, x: Tensor, nnz: int) -> bool:
        """Whether a call on CUDA tensor ``x`` and a sparse matrix of ``nnz`` nonzeros replays."""
        if (
            self.enabled is False
            or not x.is_cuda
            or (self.enabled is None and nnz > AUTO_MAX_NONZEROS)
        ):
            return False
        return not torch.is_inference_mode_enabled() and not capturing()

    def plan(
        self,
        key: tuple,
        keep: tuple,
        device: torch.device,
        new_input: Callable[[], Tensor | tuple[Tensor, ...]],
        forward: Callable[[Tensor | tuple[Tensor, ...]], tuple],
        new_grad_input: Callable[[Slot], Tensor] | None = None,
        backward: Callable[[Slot, Tensor], tuple] | None = None,
    ) -> tuple[Configuration, Slot | None]:
        """(the configuration of ``key`` on ``device``'s current stream, the slot this call's
        forward replays on or None to run it eagerly). ``keep``: the objects the key names by
        ``id``, kept alive, whose tensors the bodies only read. A new slot's static input is
        ``new_input()`` (a tensor or a tuple of them, initialised: a capture runs its body once
        eagerly first), its forward
        body ``forward(input)``; its backward's static input ``new_grad_input(slot)`` and body
        ``backward(slot, grad_input)`` (None: no gradient is needed)."""
        config = self.configuration((*key, current_stream(device)), keep)

        def make_backward(slot: Slot) -> None:
            slot.capture_backward(new_grad_input(slot), lambda g: backward(slot, g))

        return config, config.forward_slot(
            lambda: Slot(new_input(), forward, keep), None if backward is None else make_backward
        )

    def configuration(self, key: tuple, keep: tuple) -> Configuration:
        config = self._configurations.get(key)
        if config is None:
            config = self._configurations[key] = Configuration(keep)
            if len(self._configurations) > CONFIGURATIONS:
                self._configurations.popitem(last=False)
        else:
            self._configurations.move_to_end(key)
        return config

    def graphs(self) -> tuple[int, int]:
        """(forward graphs, backward graphs) captured in the configurations kept."""
        slots = [s for c in self._configurations.values() for s in c.slots]
        return len(slots), sum(s.backward_graph is not None for s in slots)

    def __deepcopy__(self, memo) -> NodeReplay:
        return NodeReplay(self.enabled)

    def __getstate__(self) -> dict:
        return {"enabled": self.enabled}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["enabled"])

    def __repr__(self) -> str:
        return f"NodeReplay(enabled={self.enabled}, configurations={len(self._configurations)})"


def set_replay(module: torch.nn.Module, enabled: bool | None) -> torch.nn.Module:
    """Set kernel replay for every layer of ``module`` that has one (``GCNConv``,
    ``AGNNConv``, ``GATConv``): True, False or None (on graphs of at most AUTO_MAX_NONZEROS
    nonzeros); in place, dropping what was captured. Returns ``module``."""
    for m in module.modules():
        if isinstance(getattr(m, "replay", None), NodeReplay):
            m.replay = NodeReplay(enabled)
    return module
