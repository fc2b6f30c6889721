#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages; idempotent: apt-get runs only when something is
# missing) and builds hotpass with the `release` preset. Sourced or run by quickstart.sh/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(
  cmake ninja-build g++ pkg-config git
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev libopenblas-dev libseccomp-dev binutils
  clang libclang-rt-14-dev python3 python3-numpy python3-torch
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

preset="${HOTPASS_PRESET:-release}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
