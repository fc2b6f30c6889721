#!/usr/bin/env bash
# One device call for a kernel change (issue 8): the baseline's kernel tests and end-to-end GPU
# tests, then the decode bench of several builds of the CUDA baseline plugin in the same call
# (same GPU, same clocks), e.g. the plugin before the change, the staged one, and knob variants.
# Each plugin is benched twice, interleaved (A B C A B C), so the spread between the two runs of
# one plugin says what a difference between plugins must exceed.
#
# Variants: bench/gpu/build_variant.sh builds the plugin with other knob values or a patch; copy them
# into the stage (e.g. build/gpu-stage/var/) so that they travel with it to the GPU machine.
#
# usage: bench/gpu/ab_decode.sh OUT_DIR NAME=PLUGIN ... [-- extra bench args]
#        (PLUGIN: a path, or NAME of lib/hotpass/forward/libhp_forward_cuda_NAME.so in the stage;
#         logs and JSON go to OUT_DIR/ab_decode.tar.gz, the summary to stdout and OUT_DIR/summary.txt)
#        (run from the repository root on the GPU machine, with a staged build, build/gpu-stage;
#         the staged plugin itself is NAME=baseline; env HOTPASS_AB_SKIP_TESTS=1 skips the tests,
#         HOTPASS_AB_BREAKDOWN=NAME,NAME adds --breakdown to those plugins' first runs (with two or more, the
#         summary sets their kernel kinds side by side where they differ),
#         HOTPASS_AB_TIMELINE=NAME,NAME adds --timeline (CUPTI; the stage's runtime-libs has libcupti),
#         HOTPASS_AB_TESTS the test binaries to run (with the staged plugin),
#         HOTPASS_AB_VARIANT_TESTS test binaries that load the plugin by name (test_cuda_baseline) to run
#         once more per plugin given as a path, that plugin standing in for "baseline" (HOTPASS_PLUGIN_DIR),
#         narrowed by the gtest filter HOTPASS_AB_VARIANT_FILTER (default: all but the persistent step's tests,
#         which load their own plugin; HOTPASS_AB_SKIP_TESTS does not skip these), HOTPASS_AB_PRESET /
#         HOTPASS_AB_BATCHES the bench's
#         preset (llama-3.2-1b) and batches (1,8,32,64),
#         HOTPASS_AB_NCU=NAME:BATCH:REGEX[,...] after the timed runs profiles with Nsight Compute the
#         launches of kernels matching REGEX in plugin NAME's step at BATCH (after HOTPASS_AB_NCU_SKIP (60)
#         matching launches, at most HOTPASS_AB_NCU_COUNT (12); the bench runs without the engine's one-token
#         warm-up step, so every launch counted is one of BATCH's steps, eager ones first; clocks left alone; duration, DRAM and L2
#         throughput, occupancy, warp stalls) into OUT_DIR/ncu_NAME_BATCH.{ncu-rep,txt,csv}, with a table of
#         the launches in the summary; ncu runs each launch alone, so its durations compare launches, not steps)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STAGE=${BUILD_DIR:-$ROOT/build/gpu-stage}
FINAL_DIR=$1
shift
OUT_DIR=$(mktemp -d)
plugins=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do plugins+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
mkdir -p "$OUT_DIR"
[ -e /work/main ] || ln -sfn "$ROOT" /work/main
export LD_LIBRARY_PATH="$STAGE/runtime-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

# Runs staged test binary $2 with the remaining arguments into log $1 and prints its counts and
# failures under label $3. At 300 s a hang writes its main thread's backtrace first (run_test.sh),
# then is killed.
run_staged_test() {
  local log=$1 t=$2 label=$3
  shift 3
  [ -x "$STAGE/bin/$t" ] || { echo "not staged: $t"; return; }
  "$ROOT/bench/gpu/run_test.sh" "$STAGE" 300 "$STAGE/bin/$t" --gtest_color=no "$@" > "$log" 2>&1
  echo "$label: exit $? $(grep -c '^\[       OK \]' "$log") ok, $(grep -c '^\[  FAILED  \] .*\.' "$log") failed, $(grep -c '^\[  SKIPPED \] .*\.' "$log") skipped"
  grep -E "^\[  FAILED  \]|Failure|got .* expected|^=== stall_backtrace|^/.*\(.*\+0x" "$log" | head -40
}

