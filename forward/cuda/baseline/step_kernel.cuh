// The persistent decode step (knob persistent_step, off by default): a whole one-token step of a
// dense model in one launch, so that no kernel boundary stops the weight stream.
//
// Why: a batch-1 step of llama-3.2-1b is ~100 dependent launches, and each costs about 4 us beyond
// its bytes (bench/RESULTS.md): DRAM idles while a kernel drains and the next one ramps up, and
// programmatic launches overlap only what fits beside the previous kernel's blocks.
//
// How: one block per SM (cooperative launch: all resident) walks a list of ops built at create()
// (StepOp): per layer the q/k/v GEMV, attention, o_proj, gate/up, down_proj, then the lm_head, with a
// grid-wide barrier between ops (each reads its predecessor's output). kStagedWarps consumer warps
// run the ops; the GEMV ops are the staged GEMV's consumer (staged_consume in gemv_staged.cuh: each
// block owns contiguous rows, the same epilogues and folded RMSNorm as gemv_kernel). One producer warp
// walks the block's rows of every GEMV op of the step in order and bulk-copies them into a ring of
// kStepStages shared-memory stages as soon as the consumer warps free one (an empty mbarrier per
// stage), so the next ops' first weights load while the consumers wait at a barrier or run attention.
// Attention (attention_op): tasks (kv head, split of the sequence) over the blocks; each task
// applies bias, q/k RMSNorm and RoPE to its q heads (the split that holds the new position first
// writes the new K and V into the cache), runs an online softmax per warp over its positions (d_head/8
// lanes per position, 16 bytes of its K and V row each), merges the warps, and the last task of a kv head to finish (a counter) merges the splits into the bf16
// attention output that o_proj reads.
//
// Measured on the H200 (llama-3.2-1b, KV 1024, bench/RESULTS.md): 1.09 ms a step against 1.02 for
// the launch chain, hence off by default. A HP_CUDA_PERSISTENT_TRACE=1 build shows why: per layer attention spans
// ~12 us (6.6 us of dependent latencies per block), each GEMV op adds 2-5 us of barrier, input and
// arrival, and the ring (160 KB per SM, ~5 us of DRAM time) cannot cover those gaps, so DRAM idles;
// L2 prefetch past the ring (persistent_l2_items) was slower. Kept, with its tests, as the base for
// shorter attention and cheaper op boundaries.
// Requires (step_kernel_fits in forward.cu): one token with logits, no MoE layer, 16-bit KV, d_head 64
// or 128, every GEMV input width a power of two from 256 to 16384, 16-byte aligned weights, one
// 288-thread block per SM. Other steps take the launch chain.
// Included by forward.cu after gemv.cuh (staged ring, epilogues) and kernels.cuh (load, store_as).
#pragma once

