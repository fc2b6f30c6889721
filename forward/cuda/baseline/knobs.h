// Compile-time knobs of the CUDA baseline; knobs.json is the manifest (same names, defaults,
// domains) that the builder and the knob-search agent read. CMake passes -D NAME=VALUE for each.
#pragma once

#ifndef HP_CUDA_NORM_THREADS
#define HP_CUDA_NORM_THREADS 256
#endif
#ifndef HP_CUDA_NORM_VEC
#define HP_CUDA_NORM_VEC 2
#endif
#ifndef HP_CUDA_GEMM_QKV
#define HP_CUDA_GEMM_QKV 1
#endif
#ifndef HP_CUDA_GEMM_SPLIT_K
#define HP_CUDA_GEMM_SPLIT_K 0
#endif
#ifndef HP_CUDA_GEMM_SPLIT_K_MAX_TOKENS
#define HP_CUDA_GEMM_SPLIT_K_MAX_TOKENS 64
#endif
#ifndef HP_CUDA_ATTN_WARPS
#define HP_CUDA_ATTN_WARPS 4
#endif
#ifndef HP_CUDA_ATTN_WIDE_V_MAX_TOKENS
#define HP_CUDA_ATTN_WIDE_V_MAX_TOKENS 1
#endif
#ifndef HP_CUDA_ATTN_SPLIT_TOKENS
#define HP_CUDA_ATTN_SPLIT_TOKENS 64
#endif
#ifndef HP_CUDA_ATTN_MAX_SPLIT
#define HP_CUDA_ATTN_MAX_SPLIT 32
#endif
#ifndef HP_CUDA_ATTN_KERNEL
#define HP_CUDA_ATTN_KERNEL 2
#endif
#ifndef HP_CUDA_ATTN_MMA_MIN_TOKENS
#define HP_CUDA_ATTN_MMA_MIN_TOKENS 16
#endif
#ifndef HP_CUDA_ATTN_MMA_MIN_TOKENS_WIDE
#define HP_CUDA_ATTN_MMA_MIN_TOKENS_WIDE 2
#endif
#ifndef HP_CUDA_ATTN_FD_WARPS
#define HP_CUDA_ATTN_FD_WARPS 4
#endif
#ifndef HP_CUDA_ATTN_FD_CLUSTER
#define HP_CUDA_ATTN_FD_CLUSTER 16
#endif
#ifndef HP_CUDA_ATTN_FD_EARLY_KV
#define HP_CUDA_ATTN_FD_EARLY_KV 1
#endif
#ifndef HP_CUDA_ATTN_FD_HEAD_SPLIT
#define HP_CUDA_ATTN_FD_HEAD_SPLIT 1
#endif
#ifndef HP_CUDA_ATTN_FD_SPLIT_BALANCE
#define HP_CUDA_ATTN_FD_SPLIT_BALANCE 0
#endif
#ifndef HP_CUDA_ATTN_FD_LAUNCH_EARLY
#define HP_CUDA_ATTN_FD_LAUNCH_EARLY 0
#endif
#ifndef HP_CUDA_ATTN_FD_HEAD
#define HP_CUDA_ATTN_FD_HEAD 0
#endif
#ifndef HP_CUDA_ATTN_FD_OPROJ
#define HP_CUDA_ATTN_FD_OPROJ 0
#endif
#ifndef HP_CUDA_ATTN_FD_SCATTER_SCORES
#define HP_CUDA_ATTN_FD_SCATTER_SCORES 2
#endif
#ifndef HP_CUDA_ATTN_FD_UNROLL
#define HP_CUDA_ATTN_FD_UNROLL 4
#endif
#ifndef HP_CUDA_ATTN_FD_PREFETCH_MAX_TOKENS
#define HP_CUDA_ATTN_FD_PREFETCH_MAX_TOKENS 1
#endif
#ifndef HP_CUDA_ATTN_FD_MIN_BLOCKS
#define HP_CUDA_ATTN_FD_MIN_BLOCKS 4
#endif
#ifndef HP_CUDA_ATTN_FD_TARGET_BLOCKS
#define HP_CUDA_ATTN_FD_TARGET_BLOCKS 512
#endif
#ifndef HP_CUDA_ATTN_MMA_RING
#define HP_CUDA_ATTN_MMA_RING 2
#endif
#ifndef HP_CUDA_ATTN_MMA_RING_MIN_TOKENS
#define HP_CUDA_ATTN_MMA_RING_MIN_TOKENS 8
#endif
#ifndef HP_CUDA_ATTN_MMA_RING_MAX_TOKENS
#define HP_CUDA_ATTN_MMA_RING_MAX_TOKENS 8
#endif
#ifndef HP_CUDA_ATTN_MMA_WARPS8
#define HP_CUDA_ATTN_MMA_WARPS8 1
#endif
#ifndef HP_CUDA_ATTN_MMA_ONE_WAVE
#define HP_CUDA_ATTN_MMA_ONE_WAVE 1
#endif
#ifndef HP_CUDA_ATTN_FD_RING
#define HP_CUDA_ATTN_FD_RING 0
#endif
#ifndef HP_CUDA_ATTN_MMA_RING_128
#define HP_CUDA_ATTN_MMA_RING_128 0
#endif
#ifndef HP_CUDA_ATTN_MMA_RING_EARLY
#define HP_CUDA_ATTN_MMA_RING_EARLY 1
#endif
#ifndef HP_CUDA_ATTN_MMA_PREFETCH_MIN_TOKENS
#define HP_CUDA_ATTN_MMA_PREFETCH_MIN_TOKENS 16
#endif
#ifndef HP_CUDA_ATTN_MMA_PREFETCH_MAX_TOKENS
#define HP_CUDA_ATTN_MMA_PREFETCH_MAX_TOKENS 32
#endif
#ifndef HP_CUDA_ATTN_MMA_CLUSTER
#define HP_CUDA_ATTN_MMA_CLUSTER 0
#endif
#ifndef HP_CUDA_ATTN_FD_MIN_STEPS
#define HP_CUDA_ATTN_FD_MIN_STEPS 1
#endif
#ifndef HP_CUDA_GEMM_ALGO
#define HP_CUDA_GEMM_ALGO -1
#endif
#ifndef HP_CUDA_GEMM_PAIR
#define HP_CUDA_GEMM_PAIR 1
#endif
#ifndef HP_CUDA_MOE_ROWS_PER_BLOCK
#define HP_CUDA_MOE_ROWS_PER_BLOCK 8
#endif
#ifndef HP_CUDA_MOE_KERNEL
#define HP_CUDA_MOE_KERNEL 1
#endif
#ifndef HP_CUDA_MOE_SINGLE_TOKEN
#define HP_CUDA_MOE_SINGLE_TOKEN 1
#endif
#ifndef HP_CUDA_MOE_WARPS
#define HP_CUDA_MOE_WARPS 4
#endif
#ifndef HP_CUDA_MOE_UNROLL
#define HP_CUDA_MOE_UNROLL 2
#endif
#ifndef HP_CUDA_MOE_MAX_CLUSTER
#define HP_CUDA_MOE_MAX_CLUSTER 8
#endif
#ifndef HP_CUDA_MOE_TARGET_WARPS
#define HP_CUDA_MOE_TARGET_WARPS 2048
#endif
#ifndef HP_CUDA_MOE_DOWN_TILES
#define HP_CUDA_MOE_DOWN_TILES 4
#endif
#ifndef HP_CUDA_MOE_DOWN_TILES_MIN_TOKENS
#define HP_CUDA_MOE_DOWN_TILES_MIN_TOKENS 32
#endif
#ifndef HP_CUDA_MOE_ONE_WAVE
#define HP_CUDA_MOE_ONE_WAVE 0
#endif
#ifndef HP_CUDA_MOE_ROUTE_THREADS
#define HP_CUDA_MOE_ROUTE_THREADS 1024
#endif
#ifndef HP_CUDA_GEMV_MAX_TOKENS
#define HP_CUDA_GEMV_MAX_TOKENS 32
#endif
#ifndef HP_CUDA_GEMV_MAX_TOKENS_MOE
#define HP_CUDA_GEMV_MAX_TOKENS_MOE 8
#endif
#ifndef HP_CUDA_GEMV_WARPS
#define HP_CUDA_GEMV_WARPS 4
#endif
#ifndef HP_CUDA_GEMV_UNROLL
#define HP_CUDA_GEMV_UNROLL 4
#endif
#ifndef HP_CUDA_GEMV_MAX_CLUSTER
#define HP_CUDA_GEMV_MAX_CLUSTER 8
#endif
#ifndef HP_CUDA_GEMV_TARGET_WARPS
#define HP_CUDA_GEMV_TARGET_WARPS 2048
#endif
#ifndef HP_CUDA_GEMV_FUSE
#define HP_CUDA_GEMV_FUSE 1
#endif
#ifndef HP_CUDA_GEMV_NORM
#define HP_CUDA_GEMV_NORM 1
#endif
#ifndef HP_CUDA_PDL
#define HP_CUDA_PDL 1
#endif
#ifndef HP_CUDA_L2_PREFETCH_MB
#define HP_CUDA_L2_PREFETCH_MB 0
#endif
#ifndef HP_CUDA_L2_PREFETCH_IDLE_MB
#define HP_CUDA_L2_PREFETCH_IDLE_MB 0
#endif
#ifndef HP_CUDA_L2_PREFETCH_BULK
#define HP_CUDA_L2_PREFETCH_BULK 0
#endif
#ifndef HP_CUDA_GEMV_PIPELINE_MIN_TOKENS
#define HP_CUDA_GEMV_PIPELINE_MIN_TOKENS 8
#endif
#ifndef HP_CUDA_GEMV_PIPELINE_UNROLL
#define HP_CUDA_GEMV_PIPELINE_UNROLL 2
#endif
#ifndef HP_CUDA_GEMV_L2_AHEAD
#define HP_CUDA_GEMV_L2_AHEAD 0
#endif
#ifndef HP_CUDA_GEMV_EVICT_FIRST
#define HP_CUDA_GEMV_EVICT_FIRST 0
#endif
#ifndef HP_CUDA_GEMV_STAGED
#define HP_CUDA_GEMV_STAGED 0
#endif
#ifndef HP_CUDA_GEMV_STAGED_STAGE_KB
#define HP_CUDA_GEMV_STAGED_STAGE_KB 16
#endif
#ifndef HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM
#define HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM 1
#endif
#ifndef HP_CUDA_GEMV_STAGED_STAGES
#define HP_CUDA_GEMV_STAGED_STAGES 6
#endif
#ifndef HP_CUDA_WORKSPACE_TOKENS
#define HP_CUDA_WORKSPACE_TOKENS 256
#endif
#ifndef HP_CUDA_PERSISTENT_STEP
#define HP_CUDA_PERSISTENT_STEP 0
#endif
#ifndef HP_CUDA_PERSISTENT_STAGES
#define HP_CUDA_PERSISTENT_STAGES 5
#endif
#ifndef HP_CUDA_PERSISTENT_L2_ITEMS
#define HP_CUDA_PERSISTENT_L2_ITEMS 0
#endif
// Not a tuning knob (not in knobs.json): a diagnostic build of the persistent step (-DHP_CUDA_PERSISTENT_TRACE=1)
// records when each block starts, has its input, ends and arrives for each op, and the plugin logs the
// last step's averages per op kind at destroy (docs/cuda.md).
#ifndef HP_CUDA_PERSISTENT_TRACE
#define HP_CUDA_PERSISTENT_TRACE 0
#endif
// Not a tuning knob either: a diagnostic build of the fused one-token MoE kernel (-DHP_CUDA_MOE_FUSED_TRACE=1)
// records per block when each phase ends, and the plugin logs the last step's phase times at destroy.
#ifndef HP_CUDA_MOE_FUSED_TRACE
#define HP_CUDA_MOE_FUSED_TRACE 0
#endif
// Nor this: a diagnostic build of the flash-decoding attention, both kernels (-DHP_CUDA_ATTN_TRACE=1)
// records per block when it starts, passes the wait, ends its steps, and passes each of the block
// and cluster reductions, and the plugin logs the last step's phase times at destroy.
#ifndef HP_CUDA_ATTN_TRACE
#define HP_CUDA_ATTN_TRACE 0
#endif
#ifndef HP_CUDA_PERSISTENT_STAGE_KB
#define HP_CUDA_PERSISTENT_STAGE_KB 32
#endif
#ifndef HP_CUDA_MOE_SINGLE_ROUTE
#define HP_CUDA_MOE_SINGLE_ROUTE 0
#endif
#ifndef HP_CUDA_MOE_SINGLE_WARPS
#define HP_CUDA_MOE_SINGLE_WARPS 8
#endif
#ifndef HP_CUDA_MOE_SINGLE_UNROLL
#define HP_CUDA_MOE_SINGLE_UNROLL 8
#endif
#ifndef HP_CUDA_MOE_SINGLE_DOWN_UNROLL
#define HP_CUDA_MOE_SINGLE_DOWN_UNROLL 6
#endif
#ifndef HP_CUDA_MOE_FUSED
#define HP_CUDA_MOE_FUSED 1
#endif
#ifndef HP_CUDA_MOE_FUSED_MAX_REGS
#define HP_CUDA_MOE_FUSED_MAX_REGS 112
#endif
#ifndef HP_CUDA_MOE_FUSED_WARPS
#define HP_CUDA_MOE_FUSED_WARPS 16
#endif
#ifndef HP_CUDA_MOE_FUSED_UNROLL
#define HP_CUDA_MOE_FUSED_UNROLL 8
#endif
#ifndef HP_CUDA_MOE_FUSED_STAGE_DOWN
#define HP_CUDA_MOE_FUSED_STAGE_DOWN 0
#endif
#ifndef HP_CUDA_MOE_FUSED_DOWN_UNROLL
#define HP_CUDA_MOE_FUSED_DOWN_UNROLL 12
#endif
#ifndef HP_CUDA_MOE_FUSED_DOWN_MMA
#define HP_CUDA_MOE_FUSED_DOWN_MMA 1
#endif
#ifndef HP_CUDA_MOE_FUSED_SPLIT_DOWN
#define HP_CUDA_MOE_FUSED_SPLIT_DOWN 0
#endif
#ifndef HP_CUDA_MOE_FUSED_LOGIT_FLAGS
#define HP_CUDA_MOE_FUSED_LOGIT_FLAGS 1
#endif
#ifndef HP_CUDA_MOE_FUSED_TABLES_SHARED
#define HP_CUDA_MOE_FUSED_TABLES_SHARED 1
#endif
#ifndef HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS
#define HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS 0
#endif
#ifndef HP_CUDA_MOE_FUSED_SPLIT_ALIGN
#define HP_CUDA_MOE_FUSED_SPLIT_ALIGN 8
#endif
#ifndef HP_CUDA_MOE_FUSED_ACT_TAGS
#define HP_CUDA_MOE_FUSED_ACT_TAGS 1
#endif
#ifndef HP_CUDA_ATTN_FD_REDUCE_UNROLL
#define HP_CUDA_ATTN_FD_REDUCE_UNROLL 8
#endif
#ifndef HP_CUDA_ATTN_FD_SMALL_WARPS
#define HP_CUDA_ATTN_FD_SMALL_WARPS 8
#endif
#ifndef HP_CUDA_ATTN_FD_SMALL_MAX_TOKENS
#define HP_CUDA_ATTN_FD_SMALL_MAX_TOKENS 2
#endif
#ifndef HP_CUDA_SKINNY_MIN_TOKENS
#define HP_CUDA_SKINNY_MIN_TOKENS 1
#endif
#ifndef HP_CUDA_SKINNY_WARPS
#define HP_CUDA_SKINNY_WARPS 4
#endif
#ifndef HP_CUDA_SKINNY_TILES
#define HP_CUDA_SKINNY_TILES 1
#endif
#ifndef HP_CUDA_SKINNY_UNROLL
#define HP_CUDA_SKINNY_UNROLL 2
#endif
#ifndef HP_CUDA_SKINNY_STAGES
#define HP_CUDA_SKINNY_STAGES 3
#endif
#ifndef HP_CUDA_SKINNY_MOE
#define HP_CUDA_SKINNY_MOE 0
#endif
#ifndef HP_CUDA_SKINNY_MOE_PARTS
#define HP_CUDA_SKINNY_MOE_PARTS 4
#endif
#ifndef HP_CUDA_SKINNY_QKV_MAX_TOKENS
#define HP_CUDA_SKINNY_QKV_MAX_TOKENS 32
#endif
#ifndef HP_CUDA_SKINNY_HEAD
#define HP_CUDA_SKINNY_HEAD 1
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_MIN_TOKENS
#define HP_CUDA_SKINNY_WGMMA_MIN_TOKENS 1
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_STAGES_8
#define HP_CUDA_SKINNY_WGMMA_STAGES_8 0
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_STAGES_16
#define HP_CUDA_SKINNY_WGMMA_STAGES_16 5
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_STAGES_32
#define HP_CUDA_SKINNY_WGMMA_STAGES_32 4
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_STAGES_64
#define HP_CUDA_SKINNY_WGMMA_STAGES_64 4
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_OVERLAP
#define HP_CUDA_SKINNY_WGMMA_OVERLAP 1
#endif
#ifndef HP_CUDA_SKINNY_WGMMA_OVERLAP_MAX_TOKENS
#define HP_CUDA_SKINNY_WGMMA_OVERLAP_MAX_TOKENS 64
#endif
#ifndef HP_CUDA_SKINNY_TARGET_BLOCKS_8
#define HP_CUDA_SKINNY_TARGET_BLOCKS_8 192
#endif
#ifndef HP_CUDA_SKINNY_TARGET_BLOCKS
#define HP_CUDA_SKINNY_TARGET_BLOCKS 256
#endif

