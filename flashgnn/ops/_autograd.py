"""How the ops are called: the dispatcher only when compiling.

Each op is a plain implementation (which picks the CUDA kernel or the reference from its
inputs) registered as a torch.library custom op with fake and autograd kernels, so
torch.compile can trace it. An eager call through the dispatcher costs several kernel
launches' worth of host time, so eager calls skip it: without gradients they run the
implementation itself, with gradients an autograd.Function with the very same setup_context
and backward. Backward functions call ops through the same entry point; grad mode is off there,
so they run the implementation too (or the op, when AOTAutograd traces the backward), unless a
higher derivative is asked for (``create_graph``): then the Function records them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._torch_private import dispatch_mode_active


def tracing() -> bool:
    """True under torch.compile or any tracing dispatch mode (make_fx, AOTAutograd, fake
    tensors), where the ops must go through the dispatcher."""
    return torch.compiler.is_compiling() or dispatch_mode_active()


def op_entry(op, impl, setup_context, backward):
    """Register ``setup_context``/``backward`` on the custom op ``op`` (whose implementation is
    ``impl``) and return the function the rest of the package calls it through."""
    op.register_autograd(backward, setup_context=setup_context)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            out = impl(*inputs)
            setup_context(ctx, inputs, out)
            return out

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    def call(*inputs):
        if tracing():
            return op(*inputs)
        if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in inputs
        ):
            return Function.apply(*inputs)
        return impl(*inputs)

    return call


def recorded_gradients(
    composed: Callable[..., torch.Tensor],
    inputs: tuple[torch.Tensor | None, ...],
    needs: tuple[bool, ...],
    grad: torch.Tensor,
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of ``composed(*inputs)`` for ``grad`` with respect to the ``inputs`` that
    ``needs`` marks (None for the others), recorded by autograd: how a fused node's backward
    runs when a higher derivative is asked for (``create_graph``), ``composed`` being its
    output from the registered ops' entries. Each input enters as an alias of its own, so that
    one tensor passed as two inputs gets the gradient of each."""
    aliases = tuple(None if t is None else t.view_as(t) for t in inputs)
    output = composed(*aliases)
    wanted = [t for t, need in zip(aliases, needs) if need]
    found = iter(torch.autograd.grad(output, wanted, grad, create_graph=True, allow_unused=True))
    return tuple(next(found) if need else None for need in needs)
