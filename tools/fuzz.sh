#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan) and runs each for a fixed
# time on a seed corpus assembled in a temporary folder. Exits non-zero if any target finds a
# crash, a sanitizer report, a contract violation, a timeout or an out-of-memory; the input that
# did it is left under $HOTPASS_FUZZ_ARTIFACTS (default build/fuzz/artifacts).
#
#   tools/fuzz.sh [SECONDS_PER_TARGET]     (default 30)
#
# Seeds: tiny valid safetensors files written below, the headers of ../shared/models/hf/*/
# model.safetensors, fuzz/corpus/config/*.json and ../shared/models/hf/*/config.json.
set -euo pipefail
export LC_ALL=C

fuzz_seconds=${1:-30}
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${HOTPASS_SHARED:-$repo/../shared}
build=$repo/build/fuzz
artifacts=${HOTPASS_FUZZ_ARTIFACTS:-$build/artifacts}
cd "$repo"

runtime="$(clang++ -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a"
if [[ ! -f $runtime ]]; then
    echo "fuzz.sh: libFuzzer runtime missing ($runtime); apt-get install libclang-rt-14-dev" >&2
    exit 2
fi

# The fuzz targets need only the model module: no traffic module, no CUDA.
cmake --preset fuzz -DHOTPASS_WITH_TRAFFIC=OFF -DHOTPASS_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target fuzz_safetensors_header fuzz_config

corpus=$(mktemp -d -t hotpass-fuzz.XXXXXX)
trap 'rm -rf "$corpus"' EXIT
mkdir -p "$corpus/safetensors_header" "$corpus/config" "$artifacts"

# A safetensors file: u64 little-endian header length, JSON header space-padded to a multiple
# of 8 bytes (as the reference writer does), then DATA_BYTES of zeros.
write_safetensors_seed() {
    local file=$1 header=$2 data_bytes=$3
    while (( (8 + ${#header}) % 8 != 0 )); do header+=" "; done
    local n=${#header} length="" i
    for i in 0 1 2 3 4 5 6 7; do length+=$(printf '\\x%02x' $(( (n >> (8 * i)) & 255 ))); done
    { printf "$length"; printf '%s' "$header"; head -c "$data_bytes" /dev/zero; } >"$file"
}
seeds=$corpus/safetensors_header
write_safetensors_seed "$seeds/f32" '{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' 24
write_safetensors_seed "$seeds/mixed" '{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]},"c":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}}' 24
write_safetensors_seed "$seeds/empty_and_scalar" '{"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}' 8
write_safetensors_seed "$seeds/no_tensors" '{}' 0
write_safetensors_seed "$seeds/utf8_name" '{"__metadata__":{"k":"v"},"w\u00e9\u4e2d":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}' 3
write_safetensors_seed "$seeds/gap" '{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}}' 3
for model in "$shared"/models/hf/*/model.safetensors; do
    [[ -f $model ]] || continue
    header_bytes=$(od -An -tu8 -N8 "$model" | tr -d ' ')
    (( header_bytes <= 1000000 )) || continue
    head -c $((8 + header_bytes)) "$model" >"$seeds/$(basename "$(dirname "$model")")"
done

cp fuzz/corpus/config/*.json "$corpus/config/"
for config in "$shared"/models/hf/*/config.json; do
    [[ -f $config ]] && cp "$config" "$corpus/config/shared_$(basename "$(dirname "$config")").json"
done

failed=()
for target in safetensors_header config; do
    echo "== fuzz_$target for ${fuzz_seconds}s ($(ls "$corpus/$target" | wc -l) seeds)"
    if ! "$build/bin/fuzz_$target" -max_total_time="$fuzz_seconds" -timeout=25 -rss_limit_mb=2048 \
        -use_value_profile=1 -print_final_stats=1 -dict="fuzz/$target.dict" \
        -artifact_prefix="$artifacts/$target-" "$corpus/$target" 2>"$corpus/$target.log"; then
        tail -n 60 "$corpus/$target.log" >&2
        failed+=("fuzz_$target")
    else
        grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done' "$corpus/$target.log" || true
    fi
done
if (( ${#failed[@]} )); then
    echo "fuzz.sh: ${failed[*]} failed; inputs under $artifacts" >&2
    exit 1
fi
echo "fuzz.sh: no crash in ${fuzz_seconds}s per target"