static_assert(HP_CUDA_NORM_THREADS % 32 == 0 && HP_CUDA_NORM_THREADS <= 1024, "norm_threads: whole warps, at most 1024");
static_assert(HP_CUDA_GEMM_QKV == 0 || HP_CUDA_GEMM_QKV == 1, "gemm_qkv: 0 or 1");
static_assert(HP_CUDA_GEMM_SPLIT_K == 0 || HP_CUDA_GEMM_SPLIT_K == 2 || HP_CUDA_GEMM_SPLIT_K == 4, "gemm_split_k: 0 (off), 2 or 4");
static_assert(HP_CUDA_GEMM_SPLIT_K_MAX_TOKENS >= 1, "gemm_split_k_max_tokens: at least 1");
static_assert(HP_CUDA_NORM_VEC >= 0 && HP_CUDA_NORM_VEC <= 2, "norm_vec: 0 (scalar loops), 1 (row in registers), 2 (and the embedding in the first norm)");
static_assert(HP_CUDA_ATTN_WARPS >= 1 && HP_CUDA_ATTN_WARPS * 32 <= 1024, "attn_warps: 1..32");
static_assert(HP_CUDA_ATTN_SPLIT_TOKENS >= 1 && HP_CUDA_ATTN_MAX_SPLIT >= 1 && HP_CUDA_ATTN_MAX_SPLIT <= 64,
              "attention split knobs: positive, at most 64 splits");
