"""``flashgnn train --config configs/<file>.yaml [section.key=value ...]``: one training run.

``--resume RUN_DIR`` continues a run from its last checkpoint, with the config saved in
that folder (overrides still apply, e.g. ``train.epochs=400`` to train longer). A new run
refuses a folder that holds a run unless ``--overwrite`` is given. ``train.devices=N`` trains
on N processes; under ``torchrun --nproc-per-node=N -m flashgnn train ...`` rank 0 reports.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .cli import DEBUG_HELP, run_reporting_errors
from .training import apply_overrides, load_config, train


def add_arguments(p, default_config: Path | None = None) -> None:
    source = p.add_mutually_exclusive_group(required=default_config is None)
    source.add_argument(
        "--config",
        type=Path,
        default=default_config,
        help="YAML run config (see configs/)"
        + (f"; default {default_config}" if default_config else ""),
    )
    source.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue the run in RUN_DIR"
    )
    p.add_argument(
        "--output", type=Path, help="run folder (default: <output.root>/<name>-<timestamp>)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run that the run folder holds (without it such a folder is refused)",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides with dotted keys, values read as YAML (train.lr=0.005)",
    )


def config_from_args(args) -> dict:
    """The config a command line asks for: its file (or the resumed run's), the overrides,
    ``--output``."""
    path = args.resume / "config.yaml" if args.resume is not None else args.config
    config = apply_overrides(load_config(path), args.overrides)
    if args.output is not None:
        config.setdefault("output", {})["dir"] = str(args.output)
    return config


def run(args) -> int:
    if args.resume is not None and args.output is not None:
        raise ValueError("--output cannot move a resumed run; it continues in its own folder")
    summary = train(config_from_args(args), resume=args.resume, overwrite=args.overwrite)
    if summary is None:  # a torchrun rank other than 0, which writes and reports the run
        return 0
    print(
        f"{summary['name']}: best epoch {summary['best_epoch']}/{summary['epochs_run']}, "
        f"{summary['metric']} val {summary['val']:.4f} test {summary['test']:.4f}, "
        f"{1000 * summary['epoch_time_s']:.2f} ms/epoch, preprocessing "
        f"{summary['preprocess_s']:.2f} s "
        f"-> {summary['run_dir']}"
    )
    return 0


def example_main(default_config: Path, description: str, argv=None) -> int:
    """The command line of the example scripts: ``flashgnn train`` with a default config."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser, default_config)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    args = parser.parse_args(argv)
    return run_reporting_errors("train", lambda: run(args), args.debug)
