#!/bin/sh
# Runs every benchmark whose tables BENCHMARKS.md shows on this machine's GPU, each writing
# benchmarks/results/<gpu>/<benchmark>.csv and its stamp (replacing that GPU's last run), then
# regenerates BENCHMARKS.md from the results folder. About 10 minutes on one H100.
#
#   benchmarks/run_all.sh                  # all of them
#   benchmarks/run_all.sh kernels layers   # some: kernels, layers, training, e2e, ablation;
#   benchmarks/run_all.sh seeds            # seeds (the seed papers' formats) runs only when named,
#   benchmarks/run_all.sh accuracy         # as do accuracy (papers' models, 10 seeds, with PyG)
#   benchmarks/run_all.sh reorder          # and reorder (locality reordering)
#   benchmarks/run_all.sh --compare ...    # keep each replaced result as <benchmark>.before.csv:
#                                          # BENCHMARKS.md then shows the two runs side by side
#
# PYTHON names the interpreter (default: python); FLASHGNN_COMMIT the commit for the stamps
# where the tree is a copy without .git. Exit status 1 when a benchmark recorded a failed row
# (its CSV holds the row and the error) or did not run; the others still run.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
RESULTS=benchmarks/results
status=0
compare=0
if [ "${1:-}" = --compare ]; then
    compare=1
    shift
fi
gpu=$("$PYTHON" -c 'from flashgnn.benchmarking.results import device_name, gpu_slug
print(gpu_slug(device_name("cuda")))') || exit 2

bench() {
    current="$RESULTS/$gpu/$1.csv"
    if [ $compare = 1 ] && [ -f "$current" ]; then
        mv "$current" "$RESULTS/$gpu/$1.before.csv"
        if [ -f "$current.json" ]; then mv "$current.json" "$RESULTS/$gpu/$1.before.csv.json"; fi
    fi
    echo "== flashgnn bench $* --results $RESULTS" >&2
    "$PYTHON" -m flashgnn bench "$@" --results "$RESULTS" || status=1
}

for benchmark in ${*:-kernels layers training e2e ablation}; do
    case $benchmark in
        kernels) bench kernels --timer back-to-back --check ;;
        layers) bench layers --precisions fp32,fp16 --rounds 5 ;;
        training) bench training --precisions fp32,fp16 ;;
        e2e) bench e2e --graphs cora,deezer_europe,musae_facebook,musae_github \
                 --models gcn2,agnn,gat --precisions fp32,fp16 --cuda-graph ;;
        ablation) bench ablation --check ;;
        seeds) bench seeds ;;
        reorder) bench reorder --check ;;
        accuracy) bench accuracy --jobs 9 ;;
        *) echo "unknown benchmark: $benchmark (kernels layers training e2e ablation seeds reorder accuracy)" >&2
           exit 2 ;;
    esac
done
"$PYTHON" -m flashgnn bench report --results "$RESULTS" --markdown BENCHMARKS.md || status=1
exit $status
