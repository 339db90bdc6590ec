"""Training from YAML configs, full-graph or mini-batch: ``train(config)``, the config helpers,
and the precision scope that covers sparse ops and dense matmuls alike."""

from .atomic import DiskFullError
from .checkpoint import CheckpointError
from .config import DEFAULTS, ConfigError, apply_overrides, load_config, resolve_config
from .loop import train
from .precision import precision_scope
from .run_folder import RunExistsError

__all__ = [
    "train",
    "load_config",
    "apply_overrides",
    "resolve_config",
    "ConfigError",
    "CheckpointError",
    "RunExistsError",
    "DiskFullError",
    "DEFAULTS",
    "precision_scope",
]
