"""A cheaper eager path through the ops' autograd.

torch.library's Python autograd registration costs several times a plain autograd.Function
per call. Eager calls that need gradients therefore run the op inside an autograd.Function
with the very same setup_context and backward; compiled code calls the op itself, whose
registered autograd is that same pair."""
from __future__ import annotations

import torch


def with_eager_autograd(op, setup_context, backward):
    """``op`` callable with autograd: registered on the op, and as an autograd.Function."""
    op.register_autograd(backward, setup_context=setup_context)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            out = op(*inputs)  # grad mode is off here, so the op's own autograd is not entered
            setup_context(ctx, inputs, out)
            return out

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    def call(*inputs):
        if torch.compiler.is_compiling() or not torch.is_grad_enabled():
            return op(*inputs)
        return Function.apply(*inputs)

    return call
