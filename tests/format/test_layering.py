"""The package's layers, read from the imports of its source (ast, no import): data flows one way,
dataset -> Graph -> nn -> ops -> _cuda -> kernels, and the formats import no kernels."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "flashgnn"
FORMAT_MODULES = (f"{PACKAGE}.formats",)
# what the formats and the launchers both use: below every layer
SHARED_BELOW = ("flashgnn.tensor_cache", "flashgnn.pattern_nnz", "flashgnn._torch_private")
ABOVE_CUDA = FORMAT_MODULES + (
    "flashgnn.graph",
    "flashgnn.sampling",
    "flashgnn.ops",
    "flashgnn.nn",
    "flashgnn.models",
)


def _source_files() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__) of flashgnn and of models/ (installed as
    flashgnn.models)."""
    modules = {}
    for base, prefix in ((ROOT / PACKAGE, PACKAGE), (ROOT / "models", f"{PACKAGE}.models")):
        for path in base.rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join((prefix,) + (parts[:-1] if is_package else parts))
            modules[name] = (path, is_package)
    return modules


MODULES = _source_files()


class Import:
    """One imported module: its name, and whether the import runs when the importer is
    imported (module level, class bodies) rather than when a function is called."""

    def __init__(self, target: str, at_import: bool):
        self.target, self.at_import = target, at_import


def _imports(name: str) -> list[Import]:
    path, is_package = MODULES[name]
    package = name if is_package else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, at_import: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(alias.name, at_import) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    source = f"{base}.{child.module}" if child.module else base
                else:
                    source = child.module
                found.append(Import(source, at_import))
                # `from package import module` imports the module too
                found.extend(
                    Import(f"{source}.{alias.name}", at_import)
                    for alias in child.names
                    if f"{source}.{alias.name}" in MODULES
                )
            visit(
                child,
                at_import
                and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
            )

    visit(ast.parse(path.read_text()), True)
    return found


IMPORTS = {name: _imports(name) for name in MODULES}


def _within(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


def _violations(importers, forbidden) -> list[str]:
    return sorted(
        f"{name} imports {imp.target}"
        for name in MODULES
        if any(_within(name, i) for i in importers)
        for imp in IMPORTS[name]
        if any(_within(imp.target, f) for f in forbidden)
    )


def test_the_parser_sees_imports_at_every_level():
    targets = {imp.target: imp.at_import for imp in IMPORTS["flashgnn.formats.mebcrs"]}
    assert targets["flashgnn.formats.windowed"] and targets["torch"]
    assert "flashgnn.ops.precision" in {imp.target for imp in IMPORTS["flashgnn.precision_context"]}
    # from . import nn, ops
    assert {"flashgnn.nn", "flashgnn.ops"} <= {imp.target for imp in IMPORTS["flashgnn"]}
    # importing a module runs the packages above it
    assert "flashgnn.ops" in _import_time_edges()["flashgnn.precision_context"]
    # a function-level import is seen, and known as one
    in_data = {imp.target: imp.at_import for imp in IMPORTS["flashgnn.data"]}
    assert not in_data["flashgnn.data.synthetic"]
    assert "flashgnn.models" in MODULES and "flashgnn._cuda.runtime" in MODULES


def test_format_modules_import_no_kernels_and_no_ops():
    """The formats are the specification: they reach the GPU builder only through
    flashgnn.formats.device_builders, which flashgnn.ops fills."""
    assert _violations(FORMAT_MODULES, (f"{PACKAGE}._cuda", f"{PACKAGE}.ops")) == []


@pytest.mark.parametrize(
    "layer",
    [
        "flashgnn.graph",
        "flashgnn.sampling",
        "flashgnn.nn",
        "flashgnn.models",
        "flashgnn.data",
        "flashgnn.training",
    ],
)
def test_layers_above_ops_reach_kernels_only_through_ops(layer):
    assert _violations((layer,), (f"{PACKAGE}._cuda",)) == []


def test_cuda_launchers_import_nothing_above_them():
    assert _violations((f"{PACKAGE}._cuda",), ABOVE_CUDA) == []


def test_what_formats_and_launchers_share_imports_no_layer():
    imported = {
        imp.target for name in SHARED_BELOW for imp in IMPORTS[name] if _within(imp.target, PACKAGE)
    }
    assert imported <= set(SHARED_BELOW)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph ``edges`` (as a closed path), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def _import_time_edges() -> dict[str, set[str]]:
    """Module -> the package modules its import runs: the imported module and the packages
    above it (their __init__ runs first), except those that hold the importer (already
    running when it is imported)."""
    edges = {}
    for name in MODULES:
        targets = set()
        for imp in IMPORTS[name]:
            if not imp.at_import or not _within(imp.target, PACKAGE):
                continue
            parts = imp.target.split(".")
            for i in range(2, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in MODULES and not _within(name, target):
                    targets.add(target)
            if imp.target == PACKAGE and name != PACKAGE:
                targets.add(PACKAGE)
        edges[name] = targets
    return edges


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_between_modules():
    assert _cycle(_import_time_edges()) is None
