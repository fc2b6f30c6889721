#!/usr/bin/env bash
# CPU forward-pass benchmark: builds the driver, runs it on llama-300m (bf16, preset in memory) and
# tiny-moe, and writes bench/cpu_forward/RESULTS.md (medians with spread, against the machine's
# read-bandwidth and FMA ceilings measured in the same run, the reference pass and OpenBLAS).
#   bench/cpu_forward/run.sh [BUILD_DIR] [REPS]        (defaults: build/cpu, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
reps=${2:-5}
out=$build/bench_cpu_forward
mkdir -p "$out"

if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOTPASS_WITH_TRAFFIC=OFF
fi
cmake --build "$build" --target hotpass_bench_cpu_forward hotpass_forward_cpu_baseline hotpass_forward_cpu_reference -j2
export HOTPASS_PLUGIN_DIR=$build/lib/hotpass/forward

"$build/bin/hotpass_bench_cpu_forward" preset:llama-300m "$reps" | tee "$out/llama-300m.jsonl"
"$build/bin/hotpass_bench_cpu_forward" preset:tiny-moe "$reps" --no-blas | tee "$out/tiny-moe.jsonl"

python3 "$root/bench/cpu_forward/summarize.py" \
  --date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  --machine "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(lscpu | sed -n 's/^L3 cache: *//p') L3" \
  --commit "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' + uncommitted changes')" \
  --load "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --reps "$reps" \
  "$out/llama-300m.jsonl" "$out/tiny-moe.jsonl" > "$root/bench/cpu_forward/RESULTS.md"
echo "wrote $root/bench/cpu_forward/RESULTS.md"
