#!/usr/bin/env bash
# One call on a GPU machine does it all: build (unless a carried build is present), run the GPU
# tests (ctest -L gpu), the external transformers check, the decode benchmark and its transformers
# peer, write OUT_DIR/RESULTS.md (the section to add to bench/gpu/RESULTS.md), and print a short table last.
#
# usage: tools/gpu-check.sh [OUT_DIR]     (OUT_DIR defaults to $OUT or ./out/gpu-check)
#        tools/gpu-check.sh --stage        (here, after building build/cuda: copy the stripped
#                                            binaries, plugins and the non-CUDA shared libraries they
#                                            need into build/gpu-stage, small enough to carry to a
#                                            GPU machine whose image lacks the C++ dependencies;
#                                            HOTPASS_STAGE_FROM / HOTPASS_STAGE_DIR override both;
#                                            HOTPASS_GPU_TESTS, if set, names the test binaries to
#                                            stage, so that a stage fits the device tool's 64 MiB)
# env:   BUILD_DIR (default build/gpu-stage if present, else build/cuda), HOTPASS_GPU_REBUILD=1 to
#        configure+build even if a build is present,
#        HOTPASS_GPU_SKIP_TESTS=1 (no gtest/ctest part), HOTPASS_GPU_SKIP_BENCH=1, HOTPASS_GPU_SKIP_HF=1, HOTPASS_GPU_HF_1B=0 (skip the 2.5 GB llama-3.2-1b
#        folder in the transformers check), HOTPASS_GPU_CTEST_ARGS (extra ctest args),
#        HOTPASS_COMMIT (the commit to print where the checkout has no .git), HOTPASS_GPU_TESTS (on a staged
#        build, the test binaries to run, space-separated; default all of GPU_TESTS below; a full build runs
#        ctest, narrowed by HOTPASS_GPU_CTEST_ARGS, e.g. -R), HOTPASS_GPU_TEST_TIMEOUT (staged: seconds per
#        test binary, default 300)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPU_TESTS="test_synthetic_device test_cuda_reference test_cuda_baseline test_cuda_norm test_cuda_head test_cuda_gemv test_cuda_gemv_l2 test_cuda_attention test_cuda_attention_held test_cuda_attention_tail test_cuda_attention_butterfly test_cuda_moe test_cuda_moe_dyn test_cuda_moe_barrier test_adversarial_cuda"

