#!/usr/bin/env bash
# Builds a variant of the CUDA baseline plugin for an A/B call (bench/gpu/ab_decode.sh): the working
# tree's forward/cuda/baseline, with knob -D values overridden and optionally a patch applied, compiled
# with the exact nvcc line of an already configured build and linked as that build links the plugin.
#
# usage: bench/gpu/build_variant.sh NAME ["HP_CUDA_KNOB=VALUE ..."] [PATCH]
#   NAME    the variant: writes $BUILD_DIR/variants/libhp_forward_cuda_NAME.so (stripped)
#   KNOBS   space-separated DEFINE=VALUE pairs (the `define` of forward/cuda/baseline/knobs.json, or a
#           diagnostic such as HP_CUDA_MOE_FUSED_TRACE=1); a define the build does not pass is added
#   PATCH   a unified diff against the repository root (patch -p1), applied to a copy of the sources
#   env     BUILD_DIR (build/release): a configured build with CUDA; EXTRA: more nvcc flags
#           (e.g. EXTRA="-Xptxas -v" for registers and spills)
# e.g. bench/gpu/build_variant.sh mma "HP_CUDA_MOE_FUSED_DOWN_MMA=1"
#      bench/gpu/build_variant.sh ldl "" /tmp/launch_later.patch
# One nvcc run of forward.cu: ~3-5 minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${BUILD_DIR:-$ROOT/build/release}" && pwd)
name=${1:?usage: bench/gpu/build_variant.sh NAME [\"DEFINE=VALUE ...\"] [PATCH]}
defs=${2:-}
patch=${3:-}
[[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "build_variant: NAME must be letters, digits, _ or -" >&2; exit 2; }
plugin=lib/hotpass/forward/libhp_forward_cuda_baseline.so
compile=$(cd "$BUILD" && ninja -t commands "$plugin" | grep -F "forward/cuda/baseline/forward.cu" | tail -1) || true
link=$(cd "$BUILD" && ninja -t commands "$plugin" | tail -1) || true
if [ -z "$compile" ] || [[ "$link" != *" -shared "* ]]; then
  echo "build_variant: $BUILD has no CUDA baseline plugin to take the compile line from (run scripts/setup.sh on a machine with nvcc)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/forward/cuda" "$work/src/include"
cp -r "$ROOT/forward/cuda/baseline" "$work/src/forward/cuda/"
cp -r "$ROOT/include/." "$work/src/include/"
if [ -n "$patch" ]; then
  patch -d "$work/src" -p1 --quiet < "$patch"
fi
# The sources from the copy, the object into the work folder, the knobs overridden.
compile=${compile//$ROOT\/forward\/cuda\/baseline/$work\/src\/forward\/cuda\/baseline}
compile=${compile//$ROOT\/include/$work\/src\/include}
compile=$(sed -E "s# -o [^ ]+# -o $work/forward.o#" <<< "$compile")
for def in $defs; do
  key=${def%%=*} value=${def#*=}
  [[ "$key" =~ ^HP_CUDA_[A-Z0-9_]+$ && "$def" == *=* ]] || { echo "build_variant: not a DEFINE=VALUE knob: $def" >&2; exit 2; }
  if [[ "$compile" == *"-D$key="* ]]; then
    compile=$(sed -E "s/-D$key=[^ ]+/-D$key=$value/" <<< "$compile")
  else
    compile="$compile -D$key=$value"
  fi
done
mkdir -p "$BUILD/variants"
out=$BUILD/variants/libhp_forward_cuda_$name.so
(cd "$BUILD" && eval "$compile ${EXTRA:-}")
# The plugin's own link line with the object and the output swapped.
link=$(sed -E "s# -o [^ ]+# -o $out#; s# [^ ]*forward\.cu\.o# $work/forward.o#; s#^: && ##; s# && :\$##" <<< "$link")
(cd "$BUILD" && eval "$link")
strip "$out"
echo "$out"
