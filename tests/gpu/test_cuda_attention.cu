// The CUDA baseline's flash-decoding attention (forward/cuda/baseline/attention.cuh, and the
// tensor-core kernel of attention_mma.cuh for d_head 64 and 128) against float64 softmax attention
// on the host over the same inputs: fresh random q, a random paged KV cache (bf16, and f16) with
// shuffled block tables, sequence lengths off every tile (1, odd, a partial last 16-token block, a
// full one), several tokens of one sequence at consecutive positions (as in a prefill) or every token
// alone in its sequence (a decode step), always with the batch's seq_token_start padded to n_token
// sequences (the early KV loads of knob attn_fd_early_kv for the tokens alone in theirs), batch sizes
// 1, 3, 8, 33 and 64, GQA groups 1, 2, 3, 4 and 8, d_head 32, 64 and 128, both load schedules
// (PREFETCH or not), split counts 1 (no partials), the plugin's choice, 7 and 64 (more splits than
// steps: empty splits), and paged blocks of 16 and 8 tokens (warp steps across blocks); the
// CUDA-core kernel also with the single-token steps' block of kFdSmallWarps warps. Cache rows
// that no sequence holds are NaN. Outputs are poisoned first; a second run must give the same bits
// (fixed reduction order whatever block finishes last) and proves the split counters were reset.
// Cases with an odd seed also hand the kernel L2 prefetch ranges (gemv.cuh). Built with the
// plugin's knob values.
//
// Tolerance: the output is rounded to bf16 (2^-9 relative) after float32 dot products (the
// tensor-core kernel: 16-bit hi + lo parts of q and p, float32 accumulation), base-2 exponentials
// and sums; each element is held to 2^-8 |ref| + 1e-4 max|v| of its kv head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../forward/cuda/baseline/attention_mma.cuh"
#include "../../forward/cuda/baseline/kernels.cuh"
#include "cuda_test_util.h"

