"""PNG plots of benchmark results (matplotlib, the optional ``plot`` extra), each stamped with
where the numbers were measured."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def missing() -> str | None:
    """Why plots cannot be drawn (None when matplotlib is installed)."""
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install 'flashgnn[plot]'): plots skipped"
    return None


def _figure(width: float, height: float = 4.8):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt, plt.figure(figsize=(width, height))


def _plain_log_axis(axis, suffix: str = "") -> None:
    """Label a log axis with plain numbers ("2x", not "2 x 10^0") and no minor labels."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    axis.set_minor_formatter(NullFormatter())


def _save(plt, fig, stamp: str, path: Path) -> Path:
    fig.text(0.005, 0.005, stamp, fontsize=7, color="0.35", va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def distribution(
    groups: dict[str, list[float]],
    ylabel: str,
    title: str,
    stamp: str,
    path: Path,
    marked: dict[str, list[tuple[str, float]]] | None = None,
) -> Path:
    """One box (and its points, jittered) per label of ``groups`` on a log axis with a line at
    1; ``marked``: named values drawn apart per label (the generated graphs, say)."""
    plt, fig = _figure(max(6.0, 0.55 * len(groups) + 2))
    ax = fig.add_subplot()
    labels = list(groups)
    filled = [i for i, k in enumerate(labels, start=1) if groups[k]]
    if filled:
        ax.boxplot([groups[labels[i - 1]] for i in filled], positions=filled, showfliers=False)
    jitter = np.random.default_rng(0)
    for i, k in enumerate(labels, start=1):
        ax.plot(
            i + jitter.uniform(-0.15, 0.15, len(groups[k])),
            groups[k],
            ".",
            color="tab:blue",
            alpha=0.5,
            markersize=4,
        )
    names = sorted({name for pairs in (marked or {}).values() for name, _ in pairs})
    for name, marker in zip(names, "D^sv*P"):
        points = [
            (labels.index(k) + 1, v)
            for k, pairs in (marked or {}).items()
            if k in labels
            for n, v in pairs
            if n == name
        ]
        if points:
            ax.plot(*zip(*points), marker, linestyle="none", label=name, markersize=6)
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis, "x")
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if names:
        ax.legend(fontsize=8)
    return _save(plt, fig, stamp, path)


def scatter(
    panels: dict[str, dict[str, list[tuple[float, float]]]],
    xlabel: str,
    ylabel: str,
    title: str,
    stamp: str,
    path: Path,
) -> Path:
    """One log-log panel per key of ``panels`` (three to a row), one series of (x, y) points
    per label."""
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    plt, fig = _figure(5.0 * cols + 1, 4.2 * rows + 0.6)
    for i, (panel, series) in enumerate(panels.items(), start=1):
        ax = fig.add_subplot(rows, cols, i)
        for label, points in series.items():
            ax.plot(*zip(*sorted(points)), "o", label=label, markersize=3, alpha=0.7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_axis(ax.xaxis)
        _plain_log_axis(ax.yaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {panel}", fontsize=10)
        ax.legend(fontsize=7)
    return _save(plt, fig, stamp, path)
