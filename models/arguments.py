"""Checks of the constructor arguments the models share: a size of 0 or a dropout of 2 builds
a network that trains on nothing, so it is refused with the argument's name and value."""

from __future__ import annotations

import math
import numbers


def check_size(name: str, value) -> None:
    """ValueError unless ``value`` is an integer >= 1 (a width, a head or layer count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be >= 1 (an integer), got {value!r}")


def check_layer_sizes(in_feats, hidden_feats, out_feats, num_layers) -> None:
    """``check_size`` of the widths and the layer count that every model takes."""
    for name, value in (
        ("in_feats", in_feats),
        ("hidden_feats", hidden_feats),
        ("out_feats", out_feats),
        ("num_layers", num_layers),
    ):
        check_size(name, value)


def check_probability(name: str, value) -> None:
    """ValueError unless ``value`` is a number in [0, 1) (a dropout rate)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not 0 <= value < 1
    ):
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")


def check_beta(name: str, value) -> None:
    """ValueError unless ``value`` is None or a finite number (an attention temperature)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
    ):
        raise ValueError(f"{name} must be a finite number or None, got {value!r}")