namespace {

using namespace hp_cuda_test;
namespace base = hp_cuda_baseline;

struct Case {
    int n_token, n_head, n_head_kv, d_head;
    hp_dtype kv_dtype = HP_DTYPE_BF16;
    int n_split = 0;  // 0: decode_attention_splits()
    int max_length = 1024;
    bool prefetch = false;  // the kernel's PREFETCH variant
    bool mma = false;       // decode_attention_mma_kernel (attention_mma.cuh; d_head 32 runs the other)
    int block_tokens = 16;  // 8: warp steps of 16 positions span paged blocks
    bool small_warps = false;  // the CUDA-core kernel with kFdSmallWarps warps per block (knob attn_fd_small_warps)
    bool alone = false;        // every token alone in its sequence (a decode step), else every fifth shares
    bool cluster = false;      // the splits as one cluster (knobs attn_fd_cluster, attn_mma_cluster)
    int ring = -1;             // the tensor-core kernel without PREFETCH, bf16: its shared-memory ring of this many steps
                               // (knob attn_mma_ring; 0 register loads), -1: the build's knob
    bool ring_early = false;   // with ring >= 2: the ring's first steps before the wait (knob attn_mma_ring_early)
    int head_split = 1;        // the CUDA-core kernel: blocks per (token, kv head, split), each group / head_split heads (knob attn_fd_head_split)
    bool pdl_writer = false;   // the CUDA-core kernel launched as a forward step launches it (launch_decode_attention_kernel: a
                               // programmatic dependent launch), behind a kernel that writes q and the tokens' newest K/V rows late
    bool wide = false;         // the tensor-core kernel (bf16) in blocks of kMmaWideWarps warps, its splits counted as forward.cu
                               // counts them (knob attn_mma_warps8); with ring >= 2 the variant without PREFETCH through a ring
};

std::string describe(const Case &c) {
    return "n_token " + std::to_string(c.n_token) + ", heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
           ", d_head " + std::to_string(c.d_head) + ", kv " + (c.kv_dtype == HP_DTYPE_BF16 ? "bf16" : "f16") + ", n_split " +
           std::to_string(c.n_split) + (c.prefetch ? ", prefetch" : "") + (c.mma ? ", mma" : "") + ", block_tokens " +
           std::to_string(c.block_tokens) + (c.small_warps ? ", " + std::to_string(base::kFdSmallWarps) + " warps" : "") +
           (c.alone ? ", one token per sequence" : "") + (c.cluster ? ", splits in a cluster" : "") +
           (c.ring >= 0 ? ", ring " + std::to_string(c.ring) + (c.ring_early ? " early" : "") : "") +
           (c.head_split > 1 ? ", " + std::to_string(c.head_split) + " blocks a group" : "") +
           (c.pdl_writer ? ", dependent launch behind a late writer" : "") +
           (c.wide ? ", " + std::to_string(base::kMmaWideWarps) + "-warp blocks" : "");
}

// Case::pdl_writer: the kernel before a step's attention, as the q/k/v launch's head epilogue is to it:
// it lets its dependents launch at once, then, after spin_ns (1 ms), writes q and each token's newest K and
// V row. An attention kernel that reads any of them before its griddepcontrol.wait reads what was
// there before: NaN.
__global__ void late_writer_kernel(const float *q_from, float *q, int n_q, const uint16_t *k_rows, const uint16_t *v_rows, const int64_t *rows,
                                   int n_rows, int row_width, uint16_t *k, uint16_t *v, unsigned long long spin_ns) {
    hp_cuda_gemv::launch_dependents();
    const unsigned long long start = hp_cuda_gemv::global_timer();
    while (hp_cuda_gemv::global_timer() - start < spin_ns) {
    }
    for (int i = int(threadIdx.x); i < n_q; i += int(blockDim.x)) q[i] = q_from[i];
    for (int r = 0; r < n_rows; ++r) {
        for (int i = int(threadIdx.x); i < row_width; i += int(blockDim.x)) {
            k[rows[r] + i] = k_rows[int64_t(r) * row_width + i];
            v[rows[r] + i] = v_rows[int64_t(r) * row_width + i];
        }
    }
}

// The CUDA-core kernel launched by launch_decode_attention_kernel (a programmatic dependent launch of
// `stream`'s previous kernel), the variants forward.cu picks: with Case::cluster the splits as one
// cluster where the device takes them, else (as forward.cu falls back) the last-block reduction.
template <hp_dtype KV, int D, int G>
void launch_dependent(const Case &c, int grid_rows, cudaStream_t stream, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions,
                      const int32_t *token_seq, const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters,
                      __nv_bfloat16 *out) {
    auto go = [&](auto prefetch, auto warps) {
        constexpr bool P = decltype(prefetch)::value;
        constexpr int W = decltype(warps)::value;
        auto clustered = base::decode_attention_kernel<KV, D, G, P, W, true>;
        auto plain = base::decode_attention_kernel<KV, D, G, P, W, false>;
        if (c.cluster && base::launch_decode_attention_kernel<true>(clustered, grid_rows, c.n_token, p.n_split, W, base::fd_prepare_shared<P, W>(clustered),
                                                                     false, stream, p, q, positions, token_seq, tables, k, v, partial, counters, out)) {
            return;
        }
        base::launch_decode_attention_kernel<false>(plain, grid_rows, c.n_token, p.n_split, W, base::fd_prepare_shared<P, W>(plain), false, stream, p, q,
                                                    positions, token_seq, tables, k, v, partial, counters, out);
    };
    using std::integral_constant;
    constexpr int S = base::kFdSmallWarps, W = base::kFdWarps;
    if (c.prefetch && c.small_warps) go(std::true_type{}, integral_constant<int, S>{});
    else if (c.prefetch) go(std::true_type{}, integral_constant<int, W>{});
    else if (c.small_warps) go(std::false_type{}, integral_constant<int, S>{});
    else go(std::false_type{}, integral_constant<int, W>{});
}

// One form of the tensor-core kernel (bf16, no cluster) in blocks of W warps: PREFETCH, a ring of RING
// steps (knob attn_mma_ring; 0: register loads), copied early (attn_mma_ring_early). A form whose block
// does not fit shared memory (e.g. a ring of 4 at attn_fd_warps 8) is not instantiated.
template <int D, int G, bool PREFETCH, int RING, bool EARLY, int W>
void launch_mma_form(dim3 grid, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions, const int32_t *token_seq,
                     const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters, __nv_bfloat16 *out) {
    if constexpr (base::mma_fits<D, G, PREFETCH, RING, false, W>()) {
        const size_t shared = base::mma_prepare_shared<HP_DTYPE_BF16, D, G, PREFETCH, RING, EARLY, false, W>();
        base::decode_attention_mma_kernel<HP_DTYPE_BF16, D, G, PREFETCH, RING, EARLY, false, W>
            <<<grid, W * 32, shared>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
    } else {
        ADD_FAILURE() << "ring " << RING << " does not fit a block of " << W << " warps (ring_fits lets no such case through)";
    }
}

// A kernel compiled for clusters (CLUSTER true) in blocks of `warps` warps, its splits as one cluster,
// launched as forward.cu does; grid as the other launches' (kv head, token, split).
template <typename Kernel>
void launch_clustered(Kernel kernel, int warps, size_t shared_bytes, dim3 grid, const base::DecodeAttentionParams &p, const float *q,
                      const int32_t *positions, const int32_t *token_seq, const int32_t *tables, const void *k, const void *v, float *partial,
                      int32_t *counters, __nv_bfloat16 *out) {
    const bool launched = base::launch_decode_attention_kernel<true>(kernel, int(grid.x), int(grid.y), p.n_split, warps, shared_bytes,
                                                                     /*one_wave=*/false, cudaStream_t(0),
                                                                     p, q, positions, token_seq, tables, k, v, partial, counters, out);
    EXPECT_TRUE(launched) << "the H200 schedules clusters of " << p.n_split << " blocks";
}

// The CUDA-core kernel with its splits as one cluster (knob attn_fd_cluster).
template <hp_dtype KV, int D, int G, bool PREFETCH, int W>
void launch_cluster(dim3 grid, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions, const int32_t *token_seq,
                    const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters, __nv_bfloat16 *out) {
    auto kernel = base::decode_attention_kernel<KV, D, G, PREFETCH, W, true>;
    launch_clustered(kernel, W, base::fd_prepare_shared<PREFETCH, W>(kernel), grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
}

// The tensor-core kernel with its splits as one cluster (knob attn_mma_cluster).
template <hp_dtype KV, int D, int G, bool PREFETCH>
void launch_mma_cluster(dim3 grid, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions, const int32_t *token_seq,
                        const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters, __nv_bfloat16 *out) {
    constexpr int R = base::mma_ring<D>();
    constexpr bool E = HP_CUDA_ATTN_MMA_RING_EARLY;
    launch_clustered(base::decode_attention_mma_kernel<KV, D, G, PREFETCH, R, E, true>, base::kFdWarps, base::mma_prepare_shared<KV, D, G, PREFETCH, R, E, true>(),
                     grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
}

template <int D, int G, bool PREFETCH>
void launch_variant(bool mma, hp_dtype kv, dim3 grid, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions,
                    const int32_t *token_seq, const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters,
                    __nv_bfloat16 *out, bool small_warps, bool cluster, int ring = -1, bool ring_early = false) {
    if constexpr (D >= 64 && !PREFETCH) {
        if (mma && ring >= 0) {
            ASSERT_EQ(kv, HP_DTYPE_BF16) << "ring cases are bf16";
            auto go = [&](auto ring_steps, auto early) {
                launch_mma_form<D, G, false, decltype(ring_steps)::value, decltype(early)::value, base::kFdWarps>(grid, p, q, positions, token_seq,
                                                                                                                 tables, k, v, partial, counters, out);
            };
            using F = std::false_type;
            using T = std::true_type;
            if (ring == 0) go(std::integral_constant<int, 0>{}, F{});
            else if (ring == 2) ring_early ? go(std::integral_constant<int, 2>{}, T{}) : go(std::integral_constant<int, 2>{}, F{});
            else if (ring == 3) ring_early ? go(std::integral_constant<int, 3>{}, T{}) : go(std::integral_constant<int, 3>{}, F{});
            else if (ring == 4) ring_early ? go(std::integral_constant<int, 4>{}, T{}) : go(std::integral_constant<int, 4>{}, F{});
            else FAIL() << "ring " << ring;
            return;
        }
    }
    if constexpr (D >= 64) {
        if (cluster && mma) {
            if (kv == HP_DTYPE_BF16) launch_mma_cluster<HP_DTYPE_BF16, D, G, PREFETCH>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
            else launch_mma_cluster<HP_DTYPE_F16, D, G, PREFETCH>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
            return;
        }
    }
    if (cluster) {
        constexpr int W = base::kFdSmallWarps;
        if (small_warps && kv == HP_DTYPE_BF16) launch_cluster<HP_DTYPE_BF16, D, G, PREFETCH, W>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
        else if (small_warps) launch_cluster<HP_DTYPE_F16, D, G, PREFETCH, W>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
        else if (kv == HP_DTYPE_BF16) launch_cluster<HP_DTYPE_BF16, D, G, PREFETCH, base::kFdWarps>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
        else launch_cluster<HP_DTYPE_F16, D, G, PREFETCH, base::kFdWarps>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
        return;
    }
    if constexpr (!PREFETCH) {
        if (!mma && ring >= 0 && !small_warps) {  // the CUDA-core kernel with a given ring (knob attn_fd_ring)
            ASSERT_EQ(kv, HP_DTYPE_BF16) << "ring cases are bf16";
            auto go = [&](auto ring_steps) {
                constexpr int R = decltype(ring_steps)::value, W = base::kFdWarps;
                // A ring that does not fit this build's blocks (e.g. attn_fd_warps 8) is not instantiated.
                if constexpr (base::fd_ring_bytes<false, W, R>() + sizeof(base::FdShared<D, G, W>) +
                                  base::fd_scatter_bytes<HP_CUDA_ATTN_FD_SCATTER_SCORES, W, G, D / 8>() <=
                              232448) {
                    auto kernel = base::decode_attention_kernel<HP_DTYPE_BF16, D, G, false, W, false, R>;
                    kernel<<<grid, W * 32, base::fd_prepare_shared<false, W, R>(kernel)>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
                } else {
                    ADD_FAILURE() << "ring " << R << " does not fit a block of this build (ring_fits lets no such case through)";
                }
            };
            if (ring == 0) go(std::integral_constant<int, 0>{});
            else if (ring == 2) go(std::integral_constant<int, 2>{});
            else if (ring == 3) go(std::integral_constant<int, 3>{});
            else if (ring == 4) go(std::integral_constant<int, 4>{});
            else FAIL() << "ring " << ring;
            return;
        }
    }
    // The build's knob attn_fd_ring gives the variants without PREFETCH a ring (fd_prepare_shared).
    if (small_warps) {
        constexpr int W = base::kFdSmallWarps;
        if (kv == HP_DTYPE_BF16) {
            auto kernel = base::decode_attention_kernel<HP_DTYPE_BF16, D, G, PREFETCH, W>;
            kernel<<<grid, W * 32, base::fd_prepare_shared<PREFETCH, W>(kernel)>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
        } else {
            auto kernel = base::decode_attention_kernel<HP_DTYPE_F16, D, G, PREFETCH, W>;
            kernel<<<grid, W * 32, base::fd_prepare_shared<PREFETCH, W>(kernel)>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
        }
        return;
    }
    if constexpr (D >= 64) {
        if (mma && kv == HP_DTYPE_BF16) {
            const size_t shared = base::mma_prepare_shared<HP_DTYPE_BF16, D, G, PREFETCH>();  // knob attn_mma_ring's ring
            base::decode_attention_mma_kernel<HP_DTYPE_BF16, D, G, PREFETCH>
                <<<grid, base::kFdWarps * 32, shared>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
            return;
        }
        if (mma) {
            const size_t shared = base::mma_prepare_shared<HP_DTYPE_F16, D, G, PREFETCH>();
            base::decode_attention_mma_kernel<HP_DTYPE_F16, D, G, PREFETCH>
                <<<grid, base::kFdWarps * 32, shared>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
            return;
        }
    }
    constexpr int W = base::kFdWarps;
    if (kv == HP_DTYPE_BF16) {
        auto kernel = base::decode_attention_kernel<HP_DTYPE_BF16, D, G, PREFETCH>;
        kernel<<<grid, W * 32, base::fd_prepare_shared<PREFETCH, W>(kernel)>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
    } else {
        auto kernel = base::decode_attention_kernel<HP_DTYPE_F16, D, G, PREFETCH>;
        kernel<<<grid, W * 32, base::fd_prepare_shared<PREFETCH, W>(kernel)>>>(p, q, positions, token_seq, tables, k, v, partial, counters, out);
    }
}

// Case::wide: the tensor-core kernel in blocks of kMmaWideWarps warps (bf16), PREFETCH or not, the latter
// through a ring of 2 steps where Case::ring >= 2 (its first copied before the wait where the token is
// alone: attn_mma_ring_early), else with register loads.
template <int D, int G>
void launch_wide(const Case &c, dim3 grid, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions, const int32_t *token_seq,
                 const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters, __nv_bfloat16 *out) {
    constexpr int W = base::kMmaWideWarps;
    ASSERT_EQ(c.kv_dtype, HP_DTYPE_BF16) << "8-warp cases are bf16";
    if (c.prefetch) launch_mma_form<D, G, true, 0, true, W>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
    else if (c.ring >= 2) launch_mma_form<D, G, false, 2, true, W>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
    else launch_mma_form<D, G, false, 0, true, W>(grid, p, q, positions, token_seq, tables, k, v, partial, counters, out);
}

template <int D, int G>
void launch(bool prefetch, bool mma, hp_dtype kv, dim3 grid, const base::DecodeAttentionParams &p, const float *q, const int32_t *positions,
            const int32_t *token_seq, const int32_t *tables, const void *k, const void *v, float *partial, int32_t *counters,
            __nv_bfloat16 *out, bool small_warps, bool cluster, int ring = -1, bool ring_early = false) {
    if (prefetch) launch_variant<D, G, true>(mma, kv, grid, p, q, positions, token_seq, tables, k, v, partial, counters, out, small_warps, cluster);
    else launch_variant<D, G, false>(mma, kv, grid, p, q, positions, token_seq, tables, k, v, partial, counters, out, small_warps, cluster, ring, ring_early);
}

// Runs case c on inputs drawn from `seed` and checks the outputs against float64 host math; `bits`
// (optional) gets the outputs' bits (the same seed gives the same inputs). Without host_math the
// outputs are only read, for a caller that compares them bit for bit with a run that had it (the
// host math is most of a large case's time).
void run_case(const Case &c, uint32_t seed, std::vector<uint16_t> *bits = nullptr, bool host_math = true) {
    SCOPED_TRACE(describe(c));
    std::mt19937 rng(seed);
    const int block_tokens = c.block_tokens, d = c.d_head, group = c.n_head / c.n_head_kv;
    // Sequences: most tokens alone in their sequence; every fifth token shares the previous one's
    // sequence at the next position (a prefill's layout). A single token (a batch-1 decode step) holds
    // max_length positions; several take the special lengths first, then random ones.
    std::vector<int32_t> token_seq(size_t(c.n_token)), positions(size_t(c.n_token));
    std::vector<int> lengths;  // per sequence: positions held
    const int special[] = {1, 2, 15, 16, 17, 31, 33, 255, c.max_length};
    std::uniform_int_distribution<int> any_length(1, c.max_length);
    for (int t = 0; t < c.n_token; ++t) {
        if (!c.alone && t > 0 && t % 5 == 4 && positions[size_t(t - 1)] + 2 <= c.max_length) {
            token_seq[size_t(t)] = token_seq[size_t(t - 1)];
            positions[size_t(t)] = positions[size_t(t - 1)] + 1;
            lengths.back() = positions[size_t(t)] + 1;
            continue;
        }
        const int length = c.n_token == 1 ? c.max_length : t < int(std::size(special)) ? std::min(special[t], c.max_length) : any_length(rng);
        token_seq[size_t(t)] = int32_t(lengths.size());
        positions[size_t(t)] = length - 1;
        lengths.push_back(length);
    }
    const int n_seq = int(lengths.size()), max_blocks = (c.max_length + block_tokens - 1) / block_tokens;
    int n_block = 0;
    for (int length : lengths) n_block += (length + block_tokens - 1) / block_tokens;
    n_block += 3;  // blocks no sequence uses
    std::vector<int32_t> order(static_cast<size_t>(n_block));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> tables(size_t(n_seq) * max_blocks, -1);
    int next = 0;
    for (int s = 0; s < n_seq; ++s) {
        for (int b = 0; b < (lengths[size_t(s)] + block_tokens - 1) / block_tokens; ++b) tables[size_t(s) * max_blocks + b] = order[size_t(next++)];
    }
    const size_t row_width = size_t(c.n_head_kv) * d, cache_elements = size_t(n_block) * block_tokens * row_width;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> k_bits(cache_elements), v_bits(cache_elements);
    std::vector<float> k_value(cache_elements), v_value(cache_elements);
    for (size_t i = 0; i < cache_elements; ++i) {
        const float kf = normal(rng), vf = normal(rng);
        k_bits[i] = c.kv_dtype == HP_DTYPE_BF16 ? to_bf16_bits(kf) : to_f16_bits(kf);
        v_bits[i] = c.kv_dtype == HP_DTYPE_BF16 ? to_bf16_bits(vf) : to_f16_bits(vf);
        k_value[i] = c.kv_dtype == HP_DTYPE_BF16 ? from_bf16_bits(k_bits[i]) : from_f16_bits(k_bits[i]);
        v_value[i] = c.kv_dtype == HP_DTYPE_BF16 ? from_bf16_bits(v_bits[i]) : from_f16_bits(v_bits[i]);
    }
    // Cache rows no sequence holds (past each sequence's length, unused blocks) are NaN: the kernel
    // may read them (a step ends inside a paged block) but must not let them reach the output.
    {
        std::vector<char> used(size_t(n_block) * block_tokens, 0);
        for (int s = 0; s < n_seq; ++s) {
            for (int j = 0; j < lengths[size_t(s)]; ++j) used[size_t(tables[size_t(s) * max_blocks + j / block_tokens]) * block_tokens + j % block_tokens] = 1;
        }
        for (size_t slot = 0; slot < used.size(); ++slot) {
            if (used[slot]) continue;
            std::fill_n(k_bits.begin() + std::ptrdiff_t(slot * row_width), row_width, uint16_t(0x7fff));
            std::fill_n(v_bits.begin() + std::ptrdiff_t(slot * row_width), row_width, uint16_t(0x7fff));
        }
    }
    std::vector<float> q(size_t(c.n_token) * c.n_head * d);
    for (float &value : q) value = 2.0f * normal(rng);  // peaked softmaxes as well as flat ones
    // Case::pdl_writer: every run sets q and the tokens' newest rows to NaN on the device, then
    // late_writer_kernel writes them (q from q_from_d, the rows from newest_k, newest_v at newest_row).
    std::vector<uint16_t> newest_k, newest_v;
    std::vector<int64_t> newest_row;  // in elements
    if (c.pdl_writer) {
        for (int t = 0; t < c.n_token; ++t) {
            const int at = positions[size_t(t)];
            const int64_t row = (int64_t(tables[size_t(token_seq[size_t(t)]) * max_blocks + at / block_tokens]) * block_tokens + at % block_tokens) *
                                int64_t(row_width);
            newest_row.push_back(row);
            newest_k.insert(newest_k.end(), k_bits.begin() + row, k_bits.begin() + row + std::ptrdiff_t(row_width));
            newest_v.insert(newest_v.end(), v_bits.begin() + row, v_bits.begin() + row + std::ptrdiff_t(row_width));
        }
    }

    base::DecodeAttentionParams p{c.n_head, c.n_head_kv, group, float(M_LOG2E) / std::sqrt(float(d)), block_tokens,
                                    block_tokens == 16 ? 4 : -1, max_blocks, 1};
    p.head_split = c.head_split;
    const int block_group = group / c.head_split, grid_rows = c.n_head_kv * c.head_split;  // as forward.cu's launcher
    const int capacity_split = 64;
    p.n_split = c.n_split > 0 ? c.n_split
                : c.wide  ? base::decode_attention_splits(c.n_token, grid_rows, d, max_blocks * block_tokens, capacity_split, base::kMmaWideWarps,
                                                          base::mma_wide_target_blocks())
                          : base::decode_attention_splits(c.n_token, grid_rows, d, max_blocks * block_tokens, capacity_split,
                                                          c.small_warps ? base::kFdSmallWarps : base::kFdWarps);
    // seq_token_start as forward.cu hands it where n_seq == n_token (early KV loads, knob
    // attn_fd_early_kv): the sequences' first tokens, padded with empty sequences up to n_token, so
    // that with shared sequences some tokens are alone and some are not.
    std::vector<int32_t> seq_token_start(size_t(c.n_token) + 1, c.n_token);
    for (int t = c.n_token - 1; t >= 0; --t) seq_token_start[size_t(token_seq[size_t(t)])] = t;
    int32_t *seq_token_start_d = upload(seq_token_start);
    p.seq_token_start = seq_token_start_d;
    float *q_d = upload(q);
    int32_t *positions_d = upload(positions), *token_seq_d = upload(token_seq), *tables_d = upload(tables);
    uint16_t *k_d = upload(k_bits), *v_d = upload(v_bits);
    float *partial_d = nullptr;
    int32_t *counters_d = upload(std::vector<int32_t>(size_t(c.n_token) * grid_rows, 0));
    const size_t n_out = size_t(c.n_token) * c.n_head * d;
    __nv_bfloat16 *out_d = reinterpret_cast<__nv_bfloat16 *>(upload(std::vector<uint16_t>(n_out, 0x7fc0)));  // bf16 NaN
    CHECK_CUDA(cudaMalloc(&partial_d, size_t(c.n_token) * c.n_head * p.n_split * (d + 2) * sizeof(float)));
    ASSERT_TRUE(q_d && positions_d && token_seq_d && tables_d && k_d && v_d && counters_d && out_d);
    if (seed % 2 == 1) {  // L2 prefetch ranges before the wait (as forward.cu's plan hands it): results unchanged
        p.prefetch.ptr[0] = reinterpret_cast<const char *>(k_d) + 6;
        p.prefetch.bytes[0] = uint32_t(k_bits.size() * 2 - 6);
        p.prefetch.ptr[1] = v_d;
        p.prefetch.bytes[1] = uint32_t(v_bits.size() * 2);
    }
    const dim3 grid(grid_rows, c.n_token, p.n_split);
    float *q_from_d = nullptr;
    uint16_t *newest_k_d = nullptr, *newest_v_d = nullptr;
    int64_t *newest_row_d = nullptr;
    cudaStream_t stream = nullptr;
    if (c.pdl_writer) {
        q_from_d = upload(q);
        newest_k_d = upload(newest_k);
        newest_v_d = upload(newest_v);
        newest_row_d = upload(newest_row);
        ASSERT_TRUE(q_from_d && newest_k_d && newest_v_d && newest_row_d);
        CHECK_CUDA(cudaDeviceSynchronize());  // the uploads (pageable copies) have landed before the non-blocking stream reads them
        CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    auto run_dependent = [&] {
        // Every run starts from NaN in q and the newest rows (0xff bytes: NaN in f32, bf16 and f16), also the
        // second, whose launches find their kernels loaded and their cluster sizes asked, so that there the
        // host's launch of the attention surely falls inside the writer's spin.
        cudaMemsetAsync(q_d, 0xff, q.size() * sizeof(float), stream);
        for (const int64_t row : newest_row) {
            cudaMemsetAsync(k_d + row, 0xff, row_width * 2, stream);
            cudaMemsetAsync(v_d + row, 0xff, row_width * 2, stream);
        }
        late_writer_kernel<<<1, 256, 0, stream>>>(q_from_d, q_d, int(q.size()), newest_k_d, newest_v_d, newest_row_d, int(newest_row.size()),
                                                  int(row_width), k_d, v_d, 1000000ull);
        auto go = [&](auto d_head, auto g) {
            constexpr int D = decltype(d_head)::value, G = decltype(g)::value;
            if (c.kv_dtype == HP_DTYPE_BF16)
                launch_dependent<HP_DTYPE_BF16, D, G>(c, grid_rows, stream, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d);
            else
                launch_dependent<HP_DTYPE_F16, D, G>(c, grid_rows, stream, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d);
        };
        using std::integral_constant;
        if (d == 64 && block_group <= 4) go(integral_constant<int, 64>{}, integral_constant<int, 4>{});
        else if (d == 64) go(integral_constant<int, 64>{}, integral_constant<int, 8>{});
        else if (d == 128 && block_group <= 4) go(integral_constant<int, 128>{}, integral_constant<int, 4>{});
        else if (d == 128) go(integral_constant<int, 128>{}, integral_constant<int, 8>{});
        else ADD_FAILURE() << "pdl_writer cases: d_head 64 or 128";
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    };
    auto run = [&] {
        if (c.pdl_writer) {
            run_dependent();
            return;
        }
        if (c.wide) {
            if (d == 64 && block_group <= 4) launch_wide<64, 4>(c, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d);
            else if (d == 64) launch_wide<64, 8>(c, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d);
            else if (d == 128 && block_group <= 4) launch_wide<128, 4>(c, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d);
            else if (d == 128) launch_wide<128, 8>(c, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d);
            else ADD_FAILURE() << "8-warp cases: d_head 64 or 128";
            return;
        }
        if (d == 32 && block_group <= 4) launch<32, 4>(c.prefetch, c.mma, c.kv_dtype, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d, c.small_warps, c.cluster, c.ring, c.ring_early);
        else if (d == 32) launch<32, 8>(c.prefetch, c.mma, c.kv_dtype, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d, c.small_warps, c.cluster, c.ring, c.ring_early);
        else if (d == 64 && block_group <= 4) launch<64, 4>(c.prefetch, c.mma, c.kv_dtype, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d, c.small_warps, c.cluster, c.ring, c.ring_early);
        else if (d == 64) launch<64, 8>(c.prefetch, c.mma, c.kv_dtype, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d, c.small_warps, c.cluster, c.ring, c.ring_early);
        else if (block_group <= 4) launch<128, 4>(c.prefetch, c.mma, c.kv_dtype, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d, c.small_warps, c.cluster, c.ring, c.ring_early);
        else launch<128, 8>(c.prefetch, c.mma, c.kv_dtype, grid, p, q_d, positions_d, token_seq_d, tables_d, k_d, v_d, partial_d, counters_d, out_d, c.small_warps, c.cluster, c.ring, c.ring_early);
    };
    run();
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> got(n_out), again(n_out);
    CHECK_CUDA(cudaMemcpy(got.data(), out_d, n_out * 2, cudaMemcpyDeviceToHost));

    int bad = 0;
    std::vector<double> score, weight;
    for (int t = 0; host_math && t < c.n_token; ++t) {
        const int length = positions[size_t(t)] + 1;
        const int32_t *table = tables.data() + size_t(token_seq[size_t(t)]) * max_blocks;
        for (int h = 0; h < c.n_head; ++h) {
            const int g = h / group;
            score.assign(size_t(length), 0.0);
            double m = -INFINITY, v_max = 0;
            for (int j = 0; j < length; ++j) {
                const size_t row = (size_t(table[j / block_tokens]) * block_tokens + j % block_tokens) * row_width + size_t(g) * d;
                double dot = 0;
                for (int i = 0; i < d; ++i) dot += double(q[(size_t(t) * c.n_head + h) * d + i]) * k_value[row + i];
                score[size_t(j)] = dot / std::sqrt(double(d));
                m = std::max(m, score[size_t(j)]);
                for (int i = 0; i < d; ++i) v_max = std::max(v_max, std::fabs(double(v_value[row + i])));
            }
            double total = 0;
            for (double &s : score) total += (s = std::exp(s - m));
            for (int i = 0; i < d; ++i) {
                double expected = 0;
                for (int j = 0; j < length; ++j) {
                    const size_t row = (size_t(table[j / block_tokens]) * block_tokens + j % block_tokens) * row_width + size_t(g) * d;
                    expected += score[size_t(j)] * v_value[row + i];
                }
                expected /= total;
                const double got_value = from_bf16_bits(got[(size_t(t) * c.n_head + h) * d + i]);
                const double bound = std::ldexp(std::fabs(expected), -8) + 1e-4 * v_max;
                if (!(std::fabs(got_value - expected) <= bound) && bad++ < 5) {
                    ADD_FAILURE() << "token " << t << " (length " << length << ") head " << h << " element " << i << ": got " << got_value
                                  << ", expected " << expected << " (bound " << bound << ")";
                }
            }
        }
    }
    EXPECT_EQ(bad, 0) << bad << " of " << n_out << " outputs off";
    run();
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(again.data(), out_d, n_out * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(got.data(), again.data(), n_out * 2), 0) << "a second run differs";
    std::vector<int32_t> counters(size_t(c.n_token) * grid_rows);
    CHECK_CUDA(cudaMemcpy(counters.data(), counters_d, counters.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), std::ptrdiff_t(counters.size())) << "split counters not reset";
    for (void *ptr : {static_cast<void *>(q_d), static_cast<void *>(positions_d), static_cast<void *>(token_seq_d), static_cast<void *>(tables_d),
                      static_cast<void *>(k_d), static_cast<void *>(v_d), static_cast<void *>(partial_d), static_cast<void *>(counters_d),
                      static_cast<void *>(out_d), static_cast<void *>(seq_token_start_d), static_cast<void *>(q_from_d),
                      static_cast<void *>(newest_k_d), static_cast<void *>(newest_v_d), static_cast<void *>(newest_row_d)}) {
        cudaFree(ptr);
    }
    if (stream) cudaStreamDestroy(stream);
    if (bits) *bits = got;
}

// llama-3.2-1b's attention shape (32 heads, 8 KV heads, d_head 64) at decode batches 1-64, each
// with and without the K/V prefetch, on the CUDA-core kernel or (mma) the tensor-core one.
void run_llama1b_cases(bool mma) {
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 3, 8, 33, 64}) {
        for (bool prefetch : {false, true}) {
            Case c{n_token, 32, 8, 64};
            c.prefetch = prefetch;
            c.mma = mma;
            run_case(c, seed++);
            c.alone = true;  // a decode step: early KV loads where the kernel makes them
            if (n_token >= 8) run_case(c, seed++);
        }
    }
}

TEST(CudaDecodeAttention, Llama1bShapeMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    run_llama1b_cases(false);
}

TEST(CudaDecodeAttention, SplitCountsMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_split : {1, 7, 64}) {
        run_case({3, 32, 8, 64, HP_DTYPE_BF16, n_split}, seed++);
        run_case({33, 32, 8, 64, HP_DTYPE_BF16, n_split, 300}, seed++);
    }
}

TEST(CudaDecodeAttention, GroupsAndHeadDimsMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    run_case({8, 4, 4, 64}, seed++);                   // group 1
    run_case({9, 6, 2, 64}, seed++);                   // group 3 (of at most 4)
    run_case({8, 32, 4, 128, HP_DTYPE_BF16}, seed++);  // group 8, d_head 128 (qwen3-30b-a3b)
    run_case({3, 16, 2, 64, HP_DTYPE_BF16, 5}, seed++);  // group 8, d_head 64
    run_case({5, 8, 2, 128, HP_DTYPE_F16}, seed++);    // f16 cache
    run_case({7, 4, 2, 32, HP_DTYPE_BF16, 0, 150}, seed++);  // d_head 32 (the tiny presets)
    run_case({4, 16, 2, 32, HP_DTYPE_BF16, 3, 100, true}, seed++);
    run_case({6, 32, 4, 128, HP_DTYPE_BF16, 9, 400, true}, seed++);
}

// The CUDA-core kernel with kFdSmallWarps warps per block (single-token steps, knob
// attn_fd_small_warps): qwen3-30b-a3b's batch-1 shape, split counts (its own, 1, 7, 64), groups 1/3/8,
// d_head 32/64/128, f16, blocks of 8 tokens, several tokens.
TEST(CudaDecodeAttention, SmallStepWarpsMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    const Case cases[] = {
        {1, 32, 4, 128, HP_DTYPE_BF16, 0, 1024, true},   // qwen3-30b-a3b batch 1
        {1, 32, 4, 128, HP_DTYPE_BF16, 0, 1025, true},   // one warp step past 16 splits of 8 warps: the newest row alone in a step
        {1, 32, 4, 128, HP_DTYPE_BF16, 0, 1003, true},   // the newest row in a step with older ones
        {1, 32, 4, 128, HP_DTYPE_BF16, 0, 1, true},      // the newest row alone
        {1, 32, 4, 128, HP_DTYPE_BF16, 1, 1024, true},
        {1, 32, 4, 128, HP_DTYPE_BF16, 7, 700, true},
        {1, 32, 4, 128, HP_DTYPE_BF16, 64, 1000, true},
        {1, 32, 8, 64, HP_DTYPE_BF16, 0, 1024, true},    // llama-3.2-1b batch 1
        {1, 32, 8, 64, HP_DTYPE_BF16, 0, 1025, true},
        {3, 4, 4, 64, HP_DTYPE_BF16, 0, 300, false},     // group 1
        {2, 6, 2, 32, HP_DTYPE_F16, 0, 150, true},       // group 3, d_head 32, f16
        {5, 16, 2, 128, HP_DTYPE_F16, 9, 400, false},    // group 8, f16
    };
    for (Case c : cases) {
        c.small_warps = true;
        run_case(c, seed++);
    }
    Case c{1, 32, 4, 128, HP_DTYPE_BF16, 0, 200, true};
    c.small_warps = true;
    c.block_tokens = 8;
    run_case(c, seed++);
}

// Case c through the last block's reduction (checked against host math), then with its splits as one
// cluster: the same bits.
void expect_cluster_matches_last_block(Case c, uint32_t seed) {
    std::vector<uint16_t> reference, clustered;
    c.cluster = false;
    run_case(c, seed, &reference);
    c.cluster = true;
    run_case(c, seed, &clustered, false);
    EXPECT_FALSE(reference.empty());
    EXPECT_TRUE(reference == clustered) << describe(c) << ", seed " << seed << ": outputs differ from the last block's reduction";
}

// Knobs attn_fd_cluster and attn_mma_cluster: the splits of a (token, kv head) as one cluster, adding
// each other's results through distributed shared memory. Same arithmetic in the same split order as
// the last block's reduction through L2: the outputs must be bit-identical to it (itself held to the
// host-math bound). Split counts 2 / 3 / 4 / 8 and 16 (a non-portable cluster), both warp counts, with
// and without the prefetch, llama-3.2-1b's (batch 1, 2, 8, and on the tensor cores 8, 16, 32) and
// qwen3-30b-a3b's shapes, d_head 32, f16, shared sequences.
TEST(CudaDecodeAttention, ClusteredSplitsMatchLastBlockReduction) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    Case cases[] = {
        {1, 32, 8, 64, HP_DTYPE_BF16, 8, 1024, true, false, 16, true, true},   // llama-3.2-1b batch 1
        {2, 32, 8, 64, HP_DTYPE_BF16, 8, 1024, false, false, 16, true, true},   // llama-3.2-1b batch 2 (attn_fd_small_max_tokens 2)
        {8, 32, 8, 64, HP_DTYPE_BF16, 8, 1024, false, false, 16, false, true},  // llama-3.2-1b batch 8
        {1, 32, 4, 128, HP_DTYPE_BF16, 16, 1024, true, false, 16, true, true},  // qwen3-30b-a3b batch 1, 16 splits
        {1, 32, 4, 128, HP_DTYPE_BF16, 16, 1025, true, false, 16, true, true},  // 129 warp steps of 8 positions
        {1, 32, 8, 64, HP_DTYPE_BF16, 8, 1025, true, false, 16, true, true},    // 65 warp steps of 16 positions
        {1, 32, 4, 128, HP_DTYPE_BF16, 8, 1000, true, false, 16, true, true},
        {5, 16, 2, 128, HP_DTYPE_F16, 3, 400, false, false, 16, false, false},  // f16, shared sequences
        {6, 4, 2, 32, HP_DTYPE_BF16, 2, 150, true, false, 8, true, false},      // d_head 32, blocks of 8 tokens
        {33, 32, 8, 64, HP_DTYPE_BF16, 8, 300, false, false, 16, false, true},
        // The tensor-core kernel (attn_mma_cluster):
        {32, 32, 8, 64, HP_DTYPE_BF16, 2, 1024, false, true, 16, false, true},  // llama-3.2-1b batch 32
        {32, 32, 8, 64, HP_DTYPE_BF16, 2, 1024, true, true, 16, false, true},   // the PREFETCH variant (under this build's register bound)
        {16, 32, 8, 64, HP_DTYPE_BF16, 4, 1024, true, true, 16, false, true},   // batch 16
        {8, 32, 8, 64, HP_DTYPE_BF16, 8, 1024, true, true, 8, false, true},     // batch 8, blocks of 8 tokens
        {5, 32, 4, 128, HP_DTYPE_BF16, 3, 500, false, true, 16, false, false},  // d_head 128, group 8, shared sequences
        {3, 16, 2, 128, HP_DTYPE_F16, 16, 700, true, true, 16, false, true},    // f16, 16 splits
    };
    // Fixed seeds (a failure reproduces) and a fresh one.
    for (uint32_t base : {20261201u, 7u, seed}) {
        uint32_t at = base;
        for (const Case &c : cases) expect_cluster_matches_last_block(c, at++);
    }
}