if [ "${1:-}" = --stage ]; then
  from=${HOTPASS_STAGE_FROM:-$ROOT/build/cuda} stage=${HOTPASS_STAGE_DIR:-$ROOT/build/gpu-stage}
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib/hotpass/forward" "$stage/runtime-libs"
  for b in hotpass hotpass_bench_gpu_decode hotpass_bench_gpu_stream_probe hotpass_bench_gpu_gemm_probe ${HOTPASS_GPU_TESTS:-$GPU_TESTS}; do
    if [ -x "$from/bin/$b" ]; then strip -o "$stage/bin/$b" "$from/bin/$b"; else echo "not built, not staged: $b"; fi
  done
  for so in "$from"/lib/hotpass/forward/*.so; do strip --strip-debug -o "$stage/lib/hotpass/forward/$(basename "$so")" "$so"; done
  [ -f "$from/lib/libhotpass_stall_backtrace.so" ] && cp "$from/lib/libhotpass_stall_backtrace.so" "$stage/lib/"
  for lib in libfmt.so.9 libspdlog.so.1.10 libxxhash.so.0 libcpp-httplib.so.0.11 libsqlite3.so.0 libseccomp.so.2 \
             libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
    cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/runtime-libs/" 2>/dev/null
  done
  # CUPTI for hotpass_bench_gpu_decode --timeline (opened at run time; the toolkit's own version).
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/lib; do
    [ -e "$dir/libcupti.so.13" ] && { cp -L "$dir/libcupti.so.13" "$stage/runtime-libs/"; break; }
  done
  # Used only where the GPU machine lacks them (they would shadow its own OpenSSL for every process).
  mkdir -p "$stage/runtime-libs/fallback"
  for lib in libssl.so.3 libcrypto.so.3 libz.so.1; do cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/runtime-libs/fallback/" 2>/dev/null; done
  sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$from/CMakeCache.txt" > "$stage/source-root"
  du -sh "$stage"
  mib=$(du -sm "$stage" | cut -f1)
  [ "$mib" -gt 64 ] && echo "the stage is $mib MiB, over the 64 MiB the device tool carries: name fewer tests in HOTPASS_GPU_TESTS, or remove runtime-libs/fallback where the GPU machine has OpenSSL and zlib"
  exit 0
fi

OUT_DIR=${1:-${OUT:-$ROOT/out/gpu-check}}
if [ -z "${BUILD_DIR:-}" ]; then
  BUILD_DIR=$ROOT/build/cuda
  [ -x "$ROOT/build/gpu-stage/bin/hotpass" ] && BUILD_DIR=$ROOT/build/gpu-stage
fi
mkdir -p "$OUT_DIR"
cd "$ROOT"

# A build carried from another machine keeps its absolute paths (CTest files, test data): make
# them resolve here too.
built_root=""
[ -f "$BUILD_DIR/CMakeCache.txt" ] && built_root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt")
[ -f "$BUILD_DIR/source-root" ] && built_root=$(cat "$BUILD_DIR/source-root")
if [ -n "$built_root" ]; then
  if [ -n "$built_root" ] && [ "$built_root" != "$ROOT" ] && [ ! -e "$built_root" ]; then
    mkdir -p "$(dirname "$built_root")" && ln -s "$ROOT" "$built_root" && echo "linked $built_root -> $ROOT"
  fi
fi
if [ -d "$BUILD_DIR/runtime-libs" ]; then
  export LD_LIBRARY_PATH="$BUILD_DIR/runtime-libs:${LD_LIBRARY_PATH:-}"
  if [ -d "$BUILD_DIR/runtime-libs/fallback" ] && ldd "$BUILD_DIR/bin/hotpass" 2>/dev/null | grep -q "not found"; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$BUILD_DIR/runtime-libs/fallback"
  fi
fi
# cuBLAS/cudart 13: the toolkit's, else the ones PyTorch's wheels carry.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import glob, site; print(" ".join(sorted(set(p.rsplit("/", 1)[0] for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib/libcu*.so.13")))))' 2>/dev/null); do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$dir"
done

if [ ! -x "$BUILD_DIR/bin/hotpass_bench_gpu_decode" ] || [ "${HOTPASS_GPU_REBUILD:-0}" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOTPASS_WITH_TRAFFIC=OFF \
    -DHOTPASS_CUDA_ARCHS="${HOTPASS_CUDA_ARCHS:-90a}" 2>&1 | tail -5
  cmake --build "$BUILD_DIR" -j "$(nproc)" 2>&1 | tail -20 || { echo "build failed"; exit 1; }
fi

machine=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=${HOTPASS_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "machine: ${machine:-no GPU}; commit $commit"

if [ "${HOTPASS_GPU_SKIP_TESTS:-0}" = 1 ]; then
  tests_line="GPU tests: not run in this call (HOTPASS_GPU_SKIP_TESTS=1)"
elif [ -f "$BUILD_DIR/CTestTestfile.cmake" ]; then
  ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure ${HOTPASS_GPU_CTEST_ARGS:-} 2>&1 | tee "$OUT_DIR/ctest.log" | grep -E "Test +#|tests passed|FAILED|Failed|SKIPPED" | tail -80
  tests_line="ctest -L gpu: $(grep -E "tests passed" "$OUT_DIR/ctest.log" | tail -1)"
else  # a staged build: the same tests, run directly
  : > "$OUT_DIR/ctest.log"
  # A test still running at its timeout writes its main thread's backtrace first (bench/gpu/run_test.sh;
  # symbolize with addr2line on the build machine), then is killed.
  for t in ${HOTPASS_GPU_TESTS:-$GPU_TESTS}; do
    [ -x "$BUILD_DIR/bin/$t" ] || { echo "not staged: $t"; continue; }
    "$ROOT/bench/gpu/run_test.sh" "$BUILD_DIR" "${HOTPASS_GPU_TEST_TIMEOUT:-300}" "$BUILD_DIR/bin/$t" --gtest_color=no 2>&1 | tee -a "$OUT_DIR/ctest.log" |
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|error|Expected|Which is|actual|check failed|^=== stall_backtrace|^/.*\(.*\+0x" | head -60
    status=${PIPESTATUS[0]}
    [ "$status" -eq 124 ] || [ "$status" -eq 137 ] && echo "$t: stopped at its timeout (${HOTPASS_GPU_TEST_TIMEOUT:-300} s; HOTPASS_GPU_TEST_TIMEOUT)"
  done
  tests_line="gtest (gpu): $(grep -c '^\[       OK \]' "$OUT_DIR/ctest.log") passed, $(grep -c '^\[  FAILED  \] .*\.' "$OUT_DIR/ctest.log") failed, $(grep -c '^\[  SKIPPED \] .*\.' "$OUT_DIR/ctest.log") skipped"
fi
echo "$tests_line"

if [ "${HOTPASS_GPU_SKIP_HF:-0}" != 1 ]; then
  folders=()
  for name in llama_gqa mixtral qwen3_moe; do
    for base in "$ROOT/checkpoints/hf" "$ROOT/../shared/models/hf"; do
      if [ -f "$base/$name/hf_reference.json" ]; then folders+=("$base/$name"); break; fi
    done
  done
  if [ "${HOTPASS_GPU_HF_1B:-1}" = 1 ]; then
    "$BUILD_DIR/bin/hotpass" model init --preset llama-3.2-1b --out /tmp/hotpass-llama-3.2-1b >/dev/null && folders+=(/tmp/hotpass-llama-3.2-1b)
  fi
  PYTHONUNBUFFERED=1 timeout 300 python3 "$ROOT/tests/gpu/hf_transformers_check.py" "$BUILD_DIR/bin/hotpass" "${folders[@]}" 2>&1 | tee "$OUT_DIR/hf_check.log" | grep -v '^\[' 
  hf_line="transformers check: $(grep -c '^ok' "$OUT_DIR/hf_check.log") ok, $(grep -c '^FAIL' "$OUT_DIR/hf_check.log") failed"
  echo "$hf_line"
  tests_line="$tests_line; $hf_line"
fi

if [ "${HOTPASS_GPU_SKIP_BENCH:-0}" != 1 ]; then
  timeout 300 "$BUILD_DIR/bin/hotpass_bench_gpu_decode" --preset llama-3.2-1b --batches 1,8,32,64 --kv 1024 --breakdown --timeline --json "$OUT_DIR/bench.json" 2>&1 | tee "$OUT_DIR/bench.log"
  PYTHONUNBUFFERED=1 timeout 300 python3 "$ROOT/bench/gpu/hf_peer.py" --batches 1,8,32,64 --kv 1024 --json "$OUT_DIR/peer.json" 2>&1 | grep -v Warning | tee "$OUT_DIR/peer.log"
  moe_args=()
  if [ "${HOTPASS_GPU_BENCH_MOE:-1}" = 1 ]; then  # qwen3-30b-a3b, 61 GB generated on the device
    timeout 300 "$BUILD_DIR/bin/hotpass_bench_gpu_decode" --preset qwen3-30b-a3b --batches 1,8,32 --kv 1024 --reps 20 --timeline \
      --json "$OUT_DIR/bench_moe.json" 2>&1 | tee "$OUT_DIR/bench_moe.log" && moe_args=(--moe "$OUT_DIR/bench_moe.json")
  fi
  echo
  python3 "$ROOT/bench/gpu/write_results.py" "$OUT_DIR/bench.json" "$OUT_DIR/peer.json" "$OUT_DIR/RESULTS.md" \
    --machine "$machine" --commit "$commit" --tests "$tests_line" "${moe_args[@]}"
fi
echo "$tests_line"