static_assert(HP_CUDA_ATTN_KERNEL >= 0 && HP_CUDA_ATTN_KERNEL <= 2,
              "attn_kernel: 0 (split + reduce kernels), 1 (flash decoding) or 2 (flash decoding on tensor cores)");
static_assert(HP_CUDA_ATTN_MMA_MIN_TOKENS >= 1, "attn_mma_min_tokens: positive");
static_assert(HP_CUDA_ATTN_MMA_MIN_TOKENS_WIDE >= 1, "attn_mma_min_tokens_wide: positive");
static_assert(HP_CUDA_ATTN_FD_WARPS >= 1 && HP_CUDA_ATTN_FD_WARPS <= 16, "attn_fd_warps: 1..16");
static_assert(HP_CUDA_ATTN_FD_UNROLL >= 1 && HP_CUDA_ATTN_FD_UNROLL <= 8, "attn_fd_unroll: 1..8");
static_assert(HP_CUDA_ATTN_FD_PREFETCH_MAX_TOKENS >= 0, "attn_fd_prefetch_max_tokens: 0 (never) or more");
static_assert((HP_CUDA_ATTN_MMA_RING == 0 || (HP_CUDA_ATTN_MMA_RING >= 2 && HP_CUDA_ATTN_MMA_RING <= 4)) &&
                  (HP_CUDA_ATTN_MMA_RING_128 == 0 || (HP_CUDA_ATTN_MMA_RING_128 >= 2 && HP_CUDA_ATTN_MMA_RING_128 <= 3)),
              "attn_mma_ring: 0 or 2..4; attn_mma_ring_128: 0 or 2..3");
