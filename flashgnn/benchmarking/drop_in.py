"""The rows of ``examples/pyg_drop_in.py --results``: PyG models trained with
``torch_geometric.nn`` and with ``flashgnn.nn.pyg`` in its place, the result CSV
``<gpu>/pyg-drop-in.csv`` and its table in BENCHMARKS.md."""

from __future__ import annotations

from dataclasses import dataclass

from . import table

BENCHMARK = "pyg-drop-in"
PYG = "torch_geometric.nn"
FLASHGNN = "flashgnn.nn.pyg"


@dataclass
class DropInRow:
    """One model trained with one layer module (``layers``: ``PYG`` or ``FLASHGNN``) fed one
    input (``edge_index``, or a torch.sparse CSR ``adj_t``): test accuracy after the epochs
    and the median time of a training epoch after the first, in ms."""

    dataset: str
    model: str
    layers: str
    input: str
    precision: str
    epochs: int | None = None
    accuracy: float | None = None
    epoch_ms: float | None = None
    error: str = ""


def fastest_pyg(rows: list[DropInRow]) -> dict[tuple[str, str], DropInRow]:
    """(dataset, model) -> PyG's fastest row of it."""
    best: dict[tuple[str, str], DropInRow] = {}
    for r in rows:
        key = (r.dataset, r.model)
        if r.layers == PYG and r.epoch_ms and (key not in best or r.epoch_ms < best[key].epoch_ms):
            best[key] = r
    return best


def summary(rows: list[DropInRow]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells): every row, its accuracy (%) and epoch time, and for flashgnn's the
    ratio of PyG's fastest epoch of the same model to its own (> 1: flashgnn faster)."""
    fastest = fastest_pyg(rows)
    header = ["data", "model", "layers", "input", "precision", "test acc", "ms / epoch"]
    header += ["x fastest PyG", "error"]
    body = []
    for r in rows:
        pyg = fastest.get((r.dataset, r.model))
        ratio = ""
        if r.layers == FLASHGNN and pyg is not None and r.epoch_ms:
            ratio = f"{pyg.epoch_ms / r.epoch_ms:.2f}x ({pyg.input})"
        body.append(
            [
                r.dataset,
                r.model,
                r.layers,
                r.input,
                r.precision,
                "" if r.accuracy is None else f"{100 * r.accuracy:.1f}",
                table.cell("ms", r.epoch_ms),
                ratio,
                r.error,
            ]
        )
    if not any(r.error for r in rows):
        header, body = header[:-1], [line[:-1] for line in body]
    return header, body
