"""``python -m flashgnn.cuda --check --arch sm_80,sm_90``: check every kernel's signature
against its declared parameters, compile every kernel for each architecture with NVRTC (no GPU
needed) and report registers and spills."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from pathlib import Path

from . import cache
from .compiler import compile_source, resources_by_symbol
from .declarations import DECLARED
from .signatures import check_declarations
from .sources import SOURCES, kernel_dir


def load_all_sources() -> None:
    """Import every module of this package: each declares its kernel sources on import."""
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{mod.name}")


def check(archs: list[str], use_cache: bool) -> int:
    try:
        cache.open_dir()  # an unsafe cache folder is one error, not one per kernel
    except cache.UnsafeCacheDir as e:
        print(e, file=sys.stderr)
        return 1
    load_all_sources()
    problems = check_declarations(kernel_dir(), DECLARED)
    for problem in problems:
        print(f"signature FAILED: {problem}", file=sys.stderr)
    failures = len(problems)
    print(
        f"{'arch':<7} {'source':<20} {'kernel':<52} {'regs':>5} {'spill st':>9} {'spill ld':>9} "
        f"{'stack':>6}"
    )
    for arch in archs:
        for src in SOURCES.values():
            try:
                compiled = compile_source(src, arch, use_cache=use_cache)
            except RuntimeError as e:
                failures += 1
                print(f"{arch:<7} {src.file:<20} FAILED\n{e}", file=sys.stderr)
                continue
            res = resources_by_symbol(compiled.log)
            for name, mangled in compiled.symbols.items():
                r = res.get(mangled)
                cols = (
                    f"{r.registers:>5} {r.spill_stores:>9} {r.spill_loads:>9} {r.stack:>6}"
                    if r
                    else "    (not reported)"
                )
                print(f"{arch:<7} {src.file:<20} {name:<52} {cols}")
    print("FAILED" if failures else "all kernels compiled")
    return 1 if failures else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashgnn.cuda", description=__doc__)
    p.add_argument(
        "--check",
        action="store_true",
        help="check kernel signatures, compile every kernel and report resources",
    )
    p.add_argument("--arch", default="sm_80,sm_90", help="comma-separated architectures")
    p.add_argument("--no-cache", action="store_true", help="ignore the on-disk cache")
    args = p.parse_args(argv)
    if not args.check:
        p.print_help()
        return 2
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    bad = [a for a in archs if not re.fullmatch(r"sm_\d+a?", a)]
    if not archs or bad:
        p.error(f"--arch takes comma-separated names like sm_80,sm_90; got {args.arch!r}")
    return check(archs, use_cache=not args.no_cache)
