"""Training from YAML configs, full-graph or mini-batch: ``train(config)``, the config helpers,
and the precision scope that covers sparse ops and dense matmuls alike."""

from .config import DEFAULTS, ConfigError, apply_overrides, load_config, resolve_config
from .loop import train
from .precision import precision_scope

__all__ = [
    "train",
    "load_config",
    "apply_overrides",
    "resolve_config",
    "ConfigError",
    "DEFAULTS",
    "precision_scope",
]
