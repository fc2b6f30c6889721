#!/usr/bin/env bash
# README command 1: set everything up, then run the main job on the embedded default (CPU, a
# built-in model preset). For now the main job writes the tiny-llama preset and greedy-generates
# from it through the CPU reference forward pass.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
bin=build/release/bin/hotpass
$bin model init --preset tiny-llama --out build/models/tiny-llama --force
$bin model inspect build/models/tiny-llama
$bin generate --model build/models/tiny-llama --tokens 1,2,3 -n 16