static_assert(HP_CUDA_ATTN_FD_RING == 0 || (HP_CUDA_ATTN_FD_RING >= 2 && HP_CUDA_ATTN_FD_RING <= 4), "attn_fd_ring: 0 or 2..4");
static_assert(HP_CUDA_ATTN_MMA_RING_EARLY == 0 || HP_CUDA_ATTN_MMA_RING_EARLY == 1, "attn_mma_ring_early: 0 or 1");
static_assert(HP_CUDA_ATTN_MMA_RING_MIN_TOKENS >= 1 && HP_CUDA_ATTN_MMA_RING_MAX_TOKENS >= 1, "attn_mma_ring_min_tokens, attn_mma_ring_max_tokens: 1 or more");
static_assert(HP_CUDA_ATTN_MMA_WARPS8 >= 0 && HP_CUDA_ATTN_MMA_WARPS8 <= 2, "attn_mma_warps8: 0, 1 or 2");
static_assert(HP_CUDA_ATTN_MMA_ONE_WAVE == 0 || HP_CUDA_ATTN_MMA_ONE_WAVE == 1, "attn_mma_one_wave: 0 or 1");
static_assert(HP_CUDA_ATTN_MMA_PREFETCH_MIN_TOKENS >= 0, "attn_mma_prefetch_min_tokens: 0 (never) or more");
static_assert(HP_CUDA_ATTN_MMA_PREFETCH_MAX_TOKENS >= 1, "attn_mma_prefetch_max_tokens: 1 or more");
static_assert(HP_CUDA_ATTN_MMA_CLUSTER == 0 || (HP_CUDA_ATTN_MMA_CLUSTER >= 2 && HP_CUDA_ATTN_MMA_CLUSTER <= 16), "attn_mma_cluster: 0 (never) or the most splits of one cluster, 2..16");
static_assert(HP_CUDA_ATTN_FD_MIN_BLOCKS >= 1 && HP_CUDA_ATTN_FD_MIN_BLOCKS <= 16, "attn_fd_min_blocks: 1..16");
static_assert(HP_CUDA_ATTN_FD_TARGET_BLOCKS >= 1 && HP_CUDA_ATTN_FD_MIN_STEPS >= 1, "attn_fd_target_blocks, attn_fd_min_steps: positive");
static_assert(HP_CUDA_MOE_ROWS_PER_BLOCK >= 1 && HP_CUDA_MOE_ROWS_PER_BLOCK <= 32, "moe_rows_per_block: 1..32");
static_assert(HP_CUDA_MOE_KERNEL == 0 || HP_CUDA_MOE_KERNEL == 1, "moe_kernel: 0 or 1");
static_assert(HP_CUDA_MOE_SINGLE_TOKEN == 0 || HP_CUDA_MOE_SINGLE_TOKEN == 1, "moe_single_token: 0 or 1");
static_assert(HP_CUDA_MOE_WARPS >= 1 && HP_CUDA_MOE_WARPS <= 8, "moe_warps: 1..8 (shared memory of the reduction)");
static_assert(HP_CUDA_MOE_UNROLL >= 1 && HP_CUDA_MOE_UNROLL <= 8, "moe_unroll: 1..8");
static_assert(HP_CUDA_MOE_MAX_CLUSTER == 1 || HP_CUDA_MOE_MAX_CLUSTER == 2 || HP_CUDA_MOE_MAX_CLUSTER == 4 || HP_CUDA_MOE_MAX_CLUSTER == 8,
              "moe_max_cluster: 1, 2, 4 or 8 (portable cluster sizes)");
