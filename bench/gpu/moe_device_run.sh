#!/usr/bin/env bash
# One device call for the grouped-MoE work (issue 8), from the root of the checkout sent to the GPU
# machine, with a stage built in another worktree (WORKTREE, default /work/wt-moe: the staged test
# binaries have that path compiled in as their source root, and the adversarial suite builds the
# baseline's sources from it): STAGE holds bin/, lib/, runtime-libs/, a copy of this worktree's
# forward/, tests/ and bench/ (overlay/) and the plugins to compare (plugins/*.so).
#
# usage: bench/gpu/moe_device_run.sh OUT_DIR [TEST[:GTEST_FILTER]...]
# env:   STAGE (build/gpu-stage-moe), WORKTREE (/work/wt-moe), MOE_HF=1 runs the transformers check on
#        the MoE checkpoints, MOE_BENCH="NAME=PLUGIN ..." (ab_decode.sh entries) with
#        HOTPASS_AB_* passed through (preset qwen3-30b-a3b, batches 1,8,32 unless set)
set -uo pipefail
ROOT=$(pwd)
OUT_DIR=$1
shift
STAGE=${STAGE:-$ROOT/build/gpu-stage-moe}
WORKTREE=${WORKTREE:-/work/wt-moe}
mkdir -p "$OUT_DIR" /work
[ -e /work/main ] || ln -sfn "$ROOT" /work/main
if [ ! -e "$WORKTREE" ]; then  # the worktree's sources: this checkout, with the staged forward/ and tests/
  mkdir -p "$WORKTREE"
  for entry in "$ROOT"/* "$ROOT"/.[!.]*; do
    name=$(basename "$entry")
    case "$name" in forward|tests|bench|build|.git) ;; *) ln -s "$entry" "$WORKTREE/$name" ;; esac
  done
  cp -r "$STAGE/overlay/forward" "$STAGE/overlay/tests" "$STAGE/overlay/bench" "$WORKTREE/"
  mkdir -p "$WORKTREE/build" && ln -s "$STAGE" "$WORKTREE/build/cuda"
fi
export HOTPASS_NVCC=${HOTPASS_NVCC:-$(command -v nvcc)}
export LD_LIBRARY_PATH="$STAGE/runtime-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT_DIR/machine.txt"

for spec in "$@"; do  # TEST or TEST:GTEST_FILTER
  t=${spec%%:*} filter=()
  [ "$t" != "$spec" ] && filter=(--gtest_filter="${spec#*:}")
  start=$(date +%s)
  timeout 420 "$STAGE/bin/$t" --gtest_color=no "${filter[@]}" > "$OUT_DIR/$t.log" 2>&1
  code=$?
  echo "$t: exit $code in $(( $(date +%s) - start )) s; $(grep -c '^\[       OK \]' "$OUT_DIR/$t.log") ok, $(grep -c '^\[  FAILED  \] .*\.' "$OUT_DIR/$t.log") failed, $(grep -c '^\[  SKIPPED \] .*\.' "$OUT_DIR/$t.log") skipped"
  grep -E "^\[  FAILED  \]|Failure|expected|Expected|Which is|differs" "$OUT_DIR/$t.log" | head -16
done

if [ "${MOE_HF:-0}" = 1 ]; then
  folders=()
  for name in mixtral qwen3_moe; do [ -f "$ROOT/checkpoints/hf/$name/hf_reference.json" ] && folders+=("$ROOT/checkpoints/hf/$name"); done
  PYTHONUNBUFFERED=1 timeout 240 python3 "$WORKTREE/tests/gpu/hf_transformers_check.py" "$STAGE/bin/hotpass" "${folders[@]}" > "$OUT_DIR/hf_check.log" 2>&1
  echo "transformers check (exit $?): $(grep -c '^ok' "$OUT_DIR/hf_check.log") ok, $(grep -c '^FAIL' "$OUT_DIR/hf_check.log") failed"
  grep -E "^(ok|FAIL)" "$OUT_DIR/hf_check.log" | head -12
fi

if [ -n "${MOE_BENCH:-}" ]; then
  export HOTPASS_AB_SKIP_TESTS=1 HOTPASS_AB_PRESET=${HOTPASS_AB_PRESET:-qwen3-30b-a3b} HOTPASS_AB_BATCHES=${HOTPASS_AB_BATCHES:-1,8,32}
  # shellcheck disable=SC2086
  BUILD_DIR=$STAGE bash "$WORKTREE/bench/gpu/ab_decode.sh" "$OUT_DIR/ab" $MOE_BENCH
  logs=$(mktemp -d) && tar -xzf "$OUT_DIR/ab/ab_decode.tar.gz" -C "$logs"
  for log in "$logs"/bench_*_1.log; do
    grep -q "kernels timed alone" "$log" && { echo "== $(basename "$log")"; grep -E "^ +[0-9.]+ ms|^batch" "$log"; }
  done > "$OUT_DIR/breakdown.txt"
fi
