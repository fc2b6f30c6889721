#!/usr/bin/env bash
# The CPU reference forward pass on llama-300m (bf16 weights built in memory) against this
# machine's memory-bandwidth roofline, both measured in the same run: REPS rounds, each running
# membw, then `hotpass generate` at batch 1, then at batch 8. Prints a Markdown section (the
# format of bench/RESULTS.md) on stdout; progress goes to stderr. To record a run:
#
#   bench/reference_cpu.sh [BUILD_DIR] >> bench/RESULTS.md      (BUILD_DIR default: build/release)
#
# Roofline: a step reads every weight once, so at B tokens per step the ceiling is
# B x bandwidth / bytes_read_per_token tokens/s (decode: B = batch; prefill of the whole prompt
# in one step: B = batch x prompt length). Bandwidth = membw's best thread count, median over rounds.
# Environment: PROMPT_LEN (16), N_NEW (4), REPS (3), MODEL (preset:llama-300m).
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build/release}
[[ -d $build ]] || { echo "reference_cpu.sh: no build folder $build (scripts/setup.sh builds build/release)" >&2; exit 2; }
build=$(cd "$build" && pwd)
hotpass=$build/bin/hotpass
membw=$build/bin/membw
model=${MODEL:-preset:llama-300m}
prompt_len=${PROMPT_LEN:-16}
n_new=${N_NEW:-4}
reps=${REPS:-3}
for tool in "$hotpass" "$membw"; do
    [[ -x $tool ]] || { echo "reference_cpu.sh: $tool missing; cmake --build $build --target hotpass membw" >&2; exit 2; }
done

raw=$(mktemp -d -t hotpass-bench.XXXXXX)
trap 'rm -rf "$raw"' EXIT
start_s=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

"$hotpass" model inspect "$model" --json >"$raw/inspect.json"
for rep in $(seq 1 "$reps"); do
    echo "round $rep/$reps: membw" >&2
    "$membw" --reps 5 --no-memcpy >"$raw/membw.$rep.json"
    for batch in 1 8; do
        echo "round $rep/$reps: hotpass generate --batch $batch" >&2
        "$hotpass" generate --json --forward reference --model "$model" --batch "$batch" \
            --prompt-len "$prompt_len" -n "$n_new" --ignore-eos >"$raw/generate.b$batch.$rep.json"
    done
done
echo "round 1: membw with memcpy sanity check" >&2
"$membw" --reps 5 >"$raw/membw.memcpy.json"

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$repo" status --porcelain 2>/dev/null) ]] && commit+=" (working tree has uncommitted changes)"
cpu_model=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
n_cpu=$(nproc)
mem_gib=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
elapsed_s=$(( $(date +%s) - start_s ))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

date_utc=$(date -u)
export raw reps prompt_len n_new model commit cpu_model n_cpu mem_gib elapsed_s date_utc load_start load_end
python3 - <<'PY'
import json, os, statistics
env = os.environ
raw, reps, prompt_len, model = env["raw"], int(env["reps"]), int(env["prompt_len"]), env["model"]
load = lambda name: json.load(open(f"{raw}/{name}"))
bytes_per_token = load("inspect.json")["bytes_read_per_token"]
membw = [load(f"membw.{r}.json") for r in range(1, reps + 1)]
def spread(values, fmt="{:.2f}"):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"
best = [m["read_best_median_gbs"] for m in membw]
by_threads = {}
for m in membw:
    for entry in m["read"]:
        by_threads.setdefault(entry["threads"], []).append(entry["median_gbs"])
bandwidth_gbs = statistics.median(best)
bandwidth_1t_gbs = statistics.median(by_threads[1])
memcpy = load("membw.memcpy.json")["memcpy_copy"]

print(f"""
## Foundation: CPU reference pass on {model.removeprefix("preset:")}

- date: {env["date_utc"]}
- machine: {env["cpu_model"]}, {env["n_cpu"]} cores, {env["mem_gib"]} GiB; load average at start {env["load_start"]}, at end {env["load_end"]}
- commit: {env["commit"]}
- command: `bench/reference_cpu.sh` — {reps} rounds of `membw --reps 5` then `hotpass generate --json --forward reference --model {model} --prompt-len {prompt_len} -n {env["n_new"]} --ignore-eos` at `--batch 1` and `--batch 8` ({env["elapsed_s"]} s in all)
- bytes read per token: {bytes_per_token} (bf16, `hotpass model inspect {model} --json`)
- memory read bandwidth (membw, 1 GiB, median of 5 per round; median (min–max) over rounds): """
      + ", ".join(f"{t} thread{'s' if t > 1 else ''} {spread(v)} GB/s" for t, v in sorted(by_threads.items()))
      + f"; roofline uses {bandwidth_gbs:.2f} GB/s (best thread count). memcpy sanity check: {memcpy['median_gbs']:.2f} GB/s copied, 1 thread")
print()
print("| phase | batch | tokens/step | tokens/s median (min–max) | roofline tokens/s | % of roofline | % of 1-thread roofline |")
print("|---|---|---|---|---|---|---|")
for phase in ("prefill", "decode"):
    for batch in (1, 8):
        runs = [load(f"generate.b{batch}.{r}.json") for r in range(1, reps + 1)]
        tps = [run[f"{phase}_tokens_per_s"] for run in runs]
        if phase == "prefill":
            per_step = batch * prompt_len  # the whole prompt of every sequence in one step
        else:
            per_step = runs[0]["decode_tokens"] / max(runs[0]["decode_steps"], 1)
        roofline = per_step * bandwidth_gbs * 1e9 / bytes_per_token
        roofline_1t = per_step * bandwidth_1t_gbs * 1e9 / bytes_per_token
        median = statistics.median(tps)
        print(f"| {phase} | {batch} | {per_step:g} | {spread(tps)} | {roofline:.1f} | {100 * median / roofline:.2f} % | {100 * median / roofline_1t:.2f} % |")
PY