static_assert(HP_CUDA_MOE_TARGET_WARPS >= 1, "moe_target_warps: positive");
static_assert(HP_CUDA_MOE_DOWN_TILES >= 1 && HP_CUDA_MOE_DOWN_TILES <= 16, "moe_down_tiles: 1..16");
static_assert(HP_CUDA_MOE_DOWN_TILES_MIN_TOKENS >= 1, "moe_down_tiles_min_tokens: positive");
static_assert(HP_CUDA_MOE_ONE_WAVE == 0 || HP_CUDA_MOE_ONE_WAVE == 1, "moe_one_wave: 0 or 1");
static_assert(HP_CUDA_MOE_ROUTE_THREADS % 32 == 0 && HP_CUDA_MOE_ROUTE_THREADS >= 32 && HP_CUDA_MOE_ROUTE_THREADS <= 1024,
              "moe_route_threads: whole warps, 32..1024");
static_assert(HP_CUDA_GEMV_MAX_TOKENS >= 0, "gemv_max_tokens: 0 (never) or more");
static_assert(HP_CUDA_GEMV_MAX_TOKENS_MOE >= 0, "gemv_max_tokens_moe: 0 (never) or more");
static_assert(HP_CUDA_GEMV_WARPS >= 1 && HP_CUDA_GEMV_WARPS <= 8, "gemv_warps: 1..8 (shared memory of the reduction)");
static_assert(HP_CUDA_GEMV_UNROLL >= 1 && HP_CUDA_GEMV_UNROLL <= 8, "gemv_unroll: 1..8");
static_assert(HP_CUDA_GEMV_MAX_CLUSTER == 1 || HP_CUDA_GEMV_MAX_CLUSTER == 2 || HP_CUDA_GEMV_MAX_CLUSTER == 4 ||
                  HP_CUDA_GEMV_MAX_CLUSTER == 8,
              "gemv_max_cluster: 1, 2, 4 or 8 (portable cluster sizes)");
