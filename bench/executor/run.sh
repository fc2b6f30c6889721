#!/usr/bin/env bash
# Executor figures (issue 3): cold start, hot-swap cost, experiments/hour with hot swap vs restart,
# and the runner's statistics (false positives, smallest detected slowdown). Prints Markdown;
# append it to bench/RESULTS.md. Usage: bench/executor/run.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
cmake --build "$build" --target hotpass executor_bench >/dev/null
echo "### Executor: cold start, hot swap, experiments per hour"
echo
echo "$(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, commit $(git rev-parse --short HEAD)."
echo "Median (min-max) of 5 executor starts and 15 swaps (first verified step: one random batch of"
echo "<= 8 tokens); evaluations = load, 4 verification batches + 4-step greedy check, the workload"
echo "shapes, fast-tier timing (0.2 s/shape), unload, of prebuilt candidates (6 on tiny-llama, 3 on"
echo "llama-300m, whose fast tier serves 2 of its 16 layers and is verified on batches of <= 2 x 16"
echo "tokens and timed on one decode shape: the CPU reference it is checked against is slow)."
echo
"$build/bin/executor_bench" "$build/bin/hotpass" "$PWD" swap preset:tiny-llama preset:llama-300m
echo
echo "### Runner statistics: false positives and detectable slowdown"
echo
echo "The reference artifact against itself (+0%) and against copies slowed by a known fraction, on"
echo "one decode shape of preset:tiny-llama (1 s of ABAB timing per trial; significant = signed-rank"
echo "test of the timed pairs p < 0.01, 95% paired bootstrap CI excluding 1, effect >= 1%). Quiet, then"
echo "with bench/executor/noise.sh beside it (busy loops on every core, 0.25 s on, 0.25 s off)."
echo
"$build/bin/executor_bench" "$build/bin/hotpass" "$PWD" stats preset:tiny-llama
echo
echo "With the noisy neighbour:"
echo
setsid bench/executor/noise.sh &
noise=$!
trap 'kill -- -$noise 2>/dev/null' EXIT
"$build/bin/executor_bench" "$build/bin/hotpass" "$PWD" stats preset:tiny-llama
kill -- -$noise 2>/dev/null || true
