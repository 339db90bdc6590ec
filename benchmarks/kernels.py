"""SpMM and SDDMM on ME-BCRS against cuSPARSE: ``python benchmarks/kernels.py [options]``,
the same as ``flashgnn bench kernels [options]`` (``--help`` lists them; the method and the
formulas are in flashgnn/benchmarking/kernels.py)."""

import sys

import common  # noqa: F401  (puts the checkout on sys.path)

from flashgnn.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "kernels", *sys.argv[1:]]))