// Knob attn_fd_head_split (where the build's knob compiles it in): the CUDA-core kernel with each GQA
// group over 2 or 4 blocks (each a share of the query heads, reading the same K/V rows), against
// float64 host math through the last block's
// reduction (split counters per block row), and its splits in one cluster bit-identical to that:
// qwen3-30b-a3b's and llama-3.2-1b's batch-1 shapes (1024 and 1025 positions, the newest row in a step
// with older ones, a single position), both warp counts, two tokens, f16, blocks of 8 tokens.
TEST(CudaDecodeAttention, HeadSplitMatchesHostMathAndClusters) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    if (!base::kFdHeadSplit) GTEST_SKIP() << "built with attn_fd_head_split 1, which compiles the split out (test_cuda_attention_tail runs it)";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    struct Split {
        Case c;
        int head_split;
    };
    const Split cases[] = {
        {{1, 32, 4, 128, HP_DTYPE_BF16, 16, 1025, true, false, 16, true, true}, 2},  // qwen3-30b-a3b batch 1
        {{1, 32, 4, 128, HP_DTYPE_BF16, 16, 1024, true, false, 16, true, true}, 4},
        {{1, 32, 4, 128, HP_DTYPE_BF16, 8, 1003, true, false, 16, true, true}, 2},
        {{1, 32, 4, 128, HP_DTYPE_BF16, 4, 1, true, false, 16, true, true}, 2},
        {{1, 32, 8, 64, HP_DTYPE_BF16, 8, 1025, true, false, 16, true, true}, 2},    // llama-3.2-1b batch 1
        {{1, 32, 8, 64, HP_DTYPE_BF16, 8, 1024, true, false, 16, true, true}, 4},
        {{2, 32, 8, 64, HP_DTYPE_BF16, 8, 1024, false, false, 16, true, true}, 2},   // two tokens, no prefetch
        {{1, 16, 2, 128, HP_DTYPE_F16, 3, 700, true, false, 8, false, true}, 2},     // f16, blocks of 8 tokens, 4 warps
    };
    for (uint32_t base : {20261206u, seed}) {
        uint32_t at = base;
        for (const Split &split : cases) {
            Case c = split.c;
            c.head_split = split.head_split;
            expect_cluster_matches_last_block(c, at++);
        }
    }
}

