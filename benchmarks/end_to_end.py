"""End-to-end training epochs of GCN, AGNN and GAT against PyG and torch.sparse:
``python benchmarks/end_to_end.py [options]``, the same as ``flashgnn bench e2e [options]``
(``--help`` lists them; the method is in flashgnn/benchmarking/end_to_end.py)."""

import sys

import common  # noqa: F401  (puts the checkout on sys.path)

from flashgnn.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "e2e", *sys.argv[1:]]))