namespace hp_cuda_step {

using hp_cuda_baseline::kMaxGroup;
using hp_cuda_baseline::load;
using hp_cuda_baseline::load8;
using hp_cuda_baseline::store_as;
using hp_cuda_baseline::warp_sum;
using hp_cuda_gemv::global_timer;
using hp_cuda_gemv::kStagedWarps;
using hp_cuda_gemv::kTileRows;
using hp_cuda_gemv::Params;

// Knob persistent_step (a function: a literal condition would make the front end call the rest of
// the caller unreachable when it is 0).
inline bool enabled() { return HP_CUDA_PERSISTENT_STEP != 0; }
constexpr int kThreads = kStagedWarps * 32;  // the consumer warps (a producer warp comes after them)
constexpr int kStepStages = HP_CUDA_PERSISTENT_STAGES;                   // stages of the ring
constexpr int kStepStageBytes = HP_CUDA_PERSISTENT_STAGE_KB * 1024;     // weight bytes per stage (both matrices)
constexpr int kMaxInput = 16384;                                         // widest GEMV input (x in shared memory)
constexpr int kStepL2Items = HP_CUDA_PERSISTENT_L2_ITEMS;               // items of each op prefetched into L2 past the first ring's worth

enum OpKind : int { kOpStore = hp_cuda_gemv::kStore, kOpAccumulate = hp_cuda_gemv::kAccumulate, kOpSiluMul = hp_cuda_gemv::kSiluMul, kOpAttention = 3 };

// One layer's attention: the q/k/v GEMV's float32 outputs for the token, the layer's biases and q/k
// norms (optional), its KV cache, and the bf16 output that o_proj reads.
struct AttentionOp {
    const float *q = nullptr, *k = nullptr, *v = nullptr;
    hp_dtype bias_dtype = HP_DTYPE_F32, norm_dtype = HP_DTYPE_F32;
    const void *bq = nullptr, *bk = nullptr, *bv = nullptr;
    const void *q_norm = nullptr, *k_norm = nullptr;
    void *k_cache = nullptr, *v_cache = nullptr;
    __nv_bfloat16 *out = nullptr;
};

struct alignas(16) StepOp {
    int kind = kOpStore;
    int unit_rows = 1;      // GEMV: rows per unit of the block partition (16 when it writes per-tile sums of x^2)
    bool logits = false;    // the lm_head: input row and output come from the step (StepParams)
    Params gemv;            // GEMV kinds
    AttentionOp attention;  // kOpAttention
};

struct StepParams {
    const StepOp *ops = nullptr;
    int n_op = 0;
    int n_head = 0, n_head_kv = 0;
    float head_eps = 0.0f;      // q/k RMSNorm epsilon
    float scale_log2 = 0.0f;    // log2(e) / sqrt(d_head)
    const float *inv_freq = nullptr;
    int block_tokens = 0;
    // The step's batch arrays (device): token 0 of sequence 0.
    const int32_t *positions = nullptr, *block_tables = nullptr, *logit_rows = nullptr;
    float *logits = nullptr;
    // Scratch: the grid barrier (zeroed before the launch), split counters [n_head_kv] (zero between
    // steps; the last task of a kv head resets its own), split partials [n_head_kv * splits][group][d_head + 2].
    unsigned *barrier = nullptr;
    int32_t *counters = nullptr;
    float *partial = nullptr;
    int max_split = 1;
    // HP_CUDA_PERSISTENT_TRACE builds: [n_op][gridDim.x][4] global timer (ns) when each block starts each op
    // (after its barrier wait), has its input (GEMV: x in shared memory), has done its work, and has
    // arrived at the barrier.
    unsigned long long *trace = nullptr;
};


// A barrier of the consumer warps only (the producer warp never joins one).
__device__ inline void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

// Grid-wide barrier over a counter that only grows during the launch: every block adds one when it
// has finished an op, and op i starts once the counter reaches i * gridDim.x. The block's writes are
// ordered before its add by the consumer barrier and the add's release semantics (cumulative at gpu
// scope), and the next op's reads after the acquire load (then a fence, as cooperative_groups' grid
// sync does), so one op's global writes are visible to the next op's reads.
__device__ inline void grid_arrive(unsigned *counter) {
    consumer_sync();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}
__device__ inline void grid_wait(const unsigned *counter, unsigned target) {
    if (threadIdx.x == 0) {
        unsigned seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        } while (seen < target);
        __threadfence();
    }
    consumer_sync();
}

// One head's D values for this warp, lane holding elements lane + 32 c: the GEMV's output + bias,
// RMSNorm (norm given), RoPE at `position` (rotate-half pairs (i, i + D/2): c and c + D/64).
template <int D>
__device__ inline void prepare_head(float (&v)[D / 32], const float *src, const void *bias, hp_dtype bias_dtype, int64_t bias_at,
                                    const void *norm, hp_dtype norm_dtype, float eps, const float *inv_freq, int position, bool rope) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < D / 32; ++c) v[c] = __ldcg(src + lane + 32 * c) + (bias ? load(bias_dtype, bias, bias_at + lane + 32 * c) : 0.0f);
    if (norm) {
        float sum_sq = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 32; ++c) sum_sq += v[c] * v[c];
        const float scale = rsqrtf(warp_sum(sum_sq) / float(D) + eps);
#pragma unroll
        for (int c = 0; c < D / 32; ++c) v[c] = v[c] * scale * load(norm_dtype, norm, lane + 32 * c);
    }
    if (!rope) return;
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
        float sin_a, cos_a;
        sincosf(float(position) * inv_freq[lane + 32 * c], &sin_a, &cos_a);
        const float first = v[c], second = v[c + D / 64];
        v[c] = first * cos_a - second * sin_a;
        v[c + D / 64] = second * cos_a + first * sin_a;
    }
}