// The one-wave rule of forward.cu's small steps: a cluster launch asked to fit at once is refused (nothing
// launched; the plugin then takes the last-block reduction) where the device holds fewer of its clusters
// than it needs, here one more than cudaOccupancyMaxActiveClusters allows for qwen3-30b-a3b's batch-1
// kernel (clusters of 16). Its buffers are null: a launch would fault.
TEST(CudaDecodeAttention, OneWaveRefusesClustersThatDoNotFitAtOnce) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    constexpr int W = base::kFdSmallWarps, kSplit = 16;
    auto kernel = base::decode_attention_kernel<HP_DTYPE_BF16, 128, 8, true, W, true>;
    const int fit = base::fd_max_clusters(kernel, kSplit, W, 0);
    if (fit <= 0) GTEST_SKIP() << "this device does not schedule clusters of " << kSplit << " blocks of " << W << " warps";
    std::printf("clusters of %d blocks of %d warps held at once: %d\n", kSplit, W, fit);
    base::DecodeAttentionParams p{32, 4, 8, 0.1f, 16, 4, 65, kSplit};
    const bool launched = base::launch_decode_attention_kernel<true>(kernel, fit + 1, 1, kSplit, W, 0, /*one_wave=*/true, cudaStream_t(0), p,
                                                                     static_cast<const float *>(nullptr), static_cast<const int32_t *>(nullptr),
                                                                     static_cast<const int32_t *>(nullptr), static_cast<const int32_t *>(nullptr),
                                                                     static_cast<const void *>(nullptr), static_cast<const void *>(nullptr),
                                                                     static_cast<float *>(nullptr), static_cast<int32_t *>(nullptr),
                                                                     static_cast<__nv_bfloat16 *>(nullptr));
    EXPECT_FALSE(launched) << fit + 1 << " clusters launched where " << fit << " fit at once";
    CHECK_CUDA(cudaDeviceSynchronize());
}

// Whether a ring of `ring` steps and the block's state fit a block of this build (227 KB) for case c
// (e.g. not ring 4 at d_head 128 with attn_fd_warps 8); the kernels static_assert the same.
bool ring_fits(const Case &c, int ring) {
    const bool wide = c.n_head / c.n_head_kv > 4;
    const size_t state = c.d_head == 64 ? (wide ? sizeof(base::FdShared<64, 8>) : sizeof(base::FdShared<64, 4>))
                                        : (wide ? sizeof(base::FdShared<128, 8>) : sizeof(base::FdShared<128, 4>));
    const int chunks = c.mma ? (c.d_head == 64 ? base::mma_chunks<64>() : base::mma_chunks<128>()) : 2 * base::kFdUnroll;
    constexpr int W = base::kFdWarps, S = HP_CUDA_ATTN_FD_SCATTER_SCORES;  // the CUDA-core kernel's scores' hand-out
    const size_t scatter = c.mma ? 0
                           : c.d_head == 64 ? (wide ? base::fd_scatter_bytes<S, W, 8, 8>() : base::fd_scatter_bytes<S, W, 4, 8>())
                                            : (wide ? base::fd_scatter_bytes<S, W, 8, 16>() : base::fd_scatter_bytes<S, W, 4, 16>());
    return size_t(ring) * base::kFdWarps * 32 * chunks * 16 + state + scatter <= 232448;
}

// Knob attn_fd_ring: the CUDA-core kernel's K/V through a shared-memory ring of 2, 3 or 4 steps per
// warp, bit-identical to its register loads (ring 0), decode steps and shared sequences, paged
// blocks of 16 and 8 tokens.
void ring_cuda_cores(Case c, uint32_t seed) {
    c.mma = false;
    c.ring_early = false;
    for (bool alone : {true, false}) {
        for (int block_tokens : {16, 8}) {
            c.alone = alone;
            c.block_tokens = block_tokens;
            c.ring = 0;
            std::vector<uint16_t> registers;
            run_case(c, seed, &registers);
            for (int ring : {2, 3, 4}) {
                if (!ring_fits(c, ring)) continue;
                c.ring = ring;
                std::vector<uint16_t> ringed;
                run_case(c, seed, &ringed, false);
                EXPECT_FALSE(ringed.empty());
                EXPECT_TRUE(registers == ringed) << describe(c) << ", seed " << seed << ": outputs differ from the register loads'";
            }
            ++seed;
        }
    }
}

// Limit: the kernels here are plain launches, so griddepcontrol.wait returns at once and the newest
// row is in memory before they start; the early copies' rule (never the newest row) is checked by
// these cases only in that the outputs equal the late copies'. Knobs attn_mma_ring, attn_mma_ring_early (and attn_fd_ring, below 16 tokens): the tensor-core kernel's K/V through a shared-memory ring
// of 2, 3 or 4 steps per warp (cp.async), its first steps before the wait or after. The same chunks
// reach the same registers, so the outputs must be bit-identical to the register loads' (ring 0),
// which are held to the host-math bound: llama-3.2-1b's and qwen3-30b-a3b's shapes at batches 8-64, decode steps
// (every token alone: the early copies) and shared sequences, split counts 1 (16 steps a warp),
// the plugin's, 7 and 64 (empty splits), paged blocks of 8 tokens, short sequences.
TEST(CudaDecodeAttentionMma, SharedMemoryRingMatchesRegisterLoads) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    Case cases[] = {
        {32, 32, 8, 64, HP_DTYPE_BF16, 0, 1024},   // llama-3.2-1b batch 32
        {64, 32, 8, 64, HP_DTYPE_BF16, 1, 1024},   // batch 64: one split, 16 steps a warp
        {8, 32, 8, 64, HP_DTYPE_BF16, 7, 1024},
        {33, 32, 8, 64, HP_DTYPE_BF16, 64, 300},   // more splits than steps
        {32, 32, 4, 128, HP_DTYPE_BF16, 0, 1024},  // qwen3-30b-a3b batch 32
        {9, 16, 2, 128, HP_DTYPE_BF16, 3, 400},
    };
    for (uint32_t base : {20261205u, seed}) {
        uint32_t at = base;
        for (Case c : cases) {
            c.mma = true;
            if (c.n_token < 16) ring_cuda_cores(c, at);
            for (bool alone : {true, false}) {
                for (int block_tokens : {16, 8}) {
                    c.alone = alone;
                    c.block_tokens = block_tokens;
                    c.ring = 0;
                    c.ring_early = false;
                    std::vector<uint16_t> registers;
                    run_case(c, at, &registers);
                    for (int ring : {2, 3, 4}) {
                        if (!ring_fits(c, ring)) continue;
                        for (bool early : {false, true}) {
                            c.ring = ring;
                            c.ring_early = early;
                            std::vector<uint16_t> ringed;
                            run_case(c, at, &ringed, false);
                            EXPECT_FALSE(ringed.empty());
                            EXPECT_TRUE(registers == ringed) << describe(c) << ", seed " << at << ": outputs differ from the register loads'";
                        }
                    }
                    ++at;
                }
            }
        }
    }
}