if [ "${HOTPASS_AB_SKIP_TESTS:-0}" != 1 ]; then
  for t in ${HOTPASS_AB_TESTS:-test_cuda_attention test_cuda_gemv test_cuda_gemv_l2 test_cuda_moe test_cuda_moe_dyn test_cuda_baseline}; do
    run_staged_test "$OUT_DIR/$t.log" "$t" "$t"
  done
fi

# The name-loading tests against each variant: its .so linked as libhp_forward_cuda_baseline.so in a
# directory of its own, which the plugin lookup searches first (the reference still comes from the stage).
for entry in "${plugins[@]}"; do
  name=${entry%%=*} plugin=${entry#*=}
  [ -n "${HOTPASS_AB_VARIANT_TESTS:-}" ] && [ "$plugin" != "$entry" ] && [[ "$plugin" == */* || "$plugin" == *.so ]] || continue
  [ -e "$plugin" ] || { echo "$name: no plugin at $plugin"; continue; }
  dir="$OUT_DIR/plugin_$name"
  mkdir -p "$dir" && ln -sfn "$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")" "$dir/libhp_forward_cuda_baseline.so"
  for t in $HOTPASS_AB_VARIANT_TESTS; do
    HOTPASS_PLUGIN_DIR="$dir" run_staged_test "$OUT_DIR/${t}_$name.log" "$t" "$t with $name" \
      "--gtest_filter=${HOTPASS_AB_VARIANT_FILTER:--*PersistentStep*}"
  done
done

for round in $(seq 1 "${HOTPASS_AB_ROUNDS:-2}"); do
  for entry in "${plugins[@]}"; do
    name=${entry%%=*} plugin=${entry#*=}
    extra=()
    [ "$round" = 1 ] && [[ ",${HOTPASS_AB_BREAKDOWN:-}," == *",$name,"* ]] && extra+=(--breakdown)
    [ "$round" = 1 ] && [[ ",${HOTPASS_AB_TIMELINE:-}," == *",$name,"* ]] && extra+=(--timeline)
    timeout 240 "$STAGE/bin/hotpass_bench_gpu_decode" --forward "$plugin" --preset "${HOTPASS_AB_PRESET:-llama-3.2-1b}" \
      --batches "${HOTPASS_AB_BATCHES:-1,8,32,64}" --kv 1024 \
      --json "$OUT_DIR/bench_${name}_$round.json" "${extra[@]}" "$@" > "$OUT_DIR/bench_${name}_$round.log" 2>&1 || echo "$name round $round: exit $?"
  done
done

# Nsight Compute on chosen launches (HOTPASS_AB_NCU). Without the engine's one-token warm-up step
# (--no-warm-up: it launched the batch-1 shapes first, where a skip of 60 landed), every launch is one of
# BATCH's steps: the rig's eager steps first, then the graph replays.
IFS=, read -r -a ncu_jobs <<< "${HOTPASS_AB_NCU:-}"
for job in "${ncu_jobs[@]}"; do
  IFS=: read -r name batch regex <<< "$job"
  plugin=""
  for entry in "${plugins[@]}"; do [ "${entry%%=*}" = "$name" ] && plugin=${entry#*=}; done
  if [ -z "$plugin" ] || [ -z "$batch" ] || [ -z "$regex" ]; then echo "HOTPASS_AB_NCU: '$job' is not NAME:BATCH:REGEX of a plugin given"; continue; fi
  command -v ncu > /dev/null || { echo "HOTPASS_AB_NCU: no ncu on this machine"; break; }
  report="$OUT_DIR/ncu_${name}_$batch"
  timeout 300 ncu --clock-control none -k "regex:$regex" --launch-skip "${HOTPASS_AB_NCU_SKIP:-60}" --launch-count "${HOTPASS_AB_NCU_COUNT:-12}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats -o "$report" \
    "$STAGE/bin/hotpass_bench_gpu_decode" --forward "$plugin" --preset "${HOTPASS_AB_PRESET:-llama-3.2-1b}" --batches "$batch" --kv 1024 --reps 3 --no-warm-up \
    > "$report.log" 2>&1 || echo "ncu $name batch $batch: exit $? (tail of $report.log: $(tail -c 300 "$report.log"))"
  [ -e "$report.ncu-rep" ] || continue
  ncu -i "$report.ncu-rep" --page details > "$report.txt" 2>&1
  ncu -i "$report.ncu-rep" --page details --csv > "$report.csv" 2>&1
done

python3 - "$OUT_DIR" "${plugins[@]}" <<'EOF' | tee "$OUT_DIR/summary.txt"
import json, sys
out, entries = sys.argv[1], sys.argv[2:]
print(f"step ms (p10-p90), {__import__('os').environ.get('HOTPASS_AB_ROUNDS', '2')} interleaved runs per plugin")
for entry in entries:
    name = entry.split("=", 1)[0]
    cells = []
    for r in range(1, int(__import__("os").environ.get("HOTPASS_AB_ROUNDS", "2")) + 1):
        try:
            data = json.load(open(f"{out}/bench_{name}_{r}.json"))
        except Exception as error:
            cells.append(f"run {r}: {error}")
            continue
        cells.append(" | ".join(f"b{row['batch']} {row['step_ms_median']:.3f} ({row['step_ms_p10']:.3f}-{row['step_ms_p90']:.3f}) "
                                f"{100 * row['fraction_of_roofline']:.0f}% d{row['graph_vs_eager_max_delta']:.1g}"
                                + (f" e{row['unique_experts_per_layer']:.1f}" if row.get('unique_experts_per_layer') else "")
                                for row in data["batches"]))
    print(f"{name}:\n  " + "\n  ".join(cells))

# With HOTPASS_AB_BREAKDOWN on two or more plugins: their first runs' kernel kinds side by side, per batch,
# the kinds whose time differs by more than 2 us a step (or that only some plugins launch).
broken = []
for entry in entries:
    name = entry.split("=", 1)[0]
    try:
        rows = json.load(open(f"{out}/bench_{name}_1.json"))["batches"]
    except Exception:
        continue
    kinds = {row["batch"]: {k["kernel"]: (k["launches"], k["ms"]) for k in row.get("kernels") or []} for row in rows}
    if any(kinds.values()):
        broken.append((name, kinds))
if len(broken) > 1:
    print("kernel kinds alone (ms a step, launches), first runs, where they differ:")
    for batch in sorted({b for _, kinds in broken for b in kinds}):
        tables = [kinds.get(batch, {}) for _, kinds in broken]
        names = sorted({k for table in tables for k in table}, key=lambda k: -max(t.get(k, (0, 0))[1] for t in tables))
        lines = []
        for kernel in names:
            cells = [table.get(kernel) for table in tables]
            times = [cell[1] if cell else 0.0 for cell in cells]
            if max(times) - min(times) > 0.002:
                lines.append(f"    {kernel[:70]:70} " + " ".join(f"{cell[1]:8.4f} ({cell[0]:3d})" if cell else f"{'-':>14}" for cell in cells))
        sums = [sum(ms for _, ms in table.values()) for table in tables]
        print(f"  batch {batch}: sum " + " ".join(f"{name} {total:.4f}" for (name, _), total in zip(broken, sums)))
        if lines:
            print(f"    {'':70} " + " ".join(f"{name[:14]:>14}" for name, _ in broken))
            print("\n".join(lines))
EOF
# The Nsight Compute launches (HOTPASS_AB_NCU): per launch its kernel, grid and headline metrics.
for report in "$OUT_DIR"/ncu_*.csv; do
  [ -e "$report" ] && python3 "$ROOT/bench/gpu/ncu_summary.py" "$report" | tee -a "$OUT_DIR/summary.txt"
done
# What trace builds (HP_CUDA_*_TRACE) logged in their first run: the last step's phases.
for entry in "${plugins[@]}"; do
  name=${entry%%=*}
  traces=$(grep -h " trace: " "$OUT_DIR/bench_${name}_1.log" 2>/dev/null | sed -E 's/^.*plugin: [^:]*: //' | tail -4)
  if [ -n "$traces" ]; then printf '%s, trace log of run 1:\n%s\n' "$name" "$traces" | tee -a "$OUT_DIR/summary.txt"; fi
done
mkdir -p "$FINAL_DIR" && cp "$OUT_DIR/summary.txt" "$FINAL_DIR/" && tar -czf "$FINAL_DIR/ab_decode.tar.gz" -C "$OUT_DIR" .