// Splits of the sequence per kv head: one task per block where the grid allows, at least 8 positions each.
__device__ inline int attention_splits(const StepParams &s, int length) {
    const int by_grid = max(1, int(gridDim.x) / s.n_head_kv);
    return max(1, min(min(by_grid, s.max_split), (length + 7) / 8));
}

// Shared memory of the attention op, in floats: q [kMaxGroup][D], the warps' results
// [kStagedWarps][kMaxGroup][D + 2], the splits' max and sum [kMaxSplit][kMaxGroup][2], then the
// split's block-table entries (kMaxTable ints).
constexpr int kMaxSplit = 64, kMaxTable = 256;

__host__ __device__ constexpr int attention_scratch_floats(int d) {
    return kMaxGroup * d + kStagedWarps * kMaxGroup * (d + 2) + kMaxSplit * kMaxGroup * 2 + kMaxTable;
}

// The attention op for the step's one token (see the top of the file): a warp takes D / 8-lane slots
// of positions, two rounds of them loaded before their math (see below).
template <hp_dtype KV, int D>
__device__ void attention_op(const StepParams &s, const AttentionOp &a, float *scratch) {
    constexpr int PER = D / 32;
    constexpr float kNoScore = -1e30f;  // finite: exp2 of a difference with it is 0, never NaN
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int group = s.n_head / s.n_head_kv;
    const int position = s.positions[0], length = position + 1;
    const int n_split = attention_splits(s, length), per = (length + n_split - 1) / n_split;
    const int kv_row = s.n_head_kv * D, bt = s.block_tokens;
    float *q_s = scratch;                                        // [kMaxGroup][D]
    float *warp_s = q_s + kMaxGroup * D;                         // [kStagedWarps][group][D + 2]
    float *split_s = warp_s + kStagedWarps * kMaxGroup * (D + 2);  // [n_split][group][2]: max, then weight; sum
    int32_t *table_s = reinterpret_cast<int32_t *>(split_s + kMaxSplit * kMaxGroup * 2);
    __shared__ bool last_s;

    for (int task = blockIdx.x; task < s.n_head_kv * n_split; task += gridDim.x) {
        const int h = task / n_split, split = task % n_split;
        const int j0 = split * per, j1 = min(length, j0 + per);
        const bool newest = j0 <= position && position < j1;
        // The split's block-table entries (sequence 0), while the warps below prepare the heads.
        const int first_block = j0 / bt, n_table = j1 > j0 ? (j1 - 1) / bt - first_block + 1 : 0;
        const bool table_in_shared = n_table <= kMaxTable;
        for (int t = threadIdx.x; table_in_shared && t < n_table; t += kThreads) table_s[t] = s.block_tables[first_block + t];
        const int32_t *table = table_in_shared ? table_s : s.block_tables + first_block;
        auto cache_at = [&](int j) { return (int64_t(table[j / bt - first_block]) * bt + j % bt) * kv_row + int64_t(h) * D; };
        // q heads of the group (pre-scaled for exp2), and the new K/V row where this split reads it.
        for (int w = warp; w < group + 2; w += kStagedWarps) {
            float v[PER];
            if (w < group) {
                const int head = h * group + w;
                prepare_head<D>(v, a.q + head * D, a.bq, a.bias_dtype, int64_t(head) * D, a.q_norm, a.norm_dtype, s.head_eps, s.inv_freq, position, true);
#pragma unroll
                for (int c = 0; c < PER; ++c) q_s[w * D + lane + 32 * c] = v[c] * s.scale_log2;
            } else if (newest) {
                const bool is_k = w == group;
                prepare_head<D>(v, (is_k ? a.k : a.v) + h * D, is_k ? a.bk : a.bv, a.bias_dtype, int64_t(h) * D, is_k ? a.k_norm : nullptr,
                                a.norm_dtype, s.head_eps, s.inv_freq, position, is_k);
                const int64_t at = (int64_t(s.block_tables[position / bt]) * bt + position % bt) * kv_row + int64_t(h) * D;
#pragma unroll
                for (int c = 0; c < PER; ++c) store_as<KV>(is_k ? a.k_cache : a.v_cache, at + lane + 32 * c, v[c]);
            }
        }
        consumer_sync();  // q and the table in shared memory, the new row in the cache (read below by this block)

        // A warp takes kPos positions at a time, kLanes lanes each holding 8 elements (16 bytes) of
        // the position's K and V rows: a score is a sum over those lanes, the round's max a sum over
        // the positions, and each lane keeps its own positions' share of l and of the output.
        constexpr int kLanes = D / 8, kPos = 32 / kLanes, kRounds = 2;
        const int slot = lane / kLanes, chunk = lane % kLanes;
        float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][8];  // q stays in shared memory (registers)
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
            m[g] = kNoScore;
            l[g] = 0.0f;
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[g][c] = 0.0f;
        }
        for (int j_base = j0 + warp * kPos; j_base < j1; j_base += kRounds * kStagedWarps * kPos) {
            float k_row[kRounds][8], v_row[kRounds][8];
#pragma unroll
            for (int r = 0; r < kRounds; ++r) {
                const int64_t at = cache_at(min(j_base + r * kStagedWarps * kPos + slot, j1 - 1)) + chunk * 8;
                load8<KV>(a.k_cache, at, k_row[r]);
                load8<KV>(a.v_cache, at, v_row[r]);
            }
#pragma unroll
            for (int r = 0; r < kRounds; ++r) {
                if (j_base + r * kStagedWarps * kPos >= j1) break;
                const bool valid = j_base + r * kStagedWarps * kPos + slot < j1;
#pragma unroll
                for (int g = 0; g < kMaxGroup; ++g) {
                    if (g >= group) break;
                    const float4 q0 = reinterpret_cast<const float4 *>(q_s + g * D + chunk * 8)[0];
                    const float4 q1 = reinterpret_cast<const float4 *>(q_s + g * D + chunk * 8)[1];
                    const float q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
                    float score = 0.0f;
#pragma unroll
                    for (int c = 0; c < 8; ++c) score = fmaf(q[c], k_row[r][c], score);
#pragma unroll
                    for (int offset = 1; offset < kLanes; offset *= 2) score += __shfl_xor_sync(0xffffffffu, score, offset);
                    score = valid ? score : kNoScore;
                    float round_max = score;
#pragma unroll
                    for (int offset = kLanes; offset < 32; offset *= 2) round_max = fmaxf(round_max, __shfl_xor_sync(0xffffffffu, round_max, offset));
                    const float m_new = fmaxf(m[g], round_max), correction = exp2f(m[g] - m_new);
                    const float p = valid ? exp2f(score - m_new) : 0.0f;
                    l[g] = l[g] * correction + p;
#pragma unroll
                    for (int c = 0; c < 8; ++c) acc[g][c] = fmaf(p, v_row[r][c], acc[g][c] * correction);
                    m[g] = m_new;
                }
            }
        }
        // The warp's result: each lane's positions added over the position slots (m is the same in
        // every lane), then the warps' results and the split's, merged over the warps in warp order.
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
            if (g >= group) break;
