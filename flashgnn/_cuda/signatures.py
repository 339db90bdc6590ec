"""The signatures of the ``__global__`` kernels as kernels/*.cu writes them, read without a
compiler, and their comparison with the Python declarations (declarations.py): a parameter
added, dropped, renamed, retyped or moved on either side is reported before any launch."""

from __future__ import annotations

import re
from pathlib import Path

from .params import KernelParams

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?![\w(])[ \t]*(.*)$", re.MULTILINE)
# __global__ void [__launch_bounds__(...)] name( -- the bounds may hold one level of parentheses
_KERNEL = re.compile(
    r"__global__\s+void\s+"
    r"(?:__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*)?(\w+)\s*\("
)
_TEMPLATE = re.compile(r"template\s*<([^{};]*)>\s*$")
_TYPE_PARAM = re.compile(r"\b(?:typename|class)\s+(\w+)")
_WORD = re.compile(r"\b\w+\b")
_PARAM = re.compile(r"(.*?)\s*\b(\w+)$", re.DOTALL)


def _code(text: str) -> str:
    """``text`` without comments, continued lines joined."""
    return _COMMENT.sub(" ", text).replace("\\\n", " ")


def object_macros(text: str) -> dict[str, str]:
    """Object-like ``#define``s of a source: name -> replacement text."""
    return {name: body.strip() for name, body in _DEFINE.findall(_code(text))}


def header_macros(kernels: Path) -> dict[str, str]:
    """Object-like macros of the headers (*.cuh) of the folder ``kernels``."""
    macros: dict[str, str] = {}
    for header in sorted(kernels.glob("*.cuh")):
        macros.update(object_macros(header.read_text()))
    return macros


def _split_top(text: str) -> list[str]:
    """``text`` cut at its commas outside <> and ()."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _closing(text: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at``."""
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced parentheses in a kernel signature")


def normal_type(ctype: str, type_params: set[str]) -> str:
    """A parameter's C type as declarations spell it: ``__restrict__`` dropped, ``const X*`` with
    one space, and X written T when the template's arguments choose it (a template type
    parameter, or a ``typename ...::T``)."""
    ctype = " ".join(ctype.replace("__restrict__", " ").split())
    const = ctype.startswith("const ")
    base = ctype.removeprefix("const ").replace(" *", "*").replace("* ", "*")
    stars = len(base) - len(base.rstrip("*"))
    base = base.rstrip("*").strip()
    if base.startswith("typename ") or base in type_params:
        base = "T"
    return f"{'const ' if const else ''}{base}{'*' * stars}"


def kernel_signatures(
    text: str, macros: dict[str, str] | None = None
) -> dict[str, list[tuple[str, str]]]:
    """Kernel name -> its parameters ``(name, C type)`` (``normal_type``) for every ``__global__``
    function of a .cu file's ``text``; object-like macros (the file's and ``macros``) are
    expanded in parameter lists."""
    code = _code(text)
    defined = {**(macros or {}), **object_macros(text)}
    found: dict[str, list[tuple[str, str]]] = {}
    for m in _KERNEL.finditer(code):
        name = m.group(1)
        open_at = m.end() - 1
        params = code[open_at + 1 : _closing(code, open_at)]
        for _ in range(8):  # macros naming macros
            params = _WORD.sub(lambda w: defined.get(w.group(0), w.group(0)), params)
        head = code[: m.start()]
        head = head[max(head.rfind(c) for c in ";{}") + 1 :]
        template = _TEMPLATE.search(head)
        type_params = set(_TYPE_PARAM.findall(template.group(1))) if template else set()
        if name in found:
            raise ValueError(f"kernel {name} is defined twice")
        found[name] = []
        for param in _split_top(params):
            parsed = _PARAM.fullmatch(param.replace("__restrict__", " ").strip())
            if parsed is None or not parsed.group(1):
                raise ValueError(f"cannot read parameter {param!r} of kernel {name}")
            found[name].append((parsed.group(2), normal_type(parsed.group(1), type_params)))
    return found


def differences(kernel: str, declared: KernelParams, actual: list[tuple[str, str]]) -> list[str]:
    """How ``declared`` differs from the kernel's parameters ``actual``: one line per parameter
    whose name or type differs at its position, and one for the counts; empty when they agree."""

    def show(param: tuple[str, str] | None) -> str:
        return "nothing" if param is None else f"{param[0]}: {param[1]}"

    out = []
    for i in range(max(len(declared), len(actual))):
        want = declared.params[i] if i < len(declared) else None
        got = actual[i] if i < len(actual) else None
        if want != got:
            out.append(
                f"{kernel}: parameter {i} is declared {show(want)}, the kernel has {show(got)}"
            )
    if len(declared) != len(actual):
        out.append(f"{kernel}: {len(declared)} parameters declared, the kernel has {len(actual)}")
    return out


def check_declarations(kernels: Path, declared: dict[str, dict[str, KernelParams]]) -> list[str]:
    """Every difference between the kernels of ``kernels``/*.cu (headers' macros expanded) and
    ``declared`` (file -> kernel -> parameters): files and kernels on one side only, and
    ``differences`` of each kernel. Empty when they agree."""
    macros = header_macros(kernels)
    problems = []
    files = {path.name: path for path in sorted(kernels.glob("*.cu"))}
    for file in sorted(set(declared) - set(files)):
        problems.append(f"{file}: declared, but there is no such kernel file")
    for file, path in files.items():
        actual = kernel_signatures(path.read_text(), macros)
        mine = declared.get(file, {})
        for kernel in sorted(set(actual) - set(mine)):
            problems.append(f"{file}: kernel {kernel} has no declaration")
        for kernel in sorted(set(mine) - set(actual)):
            problems.append(f"{file}: {kernel} is declared, but the file has no such kernel")
        for kernel in sorted(set(actual) & set(mine)):
            lines = differences(kernel, mine[kernel], actual[kernel])
            problems += [f"{file}: {line}" for line in lines]
    return problems
