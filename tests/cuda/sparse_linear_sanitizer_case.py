"""A small case that runs the sparse linear kernels (kernels/sparse_linear.cu) on the GPU for
compute-sanitizer (a script, not a pytest module):

    compute-sanitizer --tool memcheck python tests/cuda/sparse_linear_sanitizer_case.py
    compute-sanitizer --tool racecheck python tests/cuda/sparse_linear_sanitizer_case.py
    compute-sanitizer --tool initcheck python tests/cuda/sparse_linear_sanitizer_case.py

Every token tile of the chunk kernel (16, 32, 64 tokens a block) and every shape of the window
kernel (at 32-row chunks, so that the ring of chunk slots wraps), V = 2, 4, 8, fp16 and bf16,
with tails everywhere: tokens, input features (several chunks and a partial one) and outputs (a
short last strip, more than one strip group) not multiples of anything; one layer forward and
backward through SparseLinear.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flashgnn._cuda.sparse_linear import (  # noqa: E402
    TOKEN_TILES,
    WINDOW_SHAPES,
    Variant,
    sparse_linear_cuda,
)
from flashgnn.nn import SparseLinear  # noqa: E402


def main() -> None:
    torch.manual_seed(0)
    for vector, n_in, n_out in ((8, 530, 517), (4, 300, 259), (2, 70, 131)):
        layer = SparseLinear(n_in, n_out, sparsity=0.8, vector=vector).cuda()
        for precision in ("fp16", "bf16"):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                x = torch.randn(45, n_in, device="cuda", dtype=dtype)
                variants = [Variant("chunk", mt) for mt in TOKEN_TILES] + [
                    Variant("window", shape=shape, list_vectors=1) for shape in WINDOW_SHAPES
                ]
                for variant in variants:
                    sparse_linear_cuda(
                        x,
                        layer.values.detach(),
                        layer.bias.detach(),
                        layer.row_ptr,
                        layer.col_idx,
                        n_out,
                        vector,
                        precision,
                        variant=variant,
                    )
    layer = SparseLinear(200, 90, sparsity=0.9, vector=8, precision="fp16").cuda()
    x = torch.randn(1100, 200, device="cuda", requires_grad=True)  # the kernel's token count
    layer(x).square().sum().backward()
    torch.cuda.synchronize()
    print("sparse linear sanitizer case done")


if __name__ == "__main__":
    main()
