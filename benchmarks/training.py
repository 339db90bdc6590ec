"""Epoch time and peak memory of GCN and AGNN training against PyG:
``python benchmarks/training.py [options]``, the same as ``flashgnn bench training [options]``
(``--help`` lists them; the method is in
flashgnn/benchmarking/training.py)."""

import sys

import common  # noqa: F401  (puts the checkout on sys.path)

from flashgnn.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "training", *sys.argv[1:]]))
