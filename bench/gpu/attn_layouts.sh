#!/usr/bin/env bash
# The attention's block layouts forced one at a time (issue 8, knob attn_mma_one_wave): for each setting
# W:n (W warps a block, 8 on tensor-core steps only; n splits per (token, kv head)) every attention step
# that is not a small one runs that layout, and the decode bench times the step at each batch. "def" runs
# the plugin's own rule. Two interleaved rounds; the table gives both runs and the faster one against def's.
#
# The plugin must be built with bench/gpu/patches/force_attention_layout.patch, which reads HOTPASS_ATTN_FORCE
# (never in a default build):
#   bench/gpu/build_variant.sh force "" bench/gpu/patches/force_attention_layout.patch
#   strip -o build/gpu-stage/var/force.so build/release/variants/libhp_forward_cuda_force.so
# then on the GPU machine, from the repository root with a staged build (build/gpu-stage):
#   bench/gpu/attn_layouts.sh OUT_DIR build/gpu-stage/var/force.so llama-3.2-1b 8,16,20,24,28,32,36,40,48,56,64 def 4:1 4:2 4:3 4:4 8:1 8:2
# usage: bench/gpu/attn_layouts.sh OUT_DIR PLUGIN PRESET BATCHES SETTING... (KV 1024 positions; REPS env, default 30)
set -uo pipefail
[ $# -ge 5 ] || { sed -n 2,13p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STAGE=${BUILD_DIR:-$ROOT/build/gpu-stage}
out=$1 plugin=$2 preset=$3 batches=$4
shift 4
mkdir -p "$out"
export LD_LIBRARY_PATH="$STAGE/runtime-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
for round in 1 2; do
  for setting in "$@"; do
    if [ "$setting" = def ]; then unset HOTPASS_ATTN_FORCE; else export HOTPASS_ATTN_FORCE=$setting; fi
    name="${preset}_${setting//:/_}_r$round"
    timeout 180 "$STAGE/bin/hotpass_bench_gpu_decode" --forward "$plugin" --preset "$preset" --batches "$batches" --kv 1024 \
      --reps "${REPS:-30}" --json "$out/$name.json" > "$out/$name.log" 2>&1 || echo "$setting round $round: exit $?"
  done
done
unset HOTPASS_ATTN_FORCE
python3 - "$out" "$preset" "$@" <<'PY' | tee "$out/summary_$preset.txt"
import json, sys
out, preset, settings = sys.argv[1], sys.argv[2], sys.argv[3:]
steps = {}
for s in settings:
    for r in (1, 2):
        try:
            rows = json.load(open(f"{out}/{preset}_{s.replace(':', '_')}_r{r}.json"))["batches"]
        except Exception as error:
            print(f"{s} round {r}: {error}")
            continue
        for row in rows:
            steps.setdefault(row["batch"], {}).setdefault(s, []).append(row["step_ms_median"])
print(f"{preset}: step ms, both rounds (the faster against def's faster)")
print("| batch | " + " | ".join(f"`{s}`" for s in settings) + " |")
print("|" + " --- |" * (len(settings) + 1))
for batch in sorted(steps):
    base = min(steps[batch].get("def", [0.0]))
    cells = []
    for s in settings:
        ms = steps[batch].get(s)
        cell = "-" if not ms else "/".join(f"{x:.3f}" for x in ms)
        if ms and base and s != "def":
            cell += f" ({100 * (min(ms) / base - 1):+.1f}%)"
        cells.append(cell)
    print(f"| {batch} | " + " | ".join(cells) + " |")
PY
