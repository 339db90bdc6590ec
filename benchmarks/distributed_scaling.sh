#!/bin/sh
# Several GPUs: strong scaling of full-graph GCN 3x256 in fp16 on the generated IGB-medium-like
# graph (10M nodes, 130M edges with self-loops, 1024 fp16 features; configs/gcn-igb-medium-4gpu
# .yaml), and the IGB-large-like graph (100M nodes, 1.29B edges; configs/gcn-igb-large-4gpu.yaml)
# on 4 GPUs. Every point is a `flashgnn train` run of its own, data generation included; rows
# land in benchmarks/results/<gpu>/distributed.csv (medium replaces the table, large adds to
# it), then BENCHMARKS.md is regenerated and the table printed.
#
#   benchmarks/distributed_scaling.sh medium  # 1, 2 and 4 GPUs in contiguous parts, 4 GPUs in
#                                             # label-propagation parts, 4 GPUs without overlap
#                                             # (its exchanges timed), 4 GPUs exchanging blocks
#                                             # of 64 columns: about 6 minutes on 4 H100s
#   benchmarks/distributed_scaling.sh large   # IGB-large-like on 4 GPUs (features streamed
#                                             # from host memory on 80 GB GPUs): 3 to 5 minutes
#
# PYTHON names the interpreter (default: python); EPOCHS the epochs of each run (default 8 for
# medium, 3 for large; the first is left out of the median). NVLink multicast stays off. Exit
# status 1 when a point failed (its row holds the error).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RESULTS=benchmarks/results
export NCCL_NVLS_ENABLE=0
status=0

point() {
    echo "== flashgnn bench distributed $*" >&2
    "$PYTHON" -m flashgnn bench distributed --results "$RESULTS" "$@" || status=1
}

case ${1:-medium} in
    medium)
        medium="--config configs/gcn-igb-medium-4gpu.yaml --epochs ${EPOCHS:-8} --timeout 240"
        point $medium --devices 1,2,4
        point $medium --devices 4 --append --set distributed.partition=label-propagation
        point $medium --devices 4 --append --set distributed.overlap=false
        point $medium --devices 4 --append --set distributed.exchange_columns=64
        ;;
    large)
        # activations of 12.8 GB on each GPU: segments that grow keep the allocator from
        # splitting its memory into pieces too small for them
        export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        point --config configs/gcn-igb-large-4gpu.yaml --epochs "${EPOCHS:-3}" --timeout 500 \
            --devices 4 --append
        ;;
    *)
        echo "usage: $0 medium|large" >&2
        exit 2
        ;;
esac
"$PYTHON" -m flashgnn bench report --results "$RESULTS" --markdown BENCHMARKS.md || status=1
exit $status