#pragma unroll
            for (int offset = kLanes; offset < 32; offset *= 2) {
                l[g] += __shfl_xor_sync(0xffffffffu, l[g], offset);
#pragma unroll
                for (int c = 0; c < 8; ++c) acc[g][c] += __shfl_xor_sync(0xffffffffu, acc[g][c], offset);
            }
            float *dst = warp_s + (warp * group + g) * (D + 2);
            if (slot == 0) {
#pragma unroll
                for (int c = 0; c < 8; ++c) dst[chunk * 8 + c] = acc[g][c];
            }
            if (lane == 0) dst[D] = m[g], dst[D + 1] = l[g];
        }
        consumer_sync();
        const bool single = n_split == 1;
        for (int e = threadIdx.x; e < group * D; e += kThreads) {
            const int g = e / D, d = e % D;
            float m_max = kNoScore;
#pragma unroll
            for (int w = 0; w < kStagedWarps; ++w) m_max = fmaxf(m_max, warp_s[(w * group + g) * (D + 2) + D]);
            float sum = 0.0f, value = 0.0f;
#pragma unroll
            for (int w = 0; w < kStagedWarps; ++w) {
                const float *src = warp_s + (w * group + g) * (D + 2);
                const float weight = exp2f(src[D] - m_max);
                sum += weight * src[D + 1];
                value += weight * src[d];
            }
            if (single) {
                a.out[(h * group + g) * D + d] = __float2bfloat16_rn(value / sum);
            } else {
                float *dst = s.partial + (int64_t(h * n_split + split) * group + g) * (D + 2);
                dst[d] = value;
                if (d == 0) dst[D] = m_max, dst[D + 1] = sum;
            }
        }
        if (single) {
            consumer_sync();  // warp_s is reused by the next task
            continue;
        }
        // The last split of the kv head to finish merges them all, in split order: the splits' max
        // and sum first (one load each), then every output element's n_split loads at once.
        __threadfence();
        consumer_sync();
        if (threadIdx.x == 0) last_s = atomicAdd(&s.counters[h], 1) == n_split - 1;
        consumer_sync();
        if (last_s) {
            __threadfence();
            const float *partial = s.partial + int64_t(h * n_split) * group * (D + 2);
            // Each thread's output elements' values of up to kEarly splits are loaded with the splits'
            // max and sum (one round trip), the rest after.
            constexpr int kEarly = 16, kPerThread = kMaxGroup * D / kThreads;
            float early[kPerThread][kEarly];
#pragma unroll
            for (int k = 0; k < kPerThread; ++k) {
                const int e = threadIdx.x + k * kThreads, g = e / D, d = e % D;
#pragma unroll
                for (int sp = 0; sp < kEarly; ++sp) early[k][sp] = e < group * D && sp < n_split ? __ldcg(partial + int64_t(sp * group + g) * (D + 2) + d) : 0.0f;
            }
            for (int t = threadIdx.x; t < n_split * group; t += kThreads) {
                split_s[2 * t] = __ldcg(partial + int64_t(t) * (D + 2) + D);
                split_s[2 * t + 1] = __ldcg(partial + int64_t(t) * (D + 2) + D + 1);
            }
            consumer_sync();
            if (threadIdx.x < group) {  // per head: weights exp2(max_split - max) over the splits, and 1 / their sum
                const int g = threadIdx.x;
                float m_max = kNoScore, sum = 0.0f;
                for (int sp = 0; sp < n_split; ++sp) m_max = fmaxf(m_max, split_s[2 * (sp * group + g)]);
                for (int sp = 0; sp < n_split; ++sp) {
                    float *entry = split_s + 2 * (sp * group + g);
                    entry[0] = exp2f(entry[0] - m_max);
                    sum += entry[0] * entry[1];
                }
                split_s[2 * (n_split * group + g)] = 1.0f / sum;
            }
            consumer_sync();
#pragma unroll
            for (int k = 0; k < kPerThread; ++k) {
                const int e = threadIdx.x + k * kThreads, g = e / D, d = e % D;
                if (e >= group * D) continue;
                float value = 0.0f;
#pragma unroll
                for (int sp = 0; sp < kEarly; ++sp) value += sp < n_split ? split_s[2 * (sp * group + g)] * early[k][sp] : 0.0f;
                for (int sp = kEarly; sp < n_split; ++sp) value += split_s[2 * (sp * group + g)] * __ldcg(partial + int64_t(sp * group + g) * (D + 2) + d);
                a.out[(h * group + g) * D + d] = __float2bfloat16_rn(value * split_s[2 * (n_split * group + g)]);
            }
            if (threadIdx.x == 0) s.counters[h] = 0;
        }
        consumer_sync();
    }
}

