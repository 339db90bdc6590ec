"""Command line of the run-time CUDA layer: ``python -m flashgnn.cuda --check``."""

import sys

from ._cuda.check import main

if __name__ == "__main__":
    sys.exit(main())
