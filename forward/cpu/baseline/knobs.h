// Compile-time knobs of the CPU baseline. knobs.json is the manifest (names, domains, defaults,
// constraints); the build passes each as -DNAME=VALUE and these defaults apply only when a knob is
// not given. The static_asserts repeat the manifest's constraints so that an illegal combination
// fails to compile even when the builder's check was bypassed.
#pragma once

#ifndef HP_SIMD_LEVEL
#define HP_SIMD_LEVEL 3
#endif
#ifndef HP_MAX_THREADS
#define HP_MAX_THREADS 64
#endif
#ifndef HP_SPIN_ITERS
#define HP_SPIN_ITERS 20000
#endif
#ifndef HP_CHUNKS_PER_THREAD
#define HP_CHUNKS_PER_THREAD 4
#endif
#ifndef HP_MIN_CHUNK_WORK
#define HP_MIN_CHUNK_WORK 65536
#endif
#ifndef HP_GEMV_ROWS
#define HP_GEMV_ROWS 4
#endif
#ifndef HP_GEMV_ROWS_WIDE
#define HP_GEMV_ROWS_WIDE 4
#endif
#ifndef HP_GEMV_TOKENS
#define HP_GEMV_TOKENS 4
#endif
#ifndef HP_GEMV_STREAM
#define HP_GEMV_STREAM 1
#endif
#ifndef HP_GEMV_SPLIT
#define HP_GEMV_SPLIT 1
#endif
#ifndef HP_GEMV_ACCS
#define HP_GEMV_ACCS 4
#endif
#ifndef HP_PREFETCH_BYTES
#define HP_PREFETCH_BYTES 8192
#endif
#ifndef HP_PREFETCH_MIN_ROW_BYTES
#define HP_PREFETCH_MIN_ROW_BYTES 4096
#endif
#ifndef HP_PREFETCH_LOCALITY
#define HP_PREFETCH_LOCALITY 2
#endif
#ifndef HP_TILE_PREFETCH_BYTES
#define HP_TILE_PREFETCH_BYTES 8192
#endif
#ifndef HP_GEMM_MIN_TOKENS
#define HP_GEMM_MIN_TOKENS 32
#endif
#ifndef HP_GEMM_PACK_SIMD
#define HP_GEMM_PACK_SIMD 1
#endif
#ifndef HP_GEMM_MR
#define HP_GEMM_MR 8
#endif
#ifndef HP_GEMM_NR
#define HP_GEMM_NR 32
#endif
#ifndef HP_GEMM_KC
#define HP_GEMM_KC 1024
#endif
#ifndef HP_GEMM_NC
#define HP_GEMM_NC 96
#endif
#ifndef HP_GEMM_MC
#define HP_GEMM_MC 768
#endif
#ifndef HP_ATTN_BLOCK
#define HP_ATTN_BLOCK 64
#endif
#ifndef HP_ATTN_KERNEL
#define HP_ATTN_KERNEL 1
#endif
#ifndef HP_VEC_EXP
#define HP_VEC_EXP 1
#endif
#ifndef HP_FUSE_GATE
#define HP_FUSE_GATE 1
#endif
#ifndef HP_FUSE_RESIDUAL
#define HP_FUSE_RESIDUAL 1
#endif

static_assert(HP_GEMV_ROWS * HP_GEMV_TOKENS <= 16, "knobs: HP_GEMV_ROWS * HP_GEMV_TOKENS <= 16");
static_assert(HP_GEMV_ROWS_WIDE * HP_GEMV_TOKENS <= 16, "knobs: HP_GEMV_ROWS_WIDE * HP_GEMV_TOKENS <= 16");
static_assert(HP_GEMM_MR * HP_GEMM_NR / 16 <= 24, "knobs: HP_GEMM_MR * HP_GEMM_NR / 16 <= 24");
static_assert(HP_GEMM_NC % HP_GEMM_NR == 0, "knobs: HP_GEMM_NC % HP_GEMM_NR == 0");
static_assert(HP_GEMM_MC % HP_GEMM_MR == 0, "knobs: HP_GEMM_MC % HP_GEMM_MR == 0");
static_assert(HP_GEMM_NR % 16 == 0, "knobs: HP_GEMM_NR % 16 == 0");
static_assert(HP_GEMV_STREAM || !HP_GEMV_SPLIT, "knobs: HP_GEMV_STREAM || !HP_GEMV_SPLIT");
static_assert(HP_GEMV_ROWS >= 1 && HP_GEMV_TOKENS >= 1 && HP_MAX_THREADS >= 1 && HP_ATTN_BLOCK >= 1, "knobs: positive sizes");
