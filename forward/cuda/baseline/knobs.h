// Compile-time knobs of the CUDA baseline; knobs.json is the manifest (same names, defaults,
// domains) that the builder and the knob-search agent read. CMake passes -D NAME=VALUE for each.
#pragma once

#ifndef HP_CUDA_NORM_THREADS
#define HP_CUDA_NORM_THREADS 256
#endif
#ifndef HP_CUDA_ATTN_WARPS
#define HP_CUDA_ATTN_WARPS 4
#endif
#ifndef HP_CUDA_ATTN_SPLIT_TOKENS
#define HP_CUDA_ATTN_SPLIT_TOKENS 64
#endif
#ifndef HP_CUDA_ATTN_MAX_SPLIT
#define HP_CUDA_ATTN_MAX_SPLIT 32
#endif
#ifndef HP_CUDA_GEMM_ALGO
#define HP_CUDA_GEMM_ALGO -1
#endif
#ifndef HP_CUDA_MOE_ROWS_PER_BLOCK
#define HP_CUDA_MOE_ROWS_PER_BLOCK 8
#endif
#ifndef HP_CUDA_WORKSPACE_TOKENS
#define HP_CUDA_WORKSPACE_TOKENS 256
#endif

static_assert(HP_CUDA_NORM_THREADS % 32 == 0 && HP_CUDA_NORM_THREADS <= 1024, "norm_threads: whole warps, at most 1024");
static_assert(HP_CUDA_ATTN_WARPS >= 1 && HP_CUDA_ATTN_WARPS * 32 <= 1024, "attn_warps: 1..32");
static_assert(HP_CUDA_ATTN_SPLIT_TOKENS >= 1 && HP_CUDA_ATTN_MAX_SPLIT >= 1 && HP_CUDA_ATTN_MAX_SPLIT <= 64,
              "attention split knobs: positive, at most 64 splits");
static_assert(HP_CUDA_MOE_ROWS_PER_BLOCK >= 1 && HP_CUDA_MOE_ROWS_PER_BLOCK <= 32, "moe_rows_per_block: 1..32");
static_assert(HP_CUDA_WORKSPACE_TOKENS >= 1, "workspace_tokens must be positive");