static_assert(HP_CUDA_GEMV_TARGET_WARPS >= 1, "gemv_target_warps: positive");
static_assert(HP_CUDA_GEMV_FUSE == 0 || HP_CUDA_GEMV_FUSE == 1, "gemv_fuse: 0 or 1");
static_assert(HP_CUDA_GEMM_PAIR == 0 || HP_CUDA_GEMM_PAIR == 1, "gemm_pair: 0 or 1");
static_assert(HP_CUDA_GEMV_NORM == 0 || HP_CUDA_GEMV_NORM == 1, "gemv_norm: 0 or 1");
static_assert(HP_CUDA_GEMV_STAGED >= 0 && HP_CUDA_GEMV_STAGED <= 7, "gemv_staged: a mask of epilogues, 0..7");
static_assert(HP_CUDA_GEMV_STAGED_STAGE_KB == 8 || HP_CUDA_GEMV_STAGED_STAGE_KB == 16 || HP_CUDA_GEMV_STAGED_STAGE_KB == 32,
              "gemv_staged_stage_kb: 8, 16 or 32");
static_assert(HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM == 1 || HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM == 2 || HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM == 4,
              "gemv_staged_blocks_per_sm: 1, 2 or 4");
static_assert(HP_CUDA_GEMV_STAGED_STAGES >= 2 &&
                  HP_CUDA_GEMV_STAGED_BLOCKS_PER_SM * (HP_CUDA_GEMV_STAGED_STAGES * HP_CUDA_GEMV_STAGED_STAGE_KB + 16) <= 224,
              "gemv_staged_stages: 2 or more, at most ~200 KB of shared memory");
static_assert(HP_CUDA_PDL == 0 || HP_CUDA_PDL == 1, "pdl: 0 or 1");
static_assert(HP_CUDA_L2_PREFETCH_MB >= 0 && HP_CUDA_L2_PREFETCH_IDLE_MB >= 0, "l2_prefetch_mb, l2_prefetch_idle_mb: 0 or more");
static_assert(HP_CUDA_L2_PREFETCH_BULK == 0 || HP_CUDA_L2_PREFETCH_BULK == 1, "l2_prefetch_bulk: 0 or 1");
static_assert(HP_CUDA_GEMV_PIPELINE_MIN_TOKENS >= 0, "gemv_pipeline_min_tokens: 0 (never) or more");
static_assert(HP_CUDA_GEMV_PIPELINE_UNROLL >= 1 && HP_CUDA_GEMV_PIPELINE_UNROLL <= 8, "gemv_pipeline_unroll: 1..8");
static_assert(HP_CUDA_GEMV_L2_AHEAD >= 0 && HP_CUDA_GEMV_L2_AHEAD <= 4, "gemv_l2_ahead: 0..4");
static_assert(HP_CUDA_GEMV_EVICT_FIRST == 0 || HP_CUDA_GEMV_EVICT_FIRST == 1, "gemv_evict_first: 0 or 1");
static_assert(HP_CUDA_WORKSPACE_TOKENS >= 1, "workspace_tokens must be positive");
static_assert(HP_CUDA_PERSISTENT_STEP == 0 || HP_CUDA_PERSISTENT_STEP == 1, "persistent_step: 0 or 1");
static_assert(HP_CUDA_PERSISTENT_STAGE_KB == 8 || HP_CUDA_PERSISTENT_STAGE_KB == 16 || HP_CUDA_PERSISTENT_STAGE_KB == 32,
              "persistent_stage_kb: 8, 16 or 32");
