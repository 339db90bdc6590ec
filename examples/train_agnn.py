"""Train AGNN (attention-based propagation) on cora with flashgnn; any config of configs/ works.

python examples/train_agnn.py                                   # configs/agnn-cora.yaml
python examples/train_agnn.py --config configs/agnn-citeseer.yaml train.precision=fp16
python examples/train_agnn.py --resume runs/<run folder> train.epochs=1500
"""

import sys
from pathlib import Path

from flashgnn.train import example_main

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "agnn-cora.yaml"

if __name__ == "__main__":
    sys.exit(example_main(CONFIG, "Train AGNN (attention-based propagation) on cora."))
