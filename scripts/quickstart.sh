#!/usr/bin/env bash
# README command 1: set everything up, then run the main job on the embedded default: a
# `hotpass optimize` campaign on the CPU with a built-in model preset, synthetic chat traffic and
# the built-in knob-search agents, for the default short budget. The winner and a report
# (Markdown, JSON, SVG chart) land in build/quickstart/. Extra arguments go to `hotpass optimize`
# (e.g. `scripts/quickstart.sh --budget 20m`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
bin=build/release/bin/hotpass
export HOTPASS_STORE="${HOTPASS_STORE:-$PWD/build/quickstart/store.db}"
mkdir -p build/quickstart
$bin optimize --out build/quickstart "$@"
echo
echo "report: build/quickstart/report.md"
# Decode with what the campaign promoted, on its model: the winner's plugin, or the baseline
# when no candidate beat it (then there is no winner/ folder).
model=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["campaign"]["model"])' build/quickstart/report.json 2>/dev/null || echo preset:tiny-llama)
winner=$(find build/quickstart/winner -maxdepth 1 -name 'libhp_candidate_*.so' 2>/dev/null | head -1 || true)  # no winner/: the baseline won
echo
if [ -n "$winner" ]; then
  echo "16 tokens from the winner ($winner) on $model:"
  $bin generate --model "$model" --forward "$winner" --tokens 1,2,3 -n 16
else
  echo "16 tokens from the baseline (the campaign's incumbent) on $model:"
  $bin generate --model "$model" --tokens 1,2,3 -n 16
fi