// The token's GEMV input into shared memory (bf16 [n_in], row x_rows[0] when given) and, for a
// folded norm, its 1/rms. Every load is issued before the first one is used (one round trip).
__device__ inline float load_input(const Params &p, __nv_bfloat16 *x_s) {
    constexpr int kPerThread = kMaxInput / 8 / kThreads, kSums = 8;  // uint4 of x; partial sums of x^2 per lane
    __shared__ float inv_rms_s;
    const int row = p.x_rows ? p.x_rows[0] : 0, n_vec = p.n_in / 8;
    const bool norm = p.x_sum_sq && threadIdx.x < 32;
    float part[kSums];
    const float *sums = norm ? p.x_sum_sq + int64_t(row) * p.n_sum_sq : nullptr;
#pragma unroll
    for (int k = 0; k < kSums; ++k) part[k] = norm && threadIdx.x + 32 * k < p.n_sum_sq ? __ldcg(sums + threadIdx.x + 32 * k) : 0.0f;
    const uint4 *x = reinterpret_cast<const uint4 *>(p.x + int64_t(row) * p.n_in);
    uint4 v[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        if (threadIdx.x + k * kThreads < n_vec) v[k] = __ldcg(x + threadIdx.x + k * kThreads);
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        if (threadIdx.x + k * kThreads < n_vec) reinterpret_cast<uint4 *>(x_s)[threadIdx.x + k * kThreads] = v[k];
    }
    if (norm) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kSums; ++k) sum += part[k];
        for (int i = threadIdx.x + 32 * kSums; i < p.n_sum_sq; i += 32) sum += __ldcg(sums + i);
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        if (threadIdx.x == 0) inv_rms_s = rsqrtf(sum / float(p.n_in) + p.norm_eps);
    }
    consumer_sync();
    return p.x_sum_sq ? inv_rms_s : 1.0f;
}