// Knob attn_mma_warps8: the tensor-core kernel in blocks of 8 warps, with the splits forward.cu gives
// them (one at llama-3.2-1b batch 32 and 64, several below), PREFETCH, plain and through the ring, against
// float64 host math: llama-3.2-1b's and qwen3-30b-a3b's shapes, decode steps and shared sequences, paged
// blocks of 8 tokens, short sequences, given split counts (7, and 64: empty splits).
TEST(CudaDecodeAttentionMma, EightWarpBlocksMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    Case cases[] = {
        {32, 32, 8, 64, HP_DTYPE_BF16, 0, 1024, true},  // llama-3.2-1b batch 32, PREFETCH: one split
        {32, 32, 8, 64, HP_DTYPE_BF16, 0, 1024},        // the same without PREFETCH
        {16, 32, 8, 64, HP_DTYPE_BF16, 0, 1024, true},  // batch 16: two splits
        {64, 32, 8, 64, HP_DTYPE_BF16, 0, 700},         // batch 64
        {8, 32, 8, 64, HP_DTYPE_BF16, 7, 1024},         // batch 8, 7 splits
        {33, 32, 8, 64, HP_DTYPE_BF16, 64, 300, true},  // more splits than steps
        {24, 32, 4, 128, HP_DTYPE_BF16, 0, 1024},       // qwen3-30b-a3b (group 8, d_head 128)
        {9, 16, 2, 128, HP_DTYPE_BF16, 3, 400, true},
        {20, 6, 2, 64, HP_DTYPE_BF16, 0, 500},          // group 3
    };
    for (Case c : cases) {
        c.mma = true;
        c.wide = true;
        for (bool alone : {true, false}) {
            for (int block_tokens : {16, 8}) {
                c.alone = alone;
                c.block_tokens = block_tokens;
                c.ring = -1;
                run_case(c, seed++);
                if (!c.prefetch && c.d_head == 64) {
                    c.ring = 2;  // the ring, its first steps before the wait where the token is alone
                    run_case(c, seed++);
                }
            }
        }
    }
}

// Knobs attn_mma_warps8 at 1 and attn_mma_one_wave (host code only): at d_head 64 and groups up to 4,
// the blocks of a tensor-core step fit one wave of the device where one split's do, and 8-warp blocks
// with one split are taken where they fit a wave and give as many warps as the 4-warp blocks. Without
// a known wave, 8-warp blocks exactly where they leave one split by attn_fd_target_blocks halved and
// blocks of attn_fd_warps would need more. With the build's other defaults and llama-3.2-1b's 8 kv heads
// and 1k-token KV on 132 SMs, those are 23-33 and 32-63 tokens.
TEST(CudaDecodeAttentionMma, BlocksOneWaveHolds) {
    if (HP_CUDA_ATTN_MMA_WARPS8 != 1 || !HP_CUDA_ATTN_MMA_ONE_WAVE || base::kFdWarps != 4 || HP_CUDA_ATTN_FD_TARGET_BLOCKS != 512 ||
        HP_CUDA_ATTN_FD_MIN_STEPS != 1 || !base::mma_wide_compiled(64))
        GTEST_SKIP() << "the shapes below assume the default attention knobs";
    const base::MmaWave h100{528, 264};  // 132 SMs: 4 blocks of 4 warps an SM, 2 of 8 (128 registers)
    auto blocks = [](int n_token, base::MmaWave wave, int n_head_kv = 8, int d_head = 64, int group = 4, int max_positions = 1024) {
        return base::mma_blocks(n_token, n_head_kv, d_head, group, max_positions, 8192 / n_token, wave);
    };
    struct Want {
        int n_token, warps, n_split;
    };
    for (const Want &want : {Want{8, 4, 8}, Want{16, 4, 4}, Want{17, 4, 3}, Want{20, 4, 3}, Want{22, 4, 3}, Want{23, 8, 1}, Want{28, 8, 1},
                             Want{32, 8, 1}, Want{33, 8, 1}, Want{34, 4, 1}, Want{48, 4, 1}, Want{64, 4, 1}, Want{128, 4, 1}}) {
        const base::MmaBlocks got = blocks(want.n_token, h100);
        EXPECT_EQ(got.warps, want.warps) << want.n_token << " tokens";
        EXPECT_EQ(got.n_split, want.n_split) << want.n_token << " tokens";
    }
    for (int n_token = 1; n_token <= 66; ++n_token) {  // one wave wherever one split fits one
        const base::MmaBlocks got = blocks(n_token, h100);
        EXPECT_LE(n_token * 8 * got.n_split, got.warps == base::kMmaWideWarps ? h100.wide_blocks : h100.blocks) << n_token << " tokens";
    }
    EXPECT_EQ(blocks(20, {264, 132}).n_split, 1);  // a device of half the SMs: one split of 4-warp blocks at 20 tokens,
    EXPECT_EQ(blocks(20, {264, 132}).warps, base::kFdWarps);
    EXPECT_EQ(blocks(12, {264, 132}).warps, base::kMmaWideWarps);  // and at 12 one of 8-warp blocks
    EXPECT_EQ(blocks(12, {264, 132}).n_split, 1);
    for (int n_token : {1, 8, 16, 24, 31, 64, 65, 128}) EXPECT_EQ(blocks(n_token, {}).warps, base::kFdWarps) << n_token << " tokens, no wave";
    for (int n_token : {32, 33, 48, 63}) {
        const base::MmaBlocks got = blocks(n_token, {});
        EXPECT_EQ(got.warps, base::kMmaWideWarps) << n_token << " tokens, no wave";
        EXPECT_EQ(got.n_split, 1) << n_token << " tokens, no wave";
    }
    // Other shapes keep attn_fd_target_blocks' splits in 4-warp blocks.
    const base::MmaBlocks qwen = blocks(32, h100, 4, 128, 8);  // qwen3-30b-a3b: d_head 128, group 8 (not measured)
    EXPECT_EQ(qwen.warps, base::kFdWarps);
    EXPECT_EQ(qwen.n_split, base::decode_attention_splits(32, 4, 128, 1024, 8192 / 32));
    EXPECT_EQ(blocks(32, h100, 8, 64, 8).n_split, 2);  // group above 4: 512 blocks
    EXPECT_EQ(blocks(32, h100, 8, 64, 4, 16).n_split, 1);  // one 16-position step: one split whatever the blocks
}

// The tensor-core kernel over the same cases.
TEST(CudaDecodeAttentionMma, Llama1bShapeMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    run_llama1b_cases(true);
}

TEST(CudaDecodeAttentionMma, SplitCountsAndBlocksMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_split : {1, 7, 64}) {
        Case c{3, 32, 8, 64, HP_DTYPE_BF16, n_split};
        c.mma = true;
        run_case(c, seed++);
        c = {33, 32, 8, 64, HP_DTYPE_BF16, n_split, 300};
        c.mma = true;
        run_case(c, seed++);
    }
    for (bool mma : {false, true}) {
        Case c{8, 32, 8, 64, HP_DTYPE_BF16, 0, 200};
        c.mma = mma;
        c.block_tokens = 8;
        run_case(c, seed++);
    }
}

TEST(CudaDecodeAttentionMma, GroupsAndHeadDimsMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    const Case cases[] = {
        {8, 4, 4, 64},                                    // group 1
        {9, 6, 2, 64},                                    // group 3 (of at most 4)
        {8, 32, 4, 128, HP_DTYPE_BF16},                   // group 8, d_head 128 (qwen3-30b-a3b)
        {3, 16, 2, 64, HP_DTYPE_BF16, 5},                 // group 8, d_head 64
        {5, 8, 2, 128, HP_DTYPE_F16},                     // f16 cache
        {64, 32, 8, 64, HP_DTYPE_F16, 0, 500},            // f16 cache, batch 64
        {6, 32, 4, 128, HP_DTYPE_BF16, 9, 400, true},     // prefetch, group 8, d_head 128
        {7, 4, 2, 32, HP_DTYPE_BF16, 0, 150},             // d_head 32: the CUDA-core kernel
    };
    for (Case c : cases) {
        c.mma = true;
        run_case(c, seed++);
    }
}

// Knob attn_fd_early_kv: a warp of the PREFETCH variant whose token is alone in its sequence loads its
// first step before griddepcontrol.wait, which must then hold no row written in this step (only the
// token's newest; attn_fd_early_kv 2: all of the step but that row). The other tests launch the kernel
// plainly with every row in memory beforehand, so a load of the newest row before the wait would pass
// them. Here the kernel is a programmatic dependent launch behind a kernel that lets it start at once
// and writes q and the newest rows 1 ms later; they hold NaN until then, in both runs of each case (the
// second with every launch's setup done). One token at lengths whose newest row is alone in the last
// warp step (1025, 33, 17, 1; at qwen3's steps of 8 positions and llama's of 16), ends a step (1024) or
// shares it with older rows (1003), and 2 and 4 tokens (lengths 1, 2, 15 and 16), in clusters and not;
// once (one token, 1025) the variant without early loads behind the same writer. A build whose rule lets
// the newest row's step go early fails this test (bench/RESULTS.md, fourteenth session).
TEST(CudaDecodeAttention, EarlyKvWaitsForTheNewestRowUnderDependentLaunch) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    if (!HP_CUDA_PDL) GTEST_SKIP() << "built without programmatic dependent launches (pdl 0): the kernels never overlap";
    uint32_t seed = std::random_device{}();
    const Case shapes[] = {{1, 32, 8, 64}, {1, 32, 4, 128}};
    for (const Case &shape : shapes) {
        for (int n_token : {1, 2, 4}) {
            for (int length : {1025, 1024, 1003, 33, 17, 1}) {
                if (n_token > 1 && length != 1025) continue;  // several tokens take the run's special lengths (1, 2, 15, 16)
                for (bool cluster : {true, false}) {
                    Case c = shape;
                    c.n_token = n_token;
                    c.max_length = length;
                    c.alone = true;
                    c.prefetch = true;
                    c.small_warps = n_token <= 2;
                    c.cluster = cluster;
                    c.pdl_writer = true;
                    run_case(c, seed++);
                    if (n_token == 1 && length == 1025) {
                        c.prefetch = false;
                        run_case(c, seed++);
                    }
                }
            }
        }
    }
}

// go(D, G) as integral constants: the kernel's d_head (32, 64, else 128) and its compiled group (4
// for groups up to 4, else 8) for a case of d_head d and GQA group `group`.
template <typename Go>
void for_kernel_shape(int d, int group, Go &&go) {
    using std::integral_constant;
    if (d == 32 && group <= 4) go(integral_constant<int, 32>{}, integral_constant<int, 4>{});
    else if (d == 32) go(integral_constant<int, 32>{}, integral_constant<int, 8>{});
    else if (d == 64 && group <= 4) go(integral_constant<int, 64>{}, integral_constant<int, 4>{});
    else if (d == 64) go(integral_constant<int, 64>{}, integral_constant<int, 8>{});
    else if (group <= 4) go(integral_constant<int, 128>{}, integral_constant<int, 4>{});
    else go(integral_constant<int, 128>{}, integral_constant<int, 8>{});
}

// n values offset + scale * N(0, 1) from `rng`, and values' bf16 bits.
std::vector<float> draw_normal(std::mt19937 &rng, size_t n, float scale, float offset) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> out(n);
    for (float &value : out) value = offset + scale * normal(rng);
    return out;
}
std::vector<uint16_t> bf16_bits_of(const std::vector<float> &values) {
    std::vector<uint16_t> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = to_bf16_bits(values[i]);
    return out;
}

// Knob attn_fd_head (attention_head.cuh): the CUDA-core kernel doing the head kernel's work itself (bias,
// q/k RMSNorm, RoPE, the newest K and V rows into the cache) on a decode step, against the plugin's path
// without it: head_kernel, then the same kernel on the q it wrote. Raw q/k/v drawn fresh, biases and
// norm weights bf16, the cache random with every token's newest row and every row no sequence holds NaN.
// The newest rows must match the head kernel's to one 16-bit rounding (the RMSNorm's sum runs in
// another order), every other cache element must be left as it was, the outputs must match to 2^-7
// relative (q and the newest K row may differ in their last bit), and a second run must give the same
// bits. With `dependent`, the kernel is a programmatic dependent launch behind a kernel that lets it
// start at once and writes raw q, k and v only 1 ms later (NaN until then): reading them before its
// griddepcontrol.wait would show.
struct FoldCase {
    int n_token, n_head, n_head_kv, d_head;
    hp_dtype kv_dtype = HP_DTYPE_BF16;
    int n_split = 0;  // 0: decode_attention_splits()
    bool prefetch = true, small_warps = true, cluster = false;
    bool bias = true, norm = true;
    int block_tokens = 16;
    int max_length = 1024;  // one token: this many positions; several: the special lengths, then random ones
    bool dependent = false;
};

__global__ void late_copy_kernel(const float *a_from, float *a, int n_a, const float *b_from, float *b, int n_b, const float *c_from, float *c, int n_c,
                                 unsigned long long spin_ns) {
    hp_cuda_gemv::launch_dependents();
    const unsigned long long start = hp_cuda_gemv::global_timer();
    while (hp_cuda_gemv::global_timer() - start < spin_ns) {
    }
    for (int i = int(threadIdx.x); i < n_a; i += int(blockDim.x)) a[i] = a_from[i];
    for (int i = int(threadIdx.x); i < n_b; i += int(blockDim.x)) b[i] = b_from[i];
    for (int i = int(threadIdx.x); i < n_c; i += int(blockDim.x)) c[i] = c_from[i];
}

