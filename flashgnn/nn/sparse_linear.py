"""A linear layer whose weight is pruned to a fixed pattern of V x 1 vectors (CVSE), and the
conversion of a model's ``nn.Linear`` layers into it."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from ..formats.cvse import CVSE, VECTORS
from ..ops import spmm
from ..ops.precision import check_precision
from ..ops.sparse_linear import sparse_linear, uses_kernel, weight_format
from ..precision_context import resolve_precision
from ..prune import check_sparsity, magnitude

FORMATS = ("cvse",)
_PATTERN = ("row_ptr", "col_idx", "vec_mask")  # the buffers holding W's pattern


def _check_features(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(n)


def _check_vector(vector) -> int:
    if isinstance(vector, bool) or vector not in VECTORS:
        raise ValueError(f"vector must be one of {VECTORS}, got {vector!r}")
    return int(vector)


def _check_format(format: str) -> str:
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    return format


def pattern_of(mask: torch.Tensor, vector: int) -> CVSE:
    """The CVSE of a pruning mask (bool [out, in], whole V x 1 vectors along the output
    dimension), values 0."""
    rows, cols = mask.nonzero(as_tuple=True)
    indptr = torch.zeros(mask.shape[0] + 1, dtype=torch.int64, device=mask.device)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=mask.shape[0]), 0)
    values = torch.zeros(cols.numel(), dtype=torch.float32, device=mask.device)
    return CVSE.from_csr(indptr, cols, values, n_cols=mask.shape[1], vector=vector)


class SparseLinear(nn.Module):
    """``y = x W^T + b`` with W [out_features, in_features] pruned to a fixed pattern of
    ``vector`` x 1 vectors along the output dimension, held in CVSE (strips of V output rows).

    The learnable weight is ``values``, a Parameter [V * n_vectors] in CVSE's value layout;
    slots outside the pattern (the rows past out_features of a short last strip) stay 0. The
    pattern lives in the buffers row_ptr, col_idx and vec_mask, so a state_dict carries it.
    A new layer draws nn.Linear's initialisation and prunes it by magnitude at ``sparsity``
    (``flashgnn.magnitude``). ``precision``: that of the sparse product (None: the
    ``flashgnn.precision`` context). x [..., in_features] of any float dtype -> [...,
    out_features] in x's dtype. On CUDA in fp16/bf16 with many tokens the forward runs
    ``flashgnn.ops.sparse_linear``'s kernel, else ``flashgnn.ops.spmm`` on the CVSE
    (Y^T = W X^T); both backwards give dX through W^T and dW by SDDMM on the pattern.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        sparsity: float = 0.9,
        vector: int = 8,
        format: str = "cvse",
        precision: str | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.in_features = _check_features(in_features, "in_features")
        self.out_features = _check_features(out_features, "out_features")
        self.vector = _check_vector(vector)
        self.format = _check_format(format)
        self.precision = None if precision is None else check_precision(precision)
        dense = nn.Linear(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.sparsity = check_sparsity(sparsity)
        self._set_weight(dense.weight.detach(), magnitude(dense.weight, sparsity, vector))
        self.bias = None if dense.bias is None else nn.Parameter(dense.bias.detach().clone())

    def _set_weight(self, weight: torch.Tensor, mask: torch.Tensor) -> None:
        """Take the pattern of ``mask`` and W's entries on it as the values."""
        fmt = pattern_of(mask, self.vector)
        for name in _PATTERN:
            self.register_buffer(name, getattr(fmt, name))
        rows, cols = mask.nonzero(as_tuple=True)
        values = fmt.values_from_csr(weight[rows, cols].to(torch.float32)).to(weight.dtype)
        self.values = nn.Parameter(values)

    @classmethod
    def from_dense(
        cls,
        linear: nn.Linear,
        sparsity: float = 0.9,
        vector: int = 8,
        format: str = "cvse",
        precision: str | None = None,
    ) -> SparseLinear:
        """A SparseLinear holding ``linear``'s weight pruned by magnitude at ``sparsity`` in
        V x 1 vectors (and a copy of its bias), on its device and in its dtype."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_dense takes an nn.Linear, got {type(linear).__name__}")
        weight = linear.weight.detach()
        layer = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            sparsity,
            vector,
            format,
            precision,
            device=weight.device,
            dtype=weight.dtype,
        )
        layer._set_weight(weight, magnitude(weight, sparsity, vector))
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach().clone())
        return layer

    def weight_format(self) -> CVSE:
        """W in CVSE with ``values`` as its values."""
        fmt = weight_format(
            self.row_ptr,
            self.col_idx,
            self.vec_mask,
            self.out_features,
            self.in_features,
            self.vector,
        )
        return fmt.with_values(self.values)

    @property
    def weight(self) -> torch.Tensor:
        """The dense pruned W [out_features, in_features] (differentiable in ``values``)."""
        return self.weight_format().to_dense()

    @property
    def n_vectors(self) -> int:
        return self.col_idx.numel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"SparseLinear takes a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise ValueError(f"SparseLinear: x must be floating point, got {x.dtype}")
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"SparseLinear: x must be [..., {self.in_features}], got shape {tuple(x.shape)}"
            )
        if x.device != self.values.device:
            raise ValueError(f"SparseLinear: x is on {x.device}, the layer on {self.values.device}")
        precision = resolve_precision(self.precision)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        w = self.weight_format()
        if uses_kernel(x2, precision):
            y = sparse_linear(w, x2, self.values, self.bias, precision)
        else:
            y = spmm(w, x2.t(), precision, values=self.values).t()
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a saved pattern may hold another number of vectors: take its sizes
        for name in _PATTERN + ("values",):
            saved = state_dict.get(prefix + name)
            current = getattr(self, name)
            if isinstance(saved, torch.Tensor) and saved.shape != current.shape:
                fresh = current.new_empty(saved.shape)
                if name == "values":
                    self.values = nn.Parameter(fresh)
                else:
                    setattr(self, name, fresh)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        n_strips = -(-self.out_features // self.vector)
        if (
            self.row_ptr.shape != (n_strips + 1,)
            or self.vec_mask.shape != self.col_idx.shape
            or self.values.shape != (self.vector * self.col_idx.numel(),)
        ):
            raise ValueError(
                f"SparseLinear: the loaded pattern does not fit {self.out_features} outputs in "
                f"strips of {self.vector} (row_ptr {tuple(self.row_ptr.shape)}, col_idx "
                f"{tuple(self.col_idx.shape)}, values {tuple(self.values.shape)})"
            )

    def extra_repr(self) -> str:
        kept = self.n_vectors / max(-(-self.out_features // self.vector) * self.in_features, 1)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, vector={self.vector}, vectors={self.n_vectors}, "
            f"sparsity={1 - kept:.4g}, format={self.format!r}, precision={self.precision!r}"
        )


def sparsify(
    model: nn.Module,
    sparsity: float = 0.9,
    vector: int = 8,
    format: str = "cvse",
    precision: str | None = None,
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (at any depth, ``model`` itself excepted) by
    ``SparseLinear.from_dense`` of it, in place; returns ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"sparsify takes an nn.Module, got {type(model).__name__}")
    check_sparsity(sparsity)
    _check_vector(vector)
    _check_format(format)
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            setattr(
                model, name, SparseLinear.from_dense(child, sparsity, vector, format, precision)
            )
        else:
            sparsify(child, sparsity, vector, format, precision)
    return model


__all__ = ["SparseLinear", "sparsify", "pattern_of"]