// A block's walk over the weights of the step's GEMV ops, in op order (the producer's view).
struct OpStream {
    hp_cuda_gemv::StagedProducer producer;
    int op = -1;
    // To the next GEMV op with rows for this block, unless the current one has items left.
    __device__ void advance(const StepParams &s) {
        while (producer.done() && ++op < s.n_op) {
            const StepOp &next = s.ops[op];
            if (next.kind != kOpAttention) producer.start(next.gemv, next.kind == kOpSiluMul ? 2 : 1, next.unit_rows, kStepStageBytes);
        }
    }
    __device__ bool done(const StepParams &s) const { return op >= s.n_op; }
};

// Warps 0..kStagedWarps-1 consume (run the ops), warp kStagedWarps produces: its first lane walks
// the block's items of every GEMV op and bulk-copies each into the ring once its stage is free (the
// consumer warps arrive on the stage's empty barrier); with persistent_l2_items, when it reaches an
// op, it also prefetches into L2 that many of the op's items past the first ring's worth.
template <hp_dtype KV, int D>
__global__ void __launch_bounds__(kThreads + 32, 1) step_kernel(const __grid_constant__ StepParams s) {
    extern __shared__ __align__(128) unsigned char ring[];  // kStepStages stages, then x (bf16) or the attention scratch
    __shared__ float partial[hp_cuda_gemv::kStagedPartials<kStepStageBytes>];
    __shared__ __align__(8) uint64_t full[kStepStages], empty[kStepStages];
    __shared__ __align__(16) unsigned char op_storage[sizeof(StepOp)];  // the consumers' op, the step's pointers patched in
    StepOp &op = *reinterpret_cast<StepOp *>(op_storage);
    unsigned char *scratch = ring + kStepStages * kStepStageBytes;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        for (int stage = 0; stage < kStepStages; ++stage) {
            hp_cuda_gemv::mbarrier_init(&full[stage], 1);
            hp_cuda_gemv::mbarrier_init(&empty[stage], kStagedWarps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == kStagedWarps) {  // the producer
        if (lane != 0) return;
        OpStream fill;
        fill.advance(s);
        for (int n = 0; !fill.done(s); ++n) {
            const int stage = n % kStepStages;
            if (n >= kStepStages) hp_cuda_gemv::mbarrier_wait(&empty[stage], uint32_t(n / kStepStages - 1) & 1u);
            fill.producer.produce(ring + stage * kStepStageBytes, &full[stage]);
            const int op = fill.op;
            fill.advance(s);
            if (kStepL2Items > 0 && fill.op != op && !fill.done(s)) {
                // The next op's items past the ring's worth, into L2 while the ops before it still run.
                OpStream ahead = fill;
                for (int k = 0; k < kStepStages + kStepL2Items && !ahead.producer.done(); ++k) {
                    if (k < kStepStages) {
                        const __nv_bfloat16 *src[2];
                        ahead.producer.take(src);
                    } else {
                        ahead.producer.prefetch_l2();
                    }
                }
            }
        }
        return;
    }

    // The consumers. Each op's description is copied into shared memory while the block waits for
    // the op before it to finish everywhere.
    auto load_op = [&](int i) {
        constexpr int kWords = int(sizeof(StepOp) / sizeof(uint4));
        for (int w = threadIdx.x; w < kWords; w += kThreads) reinterpret_cast<uint4 *>(op_storage)[w] = __ldg(reinterpret_cast<const uint4 *>(s.ops + i) + w);
        consumer_sync();
        if (threadIdx.x == 0 && op.logits) {
            op.gemv.x_rows = s.logit_rows;
            op.gemv.segment[0].y = s.logits;
        }
    };
    auto release = [&](int stage) {
        __syncwarp();
        if (lane == 0) hp_cuda_gemv::mbarrier_arrive(&empty[stage]);
    };
    auto trace = [&](int i, int point) {
        if (HP_CUDA_PERSISTENT_TRACE && s.trace && threadIdx.x == 0) s.trace[(size_t(i) * gridDim.x + blockIdx.x) * 4 + point] = global_timer();
    };
    load_op(0);
    int item = 0;  // the consumers' item count over the step (stage and phase of the ring)
    for (int i = 0; i < s.n_op; ++i) {
        if (i > 0) grid_wait(s.barrier, unsigned(i) * gridDim.x);
        else consumer_sync();
        trace(i, 0);
        if (op.kind == kOpAttention) {
            trace(i, 1);
            attention_op<KV, D>(s, op.attention, reinterpret_cast<float *>(scratch));
        } else {
            const Params &p = op.gemv;
            auto *x_s = reinterpret_cast<__nv_bfloat16 *>(scratch);
            const float inv_rms = load_input(p, x_s);
            trace(i, 1);
            int seg_begin[hp_cuda_gemv::kMaxSegments + 1];
            hp_cuda_gemv::segment_begins(p, seg_begin);
            int begin, end;
            hp_cuda_gemv::staged_block_rows(seg_begin[p.n_segment], op.unit_rows, blockIdx.x, gridDim.x, begin, end);
            auto consume = [&](auto epi, auto norm) {
                hp_cuda_gemv::staged_consume<decltype(epi)::value, decltype(norm)::value, kStepStages, kStepStageBytes>(
                    p, seg_begin, begin, end, ring, full, x_s, inv_rms, partial, item, release, consumer_sync);
            };
            using Store = std::integral_constant<int, hp_cuda_gemv::kStore>;
            using Accumulate = std::integral_constant<int, hp_cuda_gemv::kAccumulate>;
            using SiluMul = std::integral_constant<int, hp_cuda_gemv::kSiluMul>;
            if (p.x_sum_sq) {
                if (op.kind == kOpStore) consume(Store{}, std::true_type{});
                else if (op.kind == kOpAccumulate) consume(Accumulate{}, std::true_type{});
                else consume(SiluMul{}, std::true_type{});
            } else {
                if (op.kind == kOpStore) consume(Store{}, std::false_type{});
                else if (op.kind == kOpAccumulate) consume(Accumulate{}, std::false_type{});
                else consume(SiluMul{}, std::false_type{});
            }
        }
        if (HP_CUDA_PERSISTENT_TRACE) consumer_sync();
        trace(i, 2);
        if (i + 1 < s.n_op) grid_arrive(s.barrier);
        trace(i, 3);
        if (i + 1 < s.n_op) load_op(i + 1);
    }
}

// Dynamic shared memory of the step kernel: the ring, then the larger of x and the attention scratch.
inline size_t step_shared_bytes(int max_input, int d_head) {
    const size_t attention = size_t(attention_scratch_floats(d_head)) * sizeof(float);
    return size_t(kStepStages) * kStepStageBytes + std::max(size_t(max_input) * 2, attention);
}

// Whether a GEMV of input width n_in fits the staged consumer of the step kernel: a power of two
// from 256 (whole 256-element pieces per row) to kMaxInput.
inline bool step_gemv_fits(int n_in) { return n_in >= 256 && n_in <= kMaxInput && (n_in & (n_in - 1)) == 0; }

}  // namespace hp_cuda_step