void run_fold_case(const FoldCase &c, uint32_t seed) {
    SCOPED_TRACE("n_token " + std::to_string(c.n_token) + ", heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + ", d_head " +
                 std::to_string(c.d_head) + ", kv " + (c.kv_dtype == HP_DTYPE_BF16 ? "bf16" : "f16") + ", n_split " + std::to_string(c.n_split) +
                 (c.prefetch ? ", prefetch" : "") + (c.small_warps ? ", small warps" : "") + (c.cluster ? ", cluster" : "") + (c.bias ? ", bias" : "") +
                 (c.norm ? ", q/k norm" : "") + ", block_tokens " + std::to_string(c.block_tokens) + ", max_length " + std::to_string(c.max_length) +
                 (c.dependent ? ", dependent launch behind a late writer" : "") + ", seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int d = c.d_head, group = c.n_head / c.n_head_kv, bt = c.block_tokens;
    const bool bf16 = c.kv_dtype == HP_DTYPE_BF16;
    // Every token alone in its sequence (sequence t), at its own length.
    const int special[] = {1, 2, 15, 16, 17, 33, 255, 1023, 1025};
    std::uniform_int_distribution<int> any_length(1, c.max_length);
    std::vector<int32_t> positions(size_t(c.n_token)), token_seq(size_t(c.n_token)), seq_token_start(size_t(c.n_token) + 1);
    int max_length = 1;
    for (int t = 0; t < c.n_token; ++t) {
        const int length = c.n_token == 1 ? c.max_length : t < int(std::size(special)) ? std::min(special[t], c.max_length) : any_length(rng);
        positions[size_t(t)] = length - 1;
        token_seq[size_t(t)] = t;
        seq_token_start[size_t(t)] = t;
        max_length = std::max(max_length, length);
    }
    seq_token_start[size_t(c.n_token)] = c.n_token;
    const int max_blocks = (max_length + bt - 1) / bt;
    int n_block = 3;  // blocks no sequence uses
    for (int32_t position : positions) n_block += (position + bt) / bt;
    std::vector<int32_t> order(static_cast<size_t>(n_block)), tables(size_t(c.n_token) * max_blocks, -1);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int next = 0;
    for (int t = 0; t < c.n_token; ++t) {
        for (int b = 0; b < (positions[size_t(t)] + bt) / bt; ++b) tables[size_t(t) * max_blocks + b] = order[size_t(next++)];
    }
    const size_t row_width = size_t(c.n_head_kv) * d, cache_elements = size_t(n_block) * bt * row_width;
    std::vector<uint16_t> k_cache(cache_elements, 0x7fff), v_cache(cache_elements, 0x7fff);  // NaN in bf16 and f16
    std::vector<int64_t> newest_row(size_t(c.n_token));
    for (int t = 0; t < c.n_token; ++t) {
        for (int j = 0; j < positions[size_t(t)]; ++j) {  // the older rows; the newest stays NaN
            const size_t row = (size_t(tables[size_t(t) * max_blocks + j / bt]) * bt + j % bt) * row_width;
            for (size_t i = 0; i < row_width; ++i) {
                k_cache[row + i] = bf16 ? to_bf16_bits(normal(rng)) : to_f16_bits(normal(rng));
                v_cache[row + i] = bf16 ? to_bf16_bits(normal(rng)) : to_f16_bits(normal(rng));
            }
        }
        const int at = positions[size_t(t)];
        newest_row[size_t(t)] = (int64_t(tables[size_t(t) * max_blocks + at / bt]) * bt + at % bt) * int64_t(row_width);
    }
    auto draw = [&](size_t n, float scale, float offset) { return draw_normal(rng, n, scale, offset); };
    const std::vector<float> q = draw(size_t(c.n_token) * c.n_head * d, 2.0f, 0.0f), k = draw(size_t(c.n_token) * row_width, 2.0f, 0.0f),
                             v = draw(size_t(c.n_token) * row_width, 1.0f, 0.0f);
    const std::vector<uint16_t> bq = bf16_bits_of(draw(size_t(c.n_head) * d, 0.5f, 0.0f)), bk = bf16_bits_of(draw(row_width, 0.5f, 0.0f)),
                                bv = bf16_bits_of(draw(row_width, 0.5f, 0.0f)), q_norm = bf16_bits_of(draw(size_t(d), 0.2f, 1.0f)),
                                k_norm = bf16_bits_of(draw(size_t(d), 0.2f, 1.0f));
    std::vector<float> inv_freq(size_t(d / 2));
    for (int i = 0; i < d / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(d));

    const float nan = std::numeric_limits<float>::quiet_NaN();
    float *q_d = upload(q), *q_raw_d = upload(q), *k_d = upload(k), *v_d = upload(v), *inv_freq_d = upload(inv_freq);
    float *q_late_d = upload(std::vector<float>(q.size(), nan)), *k_late_d = upload(std::vector<float>(k.size(), nan)),
          *v_late_d = upload(std::vector<float>(v.size(), nan));
    uint16_t *bq_d = upload(bq), *bk_d = upload(bk), *bv_d = upload(bv), *q_norm_d = upload(q_norm), *k_norm_d = upload(k_norm);
    uint16_t *k_cache_a = upload(k_cache), *v_cache_a = upload(v_cache), *k_cache_b = upload(k_cache), *v_cache_b = upload(v_cache);
    int32_t *positions_d = upload(positions), *token_seq_d = upload(token_seq), *tables_d = upload(tables), *seq_start_d = upload(seq_token_start);
    base::DecodeAttentionParams p{c.n_head, c.n_head_kv, group, float(M_LOG2E) / std::sqrt(float(d)), bt, bt == 16 ? 4 : -1, max_blocks, 1};
    const int warps = c.small_warps ? base::kFdSmallWarps : base::kFdWarps;
    p.n_split = c.n_split > 0 ? c.n_split : base::decode_attention_splits(c.n_token, c.n_head_kv, d, max_blocks * bt, 64, warps);
    p.seq_token_start = seq_start_d;
    const size_t n_out = size_t(c.n_token) * c.n_head * d;
    float *partial_d = nullptr;
    CHECK_CUDA(cudaMalloc(&partial_d, size_t(c.n_token) * c.n_head * p.n_split * (d + 2) * sizeof(float)));
    int32_t *counters_d = upload(std::vector<int32_t>(size_t(c.n_token) * c.n_head_kv, 0));
    __nv_bfloat16 *out_a = reinterpret_cast<__nv_bfloat16 *>(upload(std::vector<uint16_t>(n_out, 0x7fc0)));
    __nv_bfloat16 *out_b = reinterpret_cast<__nv_bfloat16 *>(upload(std::vector<uint16_t>(n_out, 0x7fc0)));
    ASSERT_TRUE(q_d && q_raw_d && k_d && v_d && inv_freq_d && q_late_d && k_late_d && v_late_d && bq_d && bk_d && bv_d && q_norm_d && k_norm_d &&
                k_cache_a && v_cache_a && k_cache_b && v_cache_b && positions_d && token_seq_d && tables_d && seq_start_d && counters_d && out_a && out_b);
    const dim3 grid(c.n_head_kv, c.n_token, p.n_split);
    auto attend = [&](const base::DecodeAttentionParams &params, const float *q_in, void *k_c, void *v_c, __nv_bfloat16 *out, cudaStream_t stream) {
        auto go = [&](auto d_head, auto g) {
            constexpr int D = decltype(d_head)::value, G = decltype(g)::value;
            if (stream) {  // as forward.cu launches it (launch_decode_attention_kernel), behind the late writer
                Case shape{c.n_token, c.n_head, c.n_head_kv, d, c.kv_dtype};
                shape.prefetch = c.prefetch;
                shape.small_warps = c.small_warps;
                shape.cluster = c.cluster && base::fd_cluster(params.n_split);
                if (bf16) launch_dependent<HP_DTYPE_BF16, D, G>(shape, c.n_head_kv, stream, params, q_in, positions_d, token_seq_d, tables_d, k_c, v_c, partial_d, counters_d, out);
                else launch_dependent<HP_DTYPE_F16, D, G>(shape, c.n_head_kv, stream, params, q_in, positions_d, token_seq_d, tables_d, k_c, v_c, partial_d, counters_d, out);
                return;
            }
            launch<D, G>(c.prefetch, false, c.kv_dtype, grid, params, q_in, positions_d, token_seq_d, tables_d, k_c, v_c, partial_d, counters_d, out,
                         c.small_warps, c.cluster && base::fd_cluster(params.n_split));  // as forward.cu: clusters of 2..attn_fd_cluster splits
        };
        for_kernel_shape(d, group, go);
    };

    // A: the head kernel, then the kernel on the q it wrote.
    base::HeadParams hp{c.n_head, c.n_head_kv, d, 1e-6f, HP_DTYPE_BF16, c.bias ? bq_d : nullptr, c.bias ? bk_d : nullptr, c.bias ? bv_d : nullptr,
                        HP_DTYPE_BF16, c.norm ? q_norm_d : nullptr, c.norm ? k_norm_d : nullptr, inv_freq_d, bt, max_blocks};
    const int head_threads = std::min(256, (d + 31) / 32 * 32);
    if (bf16) base::head_kernel<HP_DTYPE_BF16><<<dim3(c.n_head + c.n_head_kv, c.n_token), head_threads>>>(hp, q_d, k_d, v_d, positions_d, token_seq_d, tables_d, k_cache_a, v_cache_a);
    else base::head_kernel<HP_DTYPE_F16><<<dim3(c.n_head + c.n_head_kv, c.n_token), head_threads>>>(hp, q_d, k_d, v_d, positions_d, token_seq_d, tables_d, k_cache_a, v_cache_a);
    attend(p, q_d, k_cache_a, v_cache_a, out_a, nullptr);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());

    // B: the kernel alone on raw q, k and v (twice: the same bits).
    base::DecodeAttentionParams pf = p;
    pf.head.k = c.dependent ? k_late_d : k_d;
    pf.head.v = c.dependent ? v_late_d : v_d;
    pf.head.bias_dtype = HP_DTYPE_BF16;
    pf.head.bq = hp.bq, pf.head.bk = hp.bk, pf.head.bv = hp.bv;
    pf.head.norm_dtype = HP_DTYPE_BF16;
    pf.head.q_norm = hp.q_norm, pf.head.k_norm = hp.k_norm;
    pf.head.inv_freq = inv_freq_d;
    pf.head.eps = 1e-6f;
    cudaStream_t stream = nullptr;
    if (c.dependent) CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<uint16_t> got_b[2];
    for (int run = 0; run < 2; ++run) {
        // Each run from the cache as drawn (the newest rows NaN) and NaN outputs, so that the second also
        // shows a read of a newest row before its write.
        CHECK_CUDA(cudaMemcpy(k_cache_b, k_cache.data(), cache_elements * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(v_cache_b, v_cache.data(), cache_elements * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(out_b, std::vector<uint16_t>(n_out, 0x7fc0).data(), n_out * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaDeviceSynchronize());
        if (c.dependent) {
            for (float *late : {q_late_d, k_late_d, v_late_d}) cudaMemsetAsync(late, 0xff, (late == q_late_d ? q.size() : k.size()) * sizeof(float), stream);
            late_copy_kernel<<<1, 256, 0, stream>>>(q_raw_d, q_late_d, int(q.size()), k_d, k_late_d, int(k.size()), v_d, v_late_d, int(v.size()), 1000000ull);
            attend(pf, q_late_d, k_cache_b, v_cache_b, out_b, stream);
            CHECK_CUDA(cudaStreamSynchronize(stream));
        } else {
            attend(pf, q_raw_d, k_cache_b, v_cache_b, out_b, nullptr);
        }
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaDeviceSynchronize());
        got_b[run].resize(n_out);
        CHECK_CUDA(cudaMemcpy(got_b[run].data(), out_b, n_out * 2, cudaMemcpyDeviceToHost));
    }
    if (stream) cudaStreamDestroy(stream);
    EXPECT_EQ(std::memcmp(got_b[0].data(), got_b[1].data(), n_out * 2), 0) << "a second run differs";

    std::vector<uint16_t> got_a(n_out), ka(cache_elements), va(cache_elements), kb(cache_elements), vb(cache_elements);
    CHECK_CUDA(cudaMemcpy(got_a.data(), out_a, n_out * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(ka.data(), k_cache_a, cache_elements * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(va.data(), v_cache_a, cache_elements * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(kb.data(), k_cache_b, cache_elements * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(vb.data(), v_cache_b, cache_elements * 2, cudaMemcpyDeviceToHost));
    auto value = [&](uint16_t bits) { return bf16 ? double(from_bf16_bits(bits)) : double(from_f16_bits(bits)); };
    // A newest element may differ by one 16-bit rounding (2^-7 relative in bf16, 2^-10 in f16: the norm's
    // sum runs in another order, and contraction into FMAs may differ), or, where RoPE cancels to almost
    // nothing, by a float rounding of the head's inputs: 2^-20 of the largest |element| of its row.
    const double rounding = bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    std::vector<char> newest(cache_elements, 0);
    for (int64_t row : newest_row) std::fill_n(newest.begin() + row, row_width, char(1));
    std::vector<double> head_max(cache_elements / size_t(d), 0.0);  // per d_head segment: the head kernel's largest |K| and |V|
    for (size_t i = 0; i < cache_elements; ++i) {
        if (newest[i]) head_max[i / size_t(d)] = std::max({head_max[i / size_t(d)], std::fabs(value(ka[i])), std::fabs(value(va[i]))});
    }
    int bad = 0;
    for (size_t i = 0; i < cache_elements; ++i) {
        if (!newest[i]) {
            if ((kb[i] != k_cache[i] || vb[i] != v_cache[i]) && bad++ < 5) ADD_FAILURE() << "cache element " << i << " outside the newest rows changed";
            continue;
        }
        for (const auto &[a, b, name] : {std::tuple{ka[i], kb[i], "K"}, std::tuple{va[i], vb[i], "V"}}) {
            const double x = value(a), y = value(b);
            if (!(std::fabs(x - y) <= rounding * std::max(std::fabs(x), std::fabs(y)) + std::ldexp(head_max[i / size_t(d)], -20)) && bad++ < 5) {
                ADD_FAILURE() << name << " newest-row element " << i << ": head kernel " << x << ", attention kernel " << y;
            }
        }
    }
    EXPECT_EQ(bad, 0) << bad << " cache elements off";
    bad = 0;
    for (int t = 0; t < c.n_token; ++t) {
        for (int h = 0; h < c.n_head; ++h) {
            double scale = 0;  // the head's largest output: the bound's floor
            for (int i = 0; i < d; ++i) scale = std::max(scale, std::fabs(double(from_bf16_bits(got_a[(size_t(t) * c.n_head + h) * d + i]))));
            for (int i = 0; i < d; ++i) {
                const size_t o = (size_t(t) * c.n_head + h) * d + i;
                const double x = from_bf16_bits(got_a[o]), y = from_bf16_bits(got_b[0][o]);
                if (!(std::fabs(x - y) <= std::ldexp(std::fabs(x), -7) + 1e-3 * scale) && bad++ < 5) {
                    ADD_FAILURE() << "token " << t << " (length " << positions[size_t(t)] + 1 << ") head " << h << " element " << i << ": head kernel path "
                                  << x << ", folded " << y;
                }
            }
        }
    }
    EXPECT_EQ(bad, 0) << bad << " of " << n_out << " outputs off";
    for (void *ptr : std::initializer_list<void *>{q_d, q_raw_d, k_d, v_d, inv_freq_d, q_late_d, k_late_d, v_late_d, bq_d, bk_d, bv_d, q_norm_d, k_norm_d,
                                                   k_cache_a, v_cache_a, k_cache_b, v_cache_b, positions_d, token_seq_d, tables_d, seq_start_d, partial_d,
                                                   counters_d, out_a, out_b}) {
        cudaFree(ptr);
    }
}

// Decode steps of qwen3-30b-a3b's batch 1 (the knob's target: 32/4 heads, d_head 128, q/k norm, no bias)
// at lengths whose newest row is alone in the last warp step, ends one, or is the only row, split
// counts 1 / 7 / 64, in clusters and not; llama-3.2-1b's shape and d_head 32 with biases, group 1 and 3,
// f16, blocks of 8 tokens (steps across paged blocks), several tokens (the kernel without PREFETCH, in
// blocks of kFdWarps), and behind a late writer under dependent launch.
TEST(CudaDecodeAttention, HeadFoldMatchesHeadKernelThenAttention) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    if (!base::kFdHead) GTEST_SKIP() << "built with attn_fd_head 0 (test_cuda_attention_tail has it on)";
    uint32_t seed = std::random_device{}();
    for (int length : {1024, 1025, 1003, 17, 1}) {
        for (bool cluster : {true, false}) {
            FoldCase c{1, 32, 4, 128};
            c.bias = false;
            c.max_length = length;
            c.cluster = cluster;
            run_fold_case(c, seed++);
        }
    }
    for (int n_split : {1, 7, 64}) {
        FoldCase c{1, 32, 4, 128};
        c.n_split = n_split;
        c.max_length = 700;
        run_fold_case(c, seed++);
    }
    run_fold_case({1, 32, 8, 64}, seed++);                                             // llama-3.2-1b, with biases
    run_fold_case({1, 32, 8, 64, HP_DTYPE_F16, 0, true, true, false, true, false}, seed++);  // f16, no norm
    run_fold_case({2, 4, 4, 32, HP_DTYPE_BF16, 0, true, true, true}, seed++);         // group 1, d_head 32, clusters
    run_fold_case({3, 6, 2, 64, HP_DTYPE_BF16, 0, false, false}, seed++);             // group 3, 3 tokens, no PREFETCH
    run_fold_case({9, 32, 4, 128, HP_DTYPE_BF16, 5, false, false}, seed++);           // 9 tokens (the special lengths)
    run_fold_case({1, 32, 4, 128, HP_DTYPE_BF16, 0, true, true, false, true, true, 8, 200}, seed++);  // blocks of 8 tokens
    if (HP_CUDA_PDL) {
        for (bool cluster : {true, false}) {
            FoldCase c{1, 32, 4, 128};
            c.cluster = cluster;
            c.max_length = 1025;
            c.dependent = true;
            run_fold_case(c, seed++);
        }
        FoldCase c{1, 32, 8, 64};
        c.dependent = true;
        run_fold_case(c, seed++);
    }
}

// Every SM's shared memory set to NaN bits (0xff): one block of the device's largest dynamic shared
// memory on each SM, so that what a later kernel finds there is not an earlier kernel's slice.
__global__ void poison_shared_kernel(int words) {
    extern __shared__ uint32_t poisoned[];
    for (int i = int(threadIdx.x); i < words; i += int(blockDim.x)) poisoned[i] = 0xffffffffu;
}
void poison_shared_memory() {
    int device = 0, optin = 0, sms = 0;
    CHECK_CUDA(cudaGetDevice(&device));
    CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CHECK_CUDA(cudaFuncSetAttribute(poison_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    poison_shared_kernel<<<sms, 1024, size_t(optin)>>>(optin / 4);
    CHECK_CUDA(cudaGetLastError());
}

// Knob attn_fd_oproj (attention_oproj.cuh): the single-token kernel in clusters with o_proj folded in,
// against the same kernel without it and then o_proj in float64 on the host over that kernel's bf16
// output. The attention output must be the same bits; x must be x0 + bias + W a to 2^-18 of x0's, the
// bias's and the products' magnitudes (float32 sums of bf16 products); h must be bf16(x * norm weight)
// of the kernel's own x, exactly, and each 16-row tile's sum of x^2 within 1e-5 relative. Every run
// starts from NaN outputs and x0; a second run must give the same bits (whichever kv head arrives last;
// the counters set back to zero). With `dependent` the kernel is a programmatic dependent launch behind
// a kernel that writes q and x only 1 ms later (NaN until then): reading either before
// griddepcontrol.wait would show.
struct OProjCase {
    int n_head, n_head_kv, d_head, d_model;
    int n_split = 0;  // 0: decode_attention_splits()
    int length = 1025;
    bool bias = false, norm = true, dependent = false;
};

template <int D, int G, int OPROJ>
bool launch_oproj_case(int n_head_kv, int n_split, size_t shared_bytes, cudaStream_t stream, const base::DecodeAttentionParams &p, const float *q,
                       const int32_t *positions, const int32_t *token_seq, const int32_t *tables, const void *k, const void *v, float *partial,
                       int32_t *counters, __nv_bfloat16 *out) {
    constexpr int W = base::kFdSmallWarps;
    auto kernel = base::decode_attention_kernel<HP_DTYPE_BF16, D, G, true, W, true, HP_CUDA_ATTN_FD_RING, HP_CUDA_ATTN_FD_SCATTER_SCORES, OPROJ>;
    if (shared_bytes > 0 && !base::fd_oproj_prepare_shared(kernel, shared_bytes)) return false;
    return base::launch_decode_attention_kernel<true>(kernel, n_head_kv, 1, n_split, W, shared_bytes, /*one_wave=*/true, stream, p, q, positions, token_seq,
                                                      tables, k, v, partial, counters, out);
}

void run_oproj_case(const OProjCase &c, uint32_t seed) {
    SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + ", d_head " + std::to_string(c.d_head) + ", d_model " +
                 std::to_string(c.d_model) + ", n_split " + std::to_string(c.n_split) + ", length " + std::to_string(c.length) + (c.bias ? ", bias" : "") +
                 (c.norm ? ", norm" : "") + (c.dependent ? ", dependent launch behind a late writer" : "") + ", seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int d = c.d_head, group = c.n_head / c.n_head_kv, bt = 16, n_in = c.n_head * d;
    const int max_blocks = (c.length + bt - 1) / bt, n_block = max_blocks + 3;
    std::vector<int32_t> order(static_cast<size_t>(n_block));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const std::vector<int32_t> tables(order.begin(), order.begin() + max_blocks), positions{c.length - 1}, token_seq{0}, seq_token_start{0, 1};
    const size_t row_width = size_t(c.n_head_kv) * d, cache_elements = size_t(n_block) * bt * row_width;
    std::vector<uint16_t> k_cache(cache_elements, 0x7fff), v_cache(cache_elements, 0x7fff);  // NaN where no position is
    for (int j = 0; j < c.length; ++j) {
        const size_t row = (size_t(tables[size_t(j / bt)]) * bt + j % bt) * row_width;
        for (size_t i = 0; i < row_width; ++i) {
            k_cache[row + i] = to_bf16_bits(normal(rng));
            v_cache[row + i] = to_bf16_bits(normal(rng));
        }
    }
    auto draw = [&](size_t n, float scale, float offset) { return draw_normal(rng, n, scale, offset); };
    const std::vector<float> q = draw(size_t(n_in), 2.0f, 0.0f), x0 = draw(size_t(c.d_model), 1.0f, 0.0f);
    const std::vector<uint16_t> w = bf16_bits_of(draw(size_t(c.d_model) * n_in, 0.05f, 0.0f)), bias = bf16_bits_of(draw(size_t(c.d_model), 0.5f, 0.0f)),
                                norm_w = bf16_bits_of(draw(size_t(c.d_model), 0.2f, 1.0f));
    const int n_tile = (c.d_model + 15) / 16;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float *q_d = upload(q), *q_late_d = upload(std::vector<float>(q.size(), nan)), *x0_d = upload(x0), *x_d = upload(x0);
    float *sum_sq_d = upload(std::vector<float>(size_t(n_tile), nan));
    uint16_t *w_d = upload(w), *bias_d = upload(bias), *norm_w_d = upload(norm_w), *k_d = upload(k_cache), *v_d = upload(v_cache);
    uint16_t *h_d = upload(std::vector<uint16_t>(size_t(c.d_model), 0x7fc0));
    int32_t *positions_d = upload(positions), *token_seq_d = upload(token_seq), *tables_d = upload(tables), *seq_start_d = upload(seq_token_start);
    base::DecodeAttentionParams p{c.n_head, c.n_head_kv, group, float(M_LOG2E) / std::sqrt(float(d)), bt, 4, max_blocks, 1};
    p.n_split = c.n_split > 0 ? c.n_split : base::decode_attention_splits(1, c.n_head_kv, d, max_blocks * bt, 64, base::kFdSmallWarps);
    p.seq_token_start = seq_start_d;
    float *partial_d = nullptr, *oproj_partial_d = nullptr;
    CHECK_CUDA(cudaMalloc(&partial_d, size_t(c.n_head) * p.n_split * (d + 2) * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&oproj_partial_d, size_t(c.n_head_kv) * c.d_model * sizeof(float)));
    int32_t *counters_d = upload(std::vector<int32_t>(size_t(c.n_head_kv), 0)), *oproj_counters_d = upload(std::vector<int32_t>(base::kFdMaxCluster, 0));
    __nv_bfloat16 *out_a = reinterpret_cast<__nv_bfloat16 *>(upload(std::vector<uint16_t>(size_t(n_in), 0x7fc0)));
    __nv_bfloat16 *out_b = reinterpret_cast<__nv_bfloat16 *>(upload(std::vector<uint16_t>(size_t(n_in), 0x7fc0)));
    ASSERT_TRUE(q_d && q_late_d && x0_d && x_d && sum_sq_d && w_d && bias_d && norm_w_d && k_d && v_d && h_d && positions_d && token_seq_d && tables_d &&
                seq_start_d && counters_d && oproj_counters_d && out_a && out_b);
    ASSERT_TRUE(base::fd_cluster(p.n_split)) << "the case needs 2..attn_fd_cluster splits";
    ASSERT_EQ(c.d_model % p.n_split, 0);
    ASSERT_EQ(base::fd_oproj_rows(c.d_model, p.n_split) % 32, 0);
    const size_t slice_bytes = base::fd_oproj_shared_bytes(c.d_model, p.n_split, group * d);
    // mode: 0 the kernel without the fold, 1 or 2 with it (the slice by cp.async or by bulk copies).
    auto attend = [&](const base::DecodeAttentionParams &params, int mode, const float *q_in, __nv_bfloat16 *out, cudaStream_t stream) {
        auto go = [&](auto d_head, auto g) {
            constexpr int D = decltype(d_head)::value, G = decltype(g)::value;
            auto with = [&](auto oproj) {
                constexpr int O = decltype(oproj)::value;
                return launch_oproj_case<D, G, O>(c.n_head_kv, params.n_split, O == 0 ? 0 : slice_bytes, stream, params, q_in, positions_d, token_seq_d,
                                                  tables_d, k_d, v_d, partial_d, counters_d, out);
            };
            using std::integral_constant;
            const bool launched = mode == 0   ? with(integral_constant<int, 0>{})
                                  : mode == 1 ? with(integral_constant<int, 1>{})
                                              : with(integral_constant<int, 2>{});
            EXPECT_TRUE(launched) << "the H100 and H200 hold these clusters at once (slice " << slice_bytes << " bytes)";
        };
        for_kernel_shape(d, group, go);
    };

    // A: the kernel without the fold.
    attend(p, 0, q_d, out_a, nullptr);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());

    // B: with it, twice, in each way of loading the slice (bulk copies first; every SM's shared memory
    // poisoned before each run, so that a slice read before it landed shows); both ways the same bits.
    std::vector<float> x_of_mode[3];
    std::vector<uint16_t> h_of_mode[3];
    for (int mode : {2, 1}) {
        SCOPED_TRACE(mode == 1 ? "slice by cp.async (attn_fd_oproj 1)" : "slice by bulk copies (attn_fd_oproj 2)");
        base::DecodeAttentionParams po = p;
        po.oproj.w = reinterpret_cast<const __nv_bfloat16 *>(w_d);
        if (c.bias) po.oproj.bias = bias_d, po.oproj.bias_dtype = HP_DTYPE_BF16;
        po.oproj.x = x_d;
        if (c.norm) {
            po.oproj.norm_out.h = reinterpret_cast<__nv_bfloat16 *>(h_d);
            po.oproj.norm_out.w = norm_w_d;
            po.oproj.norm_out.w_dtype = HP_DTYPE_BF16;
            po.oproj.norm_out.sum_sq = sum_sq_d;
        }
        po.oproj.partial = oproj_partial_d;
        po.oproj.counters = oproj_counters_d;
        po.oproj.d_model = c.d_model;
        cudaStream_t stream = nullptr;
        if (c.dependent) CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        std::vector<uint16_t> got_out[2], got_h[2];
        std::vector<float> got_x[2], got_sum_sq[2];
        for (int run = 0; run < 2; ++run) {
            CHECK_CUDA(cudaMemcpy(out_b, std::vector<uint16_t>(size_t(n_in), 0x7fc0).data(), size_t(n_in) * 2, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(h_d, std::vector<uint16_t>(size_t(c.d_model), 0x7fc0).data(), size_t(c.d_model) * 2, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(sum_sq_d, std::vector<float>(size_t(n_tile), nan).data(), size_t(n_tile) * 4, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(x_d, c.dependent ? std::vector<float>(x0.size(), nan).data() : x0.data(), x0.size() * 4, cudaMemcpyHostToDevice));
            poison_shared_memory();
            CHECK_CUDA(cudaDeviceSynchronize());
            if (c.dependent) {
                cudaMemsetAsync(q_late_d, 0xff, q.size() * sizeof(float), stream);
                late_copy_kernel<<<1, 256, 0, stream>>>(q_d, q_late_d, int(q.size()), x0_d, x_d, int(x0.size()), x0_d, x_d, 0, 1000000ull);
                attend(po, mode, q_late_d, out_b, stream);
                CHECK_CUDA(cudaStreamSynchronize(stream));
            } else {
                attend(po, mode, q_d, out_b, nullptr);
            }
            CHECK_CUDA(cudaGetLastError());
            CHECK_CUDA(cudaDeviceSynchronize());
            got_out[run].resize(size_t(n_in));
            got_h[run].resize(size_t(c.d_model));
            got_x[run].resize(size_t(c.d_model));
            got_sum_sq[run].resize(size_t(n_tile));
            CHECK_CUDA(cudaMemcpy(got_out[run].data(), out_b, size_t(n_in) * 2, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(got_h[run].data(), h_d, size_t(c.d_model) * 2, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(got_x[run].data(), x_d, size_t(c.d_model) * 4, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(got_sum_sq[run].data(), sum_sq_d, size_t(n_tile) * 4, cudaMemcpyDeviceToHost));
        }
        if (stream) cudaStreamDestroy(stream);
        EXPECT_EQ(std::memcmp(got_out[0].data(), got_out[1].data(), size_t(n_in) * 2), 0) << "a second run's attention output differs";
        EXPECT_EQ(std::memcmp(got_x[0].data(), got_x[1].data(), size_t(c.d_model) * 4), 0) << "a second run's x differs";
        if (c.norm) {
            EXPECT_EQ(std::memcmp(got_h[0].data(), got_h[1].data(), size_t(c.d_model) * 2), 0) << "a second run's h differs";
            EXPECT_EQ(std::memcmp(got_sum_sq[0].data(), got_sum_sq[1].data(), size_t(n_tile) * 4), 0) << "a second run's sums of x^2 differ";
        }
        std::vector<uint16_t> out_plain(static_cast<size_t>(n_in));
        CHECK_CUDA(cudaMemcpy(out_plain.data(), out_a, size_t(n_in) * 2, cudaMemcpyDeviceToHost));
        EXPECT_EQ(std::memcmp(out_plain.data(), got_out[0].data(), size_t(n_in) * 2), 0) << "the fold changed the attention's output";
        int bad = 0;
        for (int r = 0; r < c.d_model; ++r) {
            const double b = c.bias ? double(from_bf16_bits(bias[size_t(r)])) : 0.0;
            double ref = double(x0[size_t(r)]) + b, magnitude = std::fabs(x0[size_t(r)]) + std::fabs(b);
            for (int i = 0; i < n_in; ++i) {
                const double product = double(from_bf16_bits(w[size_t(r) * n_in + i])) * double(from_bf16_bits(out_plain[size_t(i)]));
                ref += product;
                magnitude += std::fabs(product);
            }
            const double got = got_x[0][size_t(r)];
            if (!(std::fabs(got - ref) <= std::ldexp(magnitude, -18)) && bad++ < 5) ADD_FAILURE() << "x row " << r << ": " << got << ", want " << ref;
            if (c.norm && got_h[0][size_t(r)] != to_bf16_bits(got_x[0][size_t(r)] * from_bf16_bits(norm_w[size_t(r)])) && bad++ < 5) {
                ADD_FAILURE() << "h row " << r << ": " << from_bf16_bits(got_h[0][size_t(r)]) << ", want bf16 of " << got_x[0][size_t(r)] * from_bf16_bits(norm_w[size_t(r)]);
            }
        }
        for (int tile = 0; c.norm && tile < n_tile; ++tile) {
            double want = 0.0;
            for (int r = tile * 16; r < std::min(c.d_model, tile * 16 + 16); ++r) want += double(got_x[0][size_t(r)]) * got_x[0][size_t(r)];
            if (!(std::fabs(got_sum_sq[0][size_t(tile)] - want) <= 1e-5 * want) && bad++ < 5) {
                ADD_FAILURE() << "sum of x^2 of tile " << tile << ": " << got_sum_sq[0][size_t(tile)] << ", want " << want;
            }
        }
        EXPECT_EQ(bad, 0) << bad << " of " << c.d_model << " rows off";
        std::vector<int32_t> counters(base::kFdMaxCluster);
        CHECK_CUDA(cudaMemcpy(counters.data(), oproj_counters_d, counters.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), base::kFdMaxCluster) << "a row range's counter was left non-zero";
        x_of_mode[mode] = got_x[0];
        h_of_mode[mode] = got_h[0];
    }
    EXPECT_TRUE(x_of_mode[1] == x_of_mode[2] && h_of_mode[1] == h_of_mode[2]) << "the two ways of loading the slice gave different bits";
    for (void *ptr : std::initializer_list<void *>{q_d, q_late_d, x0_d, x_d, sum_sq_d, w_d, bias_d, norm_w_d, k_d, v_d, h_d, positions_d, token_seq_d, tables_d,
                                                   seq_start_d, partial_d, oproj_partial_d, counters_d, oproj_counters_d, out_a, out_b}) {
        cudaFree(ptr);
    }
}

// llama-3.2-1b's batch 1 (32/8 heads, d_head 64, 2048 rows, the plugin's split count: 8 rows ranges of
// 256) with and without the norm, with a bias, under a dependent launch; a rows range of two warp
// rounds (512 rows), d_head 128 (two column chunks a lane), group 8 at d_head 32, group 1 (fewer
// column chunks than lanes), group 3, and 17 positions (splits with no positions). Groups 1 and 3 run
// llama's kernel with 4 and 72 KB slices and the last case runs it with 128 KB again: the shared-memory
// attribute must not have been lowered in between (it was, until the first run on a GPU: the last
// launch failed with an invalid value, as a plugin's would on a shorter sequence after a longer one).
TEST(CudaDecodeAttention, OProjFoldMatchesAttentionThenProjection) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    if (HP_CUDA_ATTN_FD_CLUSTER < 8) GTEST_SKIP() << "built without clusters of 8 splits (attn_fd_cluster)";
    uint32_t seed = std::random_device{}();
    run_oproj_case({32, 8, 64, 2048}, seed++);
    run_oproj_case({32, 8, 64, 2048, 0, 1025, true, false}, seed++);
    run_oproj_case({32, 8, 64, 2048, 0, 1025, false, true, true}, seed++);
    run_oproj_case({4, 2, 64, 1024, 2}, seed++);
    run_oproj_case({16, 4, 128, 1024, 8, 1003, true}, seed++);
    run_oproj_case({16, 2, 32, 512, 2, 300}, seed++);
    run_oproj_case({4, 4, 64, 256, 8}, seed++);
    run_oproj_case({6, 2, 64, 768, 4, 1024, true}, seed++);
    run_oproj_case({32, 8, 64, 2048, 8, 17}, seed++);
}

// Knob attn_fd_scatter_scores: fd_scatter_sum over one warp, rows of L lanes each holding G
// partials. Each lane must end with the full sums over its row of the heads fd_scatter_head0(chunk)
// + i, i < fd_scatter_heads, and the row's lanes together must hold every head, each in
// fd_scatter_lanes of them.
template <int G, int L>
__global__ void scatter_sum_kernel(const float *in, float *out, int *heads) {
    const int lane = threadIdx.x, chunk = lane % L;
    float v[G];
    for (int h = 0; h < G; ++h) v[h] = in[lane * G + h];
    base::fd_scatter_sum<G, L>(v, chunk);
    for (int i = 0; i < base::fd_scatter_heads<G, L>(); ++i) {
        out[lane * G + i] = v[i];
        heads[lane * G + i] = base::fd_scatter_head0<G, L>(chunk) + i;
    }
}

template <int G, int L>
void check_scatter_sum(uint32_t seed) {
    SCOPED_TRACE("group " + std::to_string(G) + ", lanes per row " + std::to_string(L) + ", seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> any(-4.0f, 4.0f);
    std::vector<float> in(32 * G);
    for (float &x : in) x = any(rng);
    float *d_in = upload(in), *d_out = upload(std::vector<float>(32 * G, NAN));
    int *d_heads = upload(std::vector<int>(32 * G, -1));
    ASSERT_TRUE(d_in && d_out && d_heads);
    scatter_sum_kernel<G, L><<<1, 32>>>(d_in, d_out, d_heads);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> out(32 * G);
    std::vector<int> heads(32 * G);
    CHECK_CUDA(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(heads.data(), d_heads, heads.size() * sizeof(int), cudaMemcpyDeviceToHost));
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_heads);
    constexpr int H = base::fd_scatter_heads<G, L>();
    for (int row = 0; row < 32 / L; ++row) {
        std::vector<int> holders(G, 0);
        for (int lane = row * L; lane < row * L + L; ++lane) {
            for (int i = 0; i < H; ++i) {
                const int h = heads[size_t(lane * G + i)];
                ASSERT_TRUE(h >= 0 && h < G) << "lane " << lane << " value " << i << ": head " << h;
                ++holders[size_t(h)];
                double sum = 0.0, magnitude = 0.0;
                for (int r = row * L; r < row * L + L; ++r) {
                    sum += in[size_t(r * G + h)];
                    magnitude += std::fabs(in[size_t(r * G + h)]);
                }
                EXPECT_NEAR(out[size_t(lane * G + i)], sum, 2e-6 * magnitude + 1e-6) << "lane " << lane << ", head " << h;
            }
        }
        for (int h = 0; h < G; ++h) EXPECT_EQ(holders[size_t(h)], (base::fd_scatter_lanes<G, L>())) << "row " << row << ", head " << h;
    }
}

TEST(CudaDecodeAttention, ScatterSumHoldsEveryHeadsRowSum) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed = std::random_device{}();
    check_scatter_sum<4, 4>(seed);
    check_scatter_sum<8, 4>(seed);
    check_scatter_sum<4, 8>(seed);
    check_scatter_sum<8, 8>(seed);
    check_scatter_sum<4, 16>(seed);
    check_scatter_sum<8, 16>(seed);
    check_scatter_sum<16, 16>(seed);
}

}  // namespace