static_assert(HP_CUDA_PERSISTENT_L2_ITEMS >= 0 && HP_CUDA_PERSISTENT_L2_ITEMS <= 64, "persistent_l2_items: 0..64");
static_assert(HP_CUDA_PERSISTENT_TRACE == 0 || HP_CUDA_PERSISTENT_TRACE == 1, "HP_CUDA_PERSISTENT_TRACE: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_TRACE == 0 || HP_CUDA_MOE_FUSED_TRACE == 1, "HP_CUDA_MOE_FUSED_TRACE: 0 or 1");
static_assert(HP_CUDA_ATTN_TRACE == 0 || HP_CUDA_ATTN_TRACE == 1, "HP_CUDA_ATTN_TRACE: 0 or 1");
static_assert(HP_CUDA_PERSISTENT_STAGES >= 2 && HP_CUDA_PERSISTENT_STAGES * HP_CUDA_PERSISTENT_STAGE_KB <= 192,
              "persistent_stages: 2 or more, at most 192 KB of ring");
static_assert(HP_CUDA_MOE_SINGLE_ROUTE == 0 || HP_CUDA_MOE_SINGLE_ROUTE == 1, "moe_single_route: 0 or 1");
static_assert(HP_CUDA_MOE_SINGLE_WARPS >= 1 && HP_CUDA_MOE_SINGLE_WARPS <= 32, "moe_single_warps: 1..32");
static_assert(HP_CUDA_MOE_SINGLE_UNROLL >= 1 && HP_CUDA_MOE_SINGLE_UNROLL <= 16, "moe_single_unroll: 1..16");
static_assert(HP_CUDA_MOE_SINGLE_DOWN_UNROLL >= 1 && HP_CUDA_MOE_SINGLE_DOWN_UNROLL <= 16, "moe_single_down_unroll: 1..16");
static_assert(HP_CUDA_MOE_FUSED == 0 || HP_CUDA_MOE_FUSED == 1, "moe_fused: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_WARPS >= 1 && HP_CUDA_MOE_FUSED_WARPS <= 32, "moe_fused_warps: 1..32");
static_assert(HP_CUDA_MOE_FUSED_UNROLL >= 1 && HP_CUDA_MOE_FUSED_UNROLL <= 16, "moe_fused_unroll: 1..16");
static_assert(HP_CUDA_MOE_FUSED_STAGE_DOWN == 0 || HP_CUDA_MOE_FUSED_STAGE_DOWN == 1, "moe_fused_stage_down: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_DOWN_UNROLL >= 2 && HP_CUDA_MOE_FUSED_DOWN_UNROLL <= 32, "moe_fused_down_unroll: 2..32 (moe_fused_down_mma takes two loads a unit)");
static_assert(HP_CUDA_MOE_FUSED_DOWN_MMA == 0 || HP_CUDA_MOE_FUSED_DOWN_MMA == 1, "moe_fused_down_mma: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_SPLIT_DOWN == 0 || HP_CUDA_MOE_FUSED_SPLIT_DOWN == 1, "moe_fused_split_down: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_LOGIT_FLAGS == 0 || HP_CUDA_MOE_FUSED_LOGIT_FLAGS == 1, "moe_fused_logit_flags: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_TABLES_SHARED == 0 || HP_CUDA_MOE_FUSED_TABLES_SHARED == 1, "moe_fused_tables_shared: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS == 0 || HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS == 1, "moe_fused_dynamic_items: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_ACT_TAGS == 0 || HP_CUDA_MOE_FUSED_ACT_TAGS == 1, "moe_fused_act_tags: 0 or 1");
static_assert(HP_CUDA_MOE_FUSED_SPLIT_ALIGN >= 8 && HP_CUDA_MOE_FUSED_SPLIT_ALIGN % 8 == 0, "moe_fused_split_align: a positive multiple of 8");
static_assert(HP_CUDA_ATTN_FD_REDUCE_UNROLL >= 1 && HP_CUDA_ATTN_FD_REDUCE_UNROLL <= 64, "attn_fd_reduce_unroll: 1..64");
static_assert(HP_CUDA_ATTN_FD_SMALL_WARPS >= 1 && HP_CUDA_ATTN_FD_SMALL_WARPS <= 8, "attn_fd_small_warps: 1..8 (shared memory of the block)");
static_assert(HP_CUDA_ATTN_FD_SMALL_MAX_TOKENS >= 0, "attn_fd_small_max_tokens: 0 (never) or more");
static_assert(HP_CUDA_SKINNY_MIN_TOKENS >= 0, "skinny_min_tokens: 0 (never) or more");
static_assert(HP_CUDA_SKINNY_WARPS >= 1 && HP_CUDA_SKINNY_WARPS <= 8, "skinny_warps: 1..8");
static_assert(HP_CUDA_SKINNY_TILES >= 1 && HP_CUDA_SKINNY_TILES <= 4, "skinny_tiles: 1..4");
static_assert(HP_CUDA_SKINNY_UNROLL == 1 || HP_CUDA_SKINNY_UNROLL == 2 || HP_CUDA_SKINNY_UNROLL == 4 || HP_CUDA_SKINNY_UNROLL == 8,
              "skinny_unroll: 1, 2, 4 or 8 (whole rows per copy pass)");
static_assert(HP_CUDA_SKINNY_TARGET_BLOCKS_8 >= 1, "skinny_target_blocks_8: positive");
static_assert(HP_CUDA_SKINNY_TARGET_BLOCKS >= 1, "skinny_target_blocks: positive");
static_assert(HP_CUDA_SKINNY_WGMMA_MIN_TOKENS >= 0, "skinny_wgmma_min_tokens: 0 (never) or a token count");
static_assert((HP_CUDA_SKINNY_WGMMA_STAGES_8 == 0 || (HP_CUDA_SKINNY_WGMMA_STAGES_8 >= 2 && HP_CUDA_SKINNY_WGMMA_STAGES_8 <= 8)) &&
                  (HP_CUDA_SKINNY_WGMMA_STAGES_16 == 0 || (HP_CUDA_SKINNY_WGMMA_STAGES_16 >= 2 && HP_CUDA_SKINNY_WGMMA_STAGES_16 <= 8)) &&
                  (HP_CUDA_SKINNY_WGMMA_STAGES_32 == 0 || (HP_CUDA_SKINNY_WGMMA_STAGES_32 >= 2 && HP_CUDA_SKINNY_WGMMA_STAGES_32 <= 8)) &&
                  (HP_CUDA_SKINNY_WGMMA_STAGES_64 == 0 || (HP_CUDA_SKINNY_WGMMA_STAGES_64 >= 2 && HP_CUDA_SKINNY_WGMMA_STAGES_64 <= 8)),
              "skinny_wgmma_stages_*: 0 (two blocks per SM) or 2..8");
static_assert(HP_CUDA_MOE_FUSED_MAX_REGS == 0 || (HP_CUDA_MOE_FUSED_MAX_REGS >= 64 && HP_CUDA_MOE_FUSED_MAX_REGS <= 128 && HP_CUDA_MOE_FUSED_MAX_REGS % 8 == 0),
              "moe_fused_max_regs: 0 (launch bounds) or a multiple of 8 from 64 to 128");
static_assert(HP_CUDA_SKINNY_WGMMA_OVERLAP == 0 || HP_CUDA_SKINNY_WGMMA_OVERLAP == 1, "skinny_wgmma_overlap: 0 or 1");
static_assert(HP_CUDA_SKINNY_WGMMA_OVERLAP_MAX_TOKENS >= 0, "skinny_wgmma_overlap_max_tokens: 0 (never) or more");
static_assert(HP_CUDA_SKINNY_MOE == 0 || HP_CUDA_SKINNY_MOE == 1, "skinny_moe: 0 or 1");
static_assert(HP_CUDA_SKINNY_QKV_MAX_TOKENS >= 0 && HP_CUDA_SKINNY_QKV_MAX_TOKENS <= 64, "skinny_qkv_max_tokens: 0..64 (the skinny GEMM's most tokens)");
static_assert(HP_CUDA_SKINNY_MOE_PARTS >= 0 && HP_CUDA_SKINNY_MOE_PARTS <= 7, "skinny_moe_parts: a mask of 1 (q/k/v), 2 (o_proj), 4 (lm_head)");
static_assert(HP_CUDA_ATTN_FD_CLUSTER == 0 || HP_CUDA_ATTN_FD_CLUSTER == 8 || HP_CUDA_ATTN_FD_CLUSTER == 16,
              "attn_fd_cluster: 0, 8 or 16");
static_assert(HP_CUDA_ATTN_FD_EARLY_KV >= 0 && HP_CUDA_ATTN_FD_EARLY_KV <= 2, "attn_fd_early_kv: 0, 1 or 2");
static_assert(HP_CUDA_ATTN_FD_SPLIT_BALANCE == 0 || HP_CUDA_ATTN_FD_SPLIT_BALANCE == 1, "attn_fd_split_balance: 0 or 1");
static_assert(HP_CUDA_ATTN_FD_HEAD_SPLIT == 1 || HP_CUDA_ATTN_FD_HEAD_SPLIT == 2 || HP_CUDA_ATTN_FD_HEAD_SPLIT == 4, "attn_fd_head_split: 1, 2 or 4");
static_assert(HP_CUDA_ATTN_FD_LAUNCH_EARLY == 0 || HP_CUDA_ATTN_FD_LAUNCH_EARLY == 1, "attn_fd_launch_early: 0 or 1");
static_assert(HP_CUDA_ATTN_FD_HEAD == 0 || HP_CUDA_ATTN_FD_HEAD == 1, "attn_fd_head: 0 or 1");
static_assert(HP_CUDA_ATTN_FD_OPROJ >= 0 && HP_CUDA_ATTN_FD_OPROJ <= 2, "attn_fd_oproj: 0, 1 or 2");
static_assert(HP_CUDA_ATTN_FD_SCATTER_SCORES >= 0 && HP_CUDA_ATTN_FD_SCATTER_SCORES <= 2, "attn_fd_scatter_scores: 0, 1 or 2");
static_assert(HP_CUDA_SKINNY_HEAD == 0 || HP_CUDA_SKINNY_HEAD == 1, "skinny_head: 0 or 1");
static_assert(HP_CUDA_SKINNY_STAGES >= 2 && HP_CUDA_SKINNY_STAGES <= 8, "skinny_stages: 2..8 (the ring's size is checked in gemm_skinny.cuh)");
