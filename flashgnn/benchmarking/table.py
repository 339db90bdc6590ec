"""Benchmark result rows and their tables: CSV (with the environment beside it), Markdown,
and aligned text for the terminal."""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from .results import provenance


@dataclass
class Row:
    """One measured configuration. ``impl`` is the precision of flashgnn's kernel, the baseline's
    name, or ``k8``/``k4`` for a format build; ``size`` is N (SpMM) or K (SDDMM);
    ``speedup`` = baseline ms / ms; ``rel_err`` against float64 (``--check``);
    ``extra_mb``: device memory the call allocated (output + workspace)."""

    graph: str
    nnz: int | None
    op: str
    impl: str
    size: int | None = None
    ms: float | None = None
    gflops: float | None = None
    gbps: float | None = None
    speedup: float | None = None
    rel_err: float | None = None
    extra_mb: float | None = None
    error: str = ""


COLUMNS = [f.name for f in fields(Row)]
_HEADERS = {
    "size": "N/K",
    "gbps": "GB/s",
    "gflops": "GFLOPS",
    "speedup": "x base",
    "rel_err": "rel err",
    "extra_mb": "op MB",
}


def geomean(values) -> float:
    """Geometric mean of positive numbers."""
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def geomean_rows(rows: list[Row], graphs: set[str], label: str) -> list[Row]:
    """Geometric-mean speedup per (op, impl, size) over the rows of ``graphs`` that have one;
    ``graph`` of the result is ``label (n graphs)``."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r.graph in graphs and r.speedup and not r.error:
            groups[(r.op, r.impl, r.size)].append(r.speedup)
    return [
        Row(f"{label} ({len(v)} graphs)", None, op, impl, size, speedup=geomean(v))
        for (op, impl, size), v in groups.items()
    ]


def cell(name: str, value) -> str:
    """``value`` of the column ``name`` as a table shows it ("" for none)."""
    if value is None or value == "":
        return ""
    if name == "rel_err":
        return f"{value:.1e}"
    if name.startswith("speedup"):
        return f"{value:.2f}x"
    if name == "nnz":
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    return str(value)


def cells(rows: list[Row], columns: list[str]) -> list[list[str]]:
    return [[cell(c, getattr(r, c)) for c in columns] for r in rows]


def used_columns(rows: list[Row]) -> list[str]:
    """The columns that hold a value in at least one row."""
    return [c for c in COLUMNS if any(getattr(r, c) not in (None, "") for r in rows)]


def text_table(header: list[str], body: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(row[i]) for row in body)) if body else len(h)
        for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += [
        "  ".join(c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(row, widths))
        for row in body
    ]
    return "\n".join(lines)


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(lines)


def headers(columns: list[str]) -> list[str]:
    return [_HEADERS.get(c, c) for c in columns]


def write_csv(rows: list, path, env: dict[str, str], row_type: type) -> None:
    """Write ``rows`` (``row_type`` dataclasses, one column per field) to the CSV file ``path``
    (its folder created) and its stamp to ``environment_path(path)``: ``env``
    (``kernels.environment``: commit, date, command, GPU, driver, torch, ...), any of the
    commit, UTC date and command it lacks taken from ``results.provenance``, so that a report
    can say where the numbers come from and how to measure them again."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    columns = [f.name for f in fields(row_type)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({c: "" if getattr(r, c) is None else getattr(r, c) for c in columns})
    environment_path(path).write_text(json.dumps({**provenance(), **env}, indent=1) + "\n")


def environment_path(csv_path) -> Path:
    """The JSON file beside a result CSV that holds its environment: ``<csv_path>.json``."""
    return Path(f"{csv_path}.json")


def read_environment(csv_path) -> dict[str, str] | None:
    """The environment written beside ``csv_path``, None when there is none."""
    path = environment_path(csv_path)
    return json.loads(path.read_text()) if path.is_file() else None


def read_csv(path, row_type: type) -> list:
    """The rows of a result CSV as ``row_type`` dataclasses. Cells are parsed by the field's
    annotation (int, float, else str; empty = None, or "" for a str field); columns the type
    lacks are ignored, and a field the file lacks takes its default (ValueError if it has none)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        present = set(reader.fieldnames or ())
        missing = [
            x.name
            for x in fields(row_type)
            if x.name not in present and x.default is MISSING and x.default_factory is MISSING
        ]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(map(repr, missing))}")
        kept = [x for x in fields(row_type) if x.name in present]
        return [
            row_type(**{x.name: _parse(line[x.name], str(x.type)) for x in kept}) for line in reader
        ]


def _parse(text: str, annotation: str):
    kind = annotation.split("|")[0].strip()
    if text == "":
        return "" if kind == "str" else None
    if kind == "int":
        return int(float(text))
    if kind == "float":
        return float(text)
    return text
