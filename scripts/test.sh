#!/usr/bin/env bash
# README command 2: set everything up, then run the test suite (all labels but `gpu` and `slow`;
# pass ctest arguments to change that, e.g. `scripts/test.sh -L unit`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
if [ $# -eq 0 ]; then set -- -LE "gpu|slow"; fi
ctest --preset release -j "$(nproc)" "$@"
