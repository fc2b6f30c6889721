#!/usr/bin/env bash
# The campaign figures of issue 6: the same budget with two tiers, with the slow tier only, and
# with an executor restarted per candidate (experiments per hour). Each run is a real
# `hotpass optimize` into its own store; the script prints one line per run and leaves the reports
# under $OUT. Usage: bench/campaign/run.sh [BUDGET] [MODEL]   (defaults: 20m, auto); env HOTPASS (build/release/bin/hotpass), OUT
set -euo pipefail
budget=${1:-20m}
model=${2:-auto}
root=$(cd "$(dirname "$0")/../.." && pwd)
hotpass=${HOTPASS:-$root/build/release/bin/hotpass}
[[ -x $hotpass ]] || { echo "bench/campaign/run.sh: $hotpass missing (scripts/setup.sh builds build/release; HOTPASS=PATH picks another)" >&2; exit 2; }
out=${OUT:-/tmp/hotpass-bench-campaign}
mkdir -p "$out"
run() {
  local name=$1; shift
  rm -rf "$out/$name"; mkdir -p "$out/$name"
  "$hotpass" optimize --model "$model" --budget "$budget" --store "$out/$name/store.db" --out "$out/$name/report" \
    --agent-seed 1 "$@" > "$out/$name/summary.txt" 2> "$out/$name/log.txt" || { echo "$name: failed, see $out/$name/log.txt"; return; }
  python3 - "$name" "$out/$name/report/report.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
w = r["winner"]["speedup_vs_baseline"]
v = r["counts"]["verdicts"]
print(f'{name:14} evaluations {r["counts"]["evaluations"]:4} ({r["counts"]["experiments_per_hour"]:.0f}/h) '
      f'fast {sum(v.get("fast", {}).values()):3} slow {sum(v.get("slow", {}).values()):3} '
      f'winner {r["winner"]["hash"][:12]} {w["weighted"]:.3f}x ({"measured" if w.get("measured") else "estimated"}'
      + (f', CI {w["ci"][0]:.3f}-{w["ci"][1]:.3f}' if w.get("measured") else '') + ')')
PY
}
run two-tiers --tiers fast,slow
run slow-only --tiers slow
run fresh-executor --tiers fast,slow --fresh-executor
