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
$bin generate --model preset:tiny-llama --tokens 1,2,3 -n 16
