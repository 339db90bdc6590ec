"""Train GCN (Kipf & Welling) on cora with flashgnn; any config of configs/ works.

python examples/train_gcn.py                                   # configs/gcn-cora.yaml
python examples/train_gcn.py --config configs/gcn-citeseer.yaml train.precision=fp16
python examples/train_gcn.py --resume runs/<run folder> train.epochs=400
"""

import sys
from pathlib import Path

from flashgnn.train import example_main

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gcn-cora.yaml"

if __name__ == "__main__":
    sys.exit(example_main(CONFIG, "Train GCN (Kipf & Welling) on cora."))
