"""One GCN and one AGNN layer, forward + backward, against PyG:
``python benchmarks/layers.py [options]``, the same as ``flashgnn bench layers [options]``
(``--help`` lists them; the method is in
flashgnn/benchmarking/layers.py)."""

import sys

import common  # noqa: F401  (puts the checkout on sys.path)

from flashgnn.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "layers", *sys.argv[1:]]))
