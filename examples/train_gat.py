"""Train GAT (graph attention) on cora with flashgnn; any config of configs/ works.

python examples/train_gat.py                                   # configs/gat-cora.yaml
python examples/train_gat.py --config configs/gat-citeseer.yaml train.precision=fp16
python examples/train_gat.py --resume runs/<run folder> train.epochs=1500
"""

import sys
from pathlib import Path

from flashgnn.train import example_main

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gat-cora.yaml"

if __name__ == "__main__":
    sys.exit(example_main(CONFIG, "Train GAT (graph attention) on cora."))
