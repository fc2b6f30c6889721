// The CUDA baseline forward pass: the starting point the tuning loop improves on.
//
// Residual stream in float32; projections take bf16 weights and bf16 activations and accumulate in
// float32: the decode GEMV of gemv.cuh for steps of at most gemv_max_tokens tokens, else one cuBLAS
// GEMM (o_proj and down_proj accumulate straight into the residual). RMSNorm is folded into the
// decode GEMVs (the residual GEMV writes the next norm's operand and sums of x^2, the next GEMV
// scales by 1/rms), else one kernel writes the bf16 GEMM input; bias + q/k norm + RoPE + KV write
// are one kernel per head, or the q/k/v skinny GEMM's epilogue (knob skinny_head); attention is
// flash-decoding paged attention with GQA (attention.cuh; the older split + reduce kernels for other
// shapes); MoE (moe.cuh) routes and groups the tokens by
// expert on the device, reads each chosen expert once for all its tokens and adds the slots in a
// fixed order (knob moe_kernel 0: the first per-(token, slot) kernels of kernels.cuh).
// f32/f16 checkpoints get bf16 copies of their matrices at create().
//
// CUDA-graph capturable for any batch: forward() enqueues work on hp_services.stream only, reads
// no batch array on the host, never synchronizes and never allocates unless the step outgrows the
// workspace (refused while the stream is capturing). Launch shapes depend only on the batch's
// scalars (n_token, n_seq, max_blocks_per_seq, n_logit_row), so a captured graph stays valid for
// new token ids, positions and block tables of the same shape.
// Device convention (docs/cuda.md): batch arrays and outputs are device pointers.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <hotpass/forward_abi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>
#include <type_traits>
#include <vector>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "gemv.cuh"
#include "kernels.cuh"
#include "knobs.h"
#include "l2_prefetch.h"
#include "moe.cuh"
#include "moe_fused.cuh"
#include "step_kernel.cuh"

namespace {

using namespace hp_cuda_baseline;

bool present(const hp_tensor &tensor) { return tensor.data != nullptr; }
unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// inv_freq[i] = theta^(-2i/d_head), with Llama 3's scaling (the references' rope_inv_freq).
std::vector<float> rope_inv_freq(const hp_config &config) {
    std::vector<float> inv_freq(static_cast<size_t>(config.d_head / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) {
        inv_freq[i] = 1.0f / std::pow(config.rope_theta, float(2 * i) / float(config.d_head));
    }
    if (config.rope_type != HP_ROPE_LLAMA3) return inv_freq;
    const float original = float(config.rope_original_max_position);
    const float low_freq_wavelen = original / config.rope_low_freq_factor;
    const float high_freq_wavelen = original / config.rope_high_freq_factor;
    for (float &freq : inv_freq) {
        const float wavelen = 2.0f * float(M_PI) / freq;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
            freq = freq / config.rope_factor;
            continue;
        }
        const float smooth = (original / wavelen - config.rope_low_freq_factor) /
                             (config.rope_high_freq_factor - config.rope_low_freq_factor);
        freq = (1.0f - smooth) * freq / config.rope_factor + smooth * freq;
    }
    return inv_freq;
}

// A projection's weight as cuBLAS reads it: bf16 [n_out][n_in], row-major.
struct Matrix {
    const __nv_bfloat16 *w = nullptr;
    int n_out = 0, n_in = 0;
};

struct LayerMatrices {
    Matrix wq, wk, wv, wo, w_gate, w_up, w_down, router, shared_gate, shared_up, shared_down, shared_expert_gate;
    const __nv_bfloat16 **expert_tables = nullptr;  // device: gate[E], up[E], down[E]
    uint64_t qkv_end = 0, o_end = 0, gate_up_end = 0, down_end = 0;  // ends of its GEMVs' weights in the WeightStream
    bool experts_aligned = false;                    // every expert matrix 16-byte aligned (moe.cuh's 16-byte loads)
};

constexpr uint64_t kL2Lookahead = uint64_t(HP_CUDA_L2_PREFETCH_MB) << 20;  // GEMVs' prefetch window past their own weights
constexpr uint64_t kL2IdleLookahead = kL2Lookahead + (uint64_t(HP_CUDA_L2_PREFETCH_IDLE_MB) << 20);  // head and attention kernels'

constexpr size_t kTokenSplits = 8192;  // capacity of the attention partials, in (token, split) pairs

struct Activations {
    int capacity = 0;
    float *x, *q, *k, *v, *gate, *up, *router, *expert_weight, *expert_out, *shared_out, *shared_logit;
    float *sum_sq;  // [n][ceil(d_model / 16)]: partial sums of x^2 of the folded RMSNorm (gemv.cuh)
    __nv_bfloat16 *h, *attn, *act;
    int32_t *expert_index, *token_seq;
    // Grouped MoE (moe.cuh): act in grouped order, the per-expert lists, 1/rms of the folded FFN norm.
    __nv_bfloat16 *expert_act;  // [n * k][d_ff_expert]
    int32_t *n_active, *active_expert, *group_start, *group_pair;
    float *inv_rms;
    // Knob gemm_qkv: q/k/v above the decode kernels' limit as one cuBLAS batch (gemm_qkv), its output
    // [n][q | k | v] (f32), and the batch's pointer arrays (device).
    float *qkv;
    void **qkv_ptrs;  // [n_layer][parts] weights, then [parts] inputs (h), then [parts] outputs (into qkv)
    float *split_partial;  // knob gemm_split_k: [gemm_split_k][min(n, gemm_split_k_max_tokens)][d_model] partial products
};

struct BaselineState {
    const hp_model *model;
    hp_services services;
    cudaStream_t stream;
    cublasHandle_t cublas = nullptr;
    float *inv_freq = nullptr;
    float *partial = nullptr;  // attention partials [kTokenSplits * n_head][d_head + 2]
    int32_t *attn_counters = nullptr;  // flash-decoding split counters [kTokenSplits][n_head_kv] ([token][n_head_kv * attn_fd_head_split] used), zero between steps
    float *oproj_partial = nullptr;     // attn_fd_oproj: each kv head's o_proj product, f32 [n_head_kv][d_model]
    int32_t *oproj_counters = nullptr;  // attn_fd_oproj: arrivals per row range, [kFdMaxCluster], zero between steps
    bool oproj_logged = false;          // attn_fd_oproj: the first step that took it has said so
    unsigned long long *moe_barrier = nullptr;  // the fused one-token MoE kernel's grid barrier counter (moe_fused.cuh), zero at create
    float *moe_partial = nullptr;               // its split down's per-block partials, f32 [SMs][d_model] (moe_fused_split_down)
    unsigned long long *moe_logit_tags = nullptr;  // its tagged logits, [n_expert], zero at create (moe_fused_logit_flags)
    int *moe_items = nullptr;  // its gate/up items' claim counter, zero between launches (moe_fused_dynamic_items)
    uint32_t *moe_act_tags = nullptr;  // its act as tagged words, [k][d_ff_expert], zero at create (moe_fused_act_tags)
    unsigned long long *moe_trace = nullptr;  // HP_CUDA_MOE_FUSED_TRACE builds: [n_layer][SMs][kFusedTracePoints] of the last step
    unsigned long long *attn_trace = nullptr;  // HP_CUDA_ATTN_TRACE builds: [n_layer][kFdTraceBlocks][kFdTracePoints] of the last step
    Matrix lm_head;
    std::vector<LayerMatrices> layers;
    NormResidual residual{};         // knob gemm_split_k: the residual add the next norm does (project_split)
    bool residual_pending = false;
    int qkv_parts = 0;  // knob gemm_qkv: GEMMs of the kv width in the q/k/v batch (n_head / n_head_kv + 2), 0: not taken
    WeightStream weight_stream;  // the L2 prefetch plan (l2_prefetch.h); empty: no prefetch
    bool prefetch_step = false;  // this step prefetches (a dense decode step on the GEMV path)
    Activations act{};
    // The persistent one-token step (step_kernel.cuh), where the model fits it: its op list (device,
    // rebuilt whenever the activations move), the grid barrier, the kernel and its shared memory.
    hp_cuda_step::StepOp *step_ops = nullptr;
    std::vector<hp_cuda_step::StepOp> step_ops_host;
    unsigned *step_barrier = nullptr;
    void (*step_kernel)(hp_cuda_step::StepParams) = nullptr;
    size_t step_shared = 0;
    int step_grid = 0;
    unsigned long long *step_trace = nullptr;  // HP_CUDA_PERSISTENT_TRACE builds: the last step's op times per block
    std::vector<void *> allocations;
    std::vector<void *> activation_allocations;
};

void *state_alloc(BaselineState &state, size_t bytes, std::vector<void *> &list) {
    void *ptr = state.services.alloc(state.services.ctx, std::max<size_t>(bytes, 16), 256);
    if (ptr) list.push_back(ptr);
    return ptr;
}

void log_message(const BaselineState &state, hp_log_level level, const char *what, const char *detail) {
    if (!state.services.log) return;
    char message[800];
    std::snprintf(message, sizeof message, "cuda-baseline: %s: %s", what, detail);
    state.services.log(state.services.ctx, level, message);
}

int max_ff_width(const hp_config &c) { return std::max({c.d_ff, c.d_ff_expert, c.d_ff_shared_expert, 1}); }

void build_step_ops(BaselineState &state);

// Activations for n_token tokens (never while capturing: the caller checks).
bool reserve(BaselineState &state, int n_token) {
    if (n_token <= state.act.capacity) return true;
    cudaStreamSynchronize(state.stream);
    for (void *ptr : state.activation_allocations) state.services.free(state.services.ctx, ptr);
    state.activation_allocations.clear();
    const hp_config &c = state.model->config;
    const size_t n = size_t(std::max(n_token, 16)), f = sizeof(float), b = sizeof(__nv_bfloat16);
    const size_t q_width = size_t(c.n_head) * c.d_head, kv_width = size_t(c.n_head_kv) * c.d_head;
    const size_t k = size_t(std::max(c.n_expert_used, 1)), ff = size_t(max_ff_width(c));
    bool all_taken = true;  // a failed allocation leaves capacity 0 (create() reports out of memory)
    auto take = [&](size_t bytes) {
        void *ptr = state_alloc(state, bytes, state.activation_allocations);
        all_taken = all_taken && ptr;
        return ptr;
    };
    Activations &a = state.act;
    a.x = static_cast<float *>(take(n * c.d_model * f));
    a.q = static_cast<float *>(take(n * q_width * f));
    a.k = static_cast<float *>(take(2 * n * kv_width * f));
    a.v = a.k + n * kv_width;  // one allocation: gemm_pair's output stride
    a.gate = static_cast<float *>(take(2 * n * ff * f));
    a.up = a.gate + n * ff;  // one allocation: gemm_pair's output stride
    a.router = static_cast<float *>(take(n * std::max(c.n_expert, 1) * f));
    a.expert_weight = static_cast<float *>(take(n * k * f));
    a.expert_out = static_cast<float *>(take(n * k * c.d_model * f));
    a.shared_out = static_cast<float *>(take(n * c.d_model * f));
    a.shared_logit = static_cast<float *>(take(n * f));
    a.h = static_cast<__nv_bfloat16 *>(take(n * c.d_model * b));
    a.attn = static_cast<__nv_bfloat16 *>(take(n * q_width * b));
    a.act = static_cast<__nv_bfloat16 *>(take(n * k * ff * b));
    a.expert_index = static_cast<int32_t *>(take(n * k * sizeof(int32_t)));
    a.token_seq = static_cast<int32_t *>(take(n * sizeof(int32_t)));
    a.sum_sq = static_cast<float *>(take(n * size_t((c.d_model + 15) / 16) * f));
    const size_t n_expert = size_t(std::max(c.n_expert, 1)), i32 = sizeof(int32_t);
    a.expert_act = static_cast<__nv_bfloat16 *>(take(n * k * size_t(std::max(c.d_ff_expert, 1)) * b));
    a.n_active = static_cast<int32_t *>(take(i32));
    a.active_expert = static_cast<int32_t *>(take(n_expert * i32));
    a.group_start = static_cast<int32_t *>(take((n_expert + 1) * i32));
    a.group_pair = static_cast<int32_t *>(take(n * k * i32));
    a.inv_rms = static_cast<float *>(take(n * f));
    if (HP_CUDA_GEMM_SPLIT_K > 1) {
        a.split_partial = static_cast<float *>(take(size_t(HP_CUDA_GEMM_SPLIT_K) * std::min<size_t>(n, HP_CUDA_GEMM_SPLIT_K_MAX_TOKENS) * c.d_model * f));
    }
    if (state.qkv_parts > 0) {
        // gemm_qkv's batch: part j < parts - 2 is q's rows [j kv_width, (j + 1) kv_width), then k, then v,
        // each writing its columns of a.qkv's rows.
        const size_t parts = size_t(state.qkv_parts), n_layer = state.layers.size();
        a.qkv = static_cast<float *>(take(n * (q_width + 2 * kv_width) * f));
        a.qkv_ptrs = static_cast<void **>(take((n_layer + 2) * parts * sizeof(void *)));
        // A copy from pageable memory returns once `host` is staged, so the vector may go at the end of the block.
        std::vector<const void *> host;
        for (const LayerMatrices &m : state.layers) {
            for (size_t j = 0; j + 2 < parts; ++j) host.push_back(m.wq.w + j * kv_width * size_t(m.wq.n_in));
            host.push_back(m.wk.w);
            host.push_back(m.wv.w);
        }
        for (size_t j = 0; j < parts; ++j) host.push_back(a.h);
        for (size_t j = 0; j < parts; ++j) host.push_back(a.qkv + j * kv_width);
        all_taken = all_taken && cudaMemcpyAsync(a.qkv_ptrs, host.data(), host.size() * sizeof(void *), cudaMemcpyHostToDevice, state.stream) == cudaSuccess;
    }
    a.capacity = all_taken ? int(n) : 0;
    if (a.capacity > 0 && state.step_ops) build_step_ops(state);
    return a.capacity > 0;
}

// Y[n_row][n_out] (f32) = X[n_row][n_in] (bf16) W^T (+ beta * Y): one cuBLAS GEMM, f32 accumulation.
bool gemm(BaselineState &state, const Matrix &w, const __nv_bfloat16 *x, float *y, int n_row, float beta, int ldc = 0) {
    const float alpha = 1.0f;
    const cublasStatus_t status = cublasGemmEx(state.cublas, CUBLAS_OP_T, CUBLAS_OP_N, w.n_out, n_row, w.n_in, &alpha, w.w, CUDA_R_16BF,
                                               w.n_in, x, CUDA_R_16BF, w.n_in, &beta, y, CUDA_R_32F, ldc ? ldc : w.n_out,
                                               CUBLAS_COMPUTE_32F, cublasGemmAlgo_t(HP_CUDA_GEMM_ALGO));
    if (status != CUBLAS_STATUS_SUCCESS) log_message(state, HP_LOG_ERROR, "cublasGemmEx", cublasGetStatusString(status));
    return status == CUBLAS_STATUS_SUCCESS;
}

// Knob gemm_qkv: q, k and v of every layer as one cuBLAS batch of GEMMs of the kv width (q's row blocks, then k and
// v; no copy of the weights), where the shapes allow it: n_head a multiple of n_head_kv, one input width. Returns
// the batch's size, 0 where not taken.
int qkv_batch_parts(const BaselineState &state) {
    const hp_config &c = state.model->config;
    if (!HP_CUDA_GEMM_QKV || c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) return 0;
    for (const LayerMatrices &m : state.layers) {
        if (m.wq.n_out != c.n_head * c.d_head || m.wk.n_out != c.n_head_kv * c.d_head || m.wv.n_out != m.wk.n_out || m.wk.n_out <= 0 ||
            m.wq.n_in != m.wk.n_in || m.wq.n_in != m.wv.n_in) {
            return 0;
        }
    }
    return c.n_head / c.n_head_kv + 2;
}

// a.qkv[t] = [q | k | v] of token t = h[t] [Wq; Wk; Wv]^T for `layer` (f32): one cublasGemmBatchedEx (knob gemm_qkv).
bool gemm_qkv(BaselineState &state, int layer, int n_row) {
    const LayerMatrices &m = state.layers[size_t(layer)];
    const size_t parts = size_t(state.qkv_parts), n_layer = state.layers.size();
    void **ptrs = state.act.qkv_ptrs;
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status = cublasGemmBatchedEx(
        state.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m.wk.n_out, n_row, m.wq.n_in, &alpha, ptrs + size_t(layer) * parts, CUDA_R_16BF, m.wq.n_in,
        ptrs + n_layer * parts, CUDA_R_16BF, m.wq.n_in, &beta, ptrs + (n_layer + 1) * parts, CUDA_R_32F, m.wq.n_out + 2 * m.wk.n_out, int(parts),
        CUBLAS_COMPUTE_32F, cublasGemmAlgo_t(HP_CUDA_GEMM_ALGO));
    if (status != CUBLAS_STATUS_SUCCESS) log_message(state, HP_LOG_ERROR, "cublasGemmBatchedEx", cublasGetStatusString(status));
    return status == CUBLAS_STATUS_SUCCESS;
}

// Y0 = X W0^T and Y1 = X W1^T (f32, n_row rows each) as one cublasGemmStridedBatchedEx of two: one
// launch instead of two (knob gemm_pair: gate and up, k and v). The batch stride is the distance between
// the two matrices and between the two outputs, which must be positive (W1 above W0 in memory, as a
// loader that keeps a checkpoint's order, gate_proj before up_proj and k_proj before v_proj, places
// them; a.up follows a.gate and a.v follows a.k in one allocation); otherwise, or with the knob off, two GEMMs.
bool gemm_pair(BaselineState &state, const Matrix &w0, const Matrix &w1, const __nv_bfloat16 *x, float *y0, float *y1, int n_row) {
    // Element distances between separate allocations: as addresses (bf16 and f32 buffers are aligned to their size).
    const long long stride_w = (long long)(reinterpret_cast<uintptr_t>(w1.w) - reinterpret_cast<uintptr_t>(w0.w)) / 2;
    const long long stride_y = (long long)(reinterpret_cast<uintptr_t>(y1) - reinterpret_cast<uintptr_t>(y0)) / 4;
    if (!HP_CUDA_GEMM_PAIR || w0.n_out != w1.n_out || w0.n_in != w1.n_in || stride_w <= 0 || stride_y < int64_t(n_row) * w0.n_out) {
        return gemm(state, w0, x, y0, n_row, 0.0f) && gemm(state, w1, x, y1, n_row, 0.0f);
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status = cublasGemmStridedBatchedEx(
        state.cublas, CUBLAS_OP_T, CUBLAS_OP_N, w0.n_out, n_row, w0.n_in, &alpha, w0.w, CUDA_R_16BF, w0.n_in, stride_w, x, CUDA_R_16BF,
        w0.n_in, 0, &beta, y0, CUDA_R_32F, w0.n_out, stride_y, 2, CUBLAS_COMPUTE_32F, cublasGemmAlgo_t(HP_CUDA_GEMM_ALGO));
    if (status != CUBLAS_STATUS_SUCCESS) log_message(state, HP_LOG_ERROR, "cublasGemmStridedBatchedEx", cublasGetStatusString(status));
    return status == CUBLAS_STATUS_SUCCESS;
}

void add_bias(BaselineState &state, float *y, int n_row, const hp_tensor &b) {
    if (!present(b) || n_row == 0) return;
    const int n_out = int(b.shape[0]);
    add_bias_kernel<<<blocks_for(int64_t(n_row) * n_out, 256), 256, 0, state.stream>>>(y, n_out, int64_t(n_row) * n_out, b.dtype, b.data);
}

// Decode steps use the kernels of gemv.cuh (the GEMV, the skinny GEMM) with the folded norm, larger
// ones cuBLAS: up to gemv_max_tokens tokens, in models with routed experts up to
// gemv_max_tokens_moe (knobs.json: qwen3-30b-a3b at 32 tokens measured slower on that path).
bool use_gemv(const BaselineState &state, int n_row) {
    const int limit = state.model->config.n_expert > 0 ? std::min(HP_CUDA_GEMV_MAX_TOKENS, HP_CUDA_GEMV_MAX_TOKENS_MOE) : HP_CUDA_GEMV_MAX_TOKENS;
    return n_row <= limit;
}

// Knob skinny_qkv_max_tokens: a step above the decode kernels' limit (cuBLAS for its projections)
// whose q/k/v still run as one skinny-GEMM launch (its input the norm kernel's output).
// Models with routed experts too (they leave the decode kernels above gemv_max_tokens_moe).
bool qkv_on_skinny(const BaselineState &state, int n_row) {
    return !use_gemv(state, n_row) && n_row <= HP_CUDA_SKINNY_QKV_MAX_TOKENS;
}

hp_cuda_gemv::Segment gemv_segment(const Matrix &w, void *y, const hp_tensor *bias = nullptr) {
    hp_cuda_gemv::Segment segment;
    segment.w = w.w;
    segment.n_out = w.n_out;
    segment.y = y;
    if (bias && present(*bias)) {
        segment.bias = bias->data;
        segment.bias_dtype = bias->dtype;
    }
    return segment;
}

// RMSNorm folded into the decode GEMVs (knob gemv_norm, gemv.cuh): the residual GEMV before a norm
// writes a.h = bf16(x * weight) and a.sum_sq (partial sums of x^2), the GEMV after it reads a.h
// (rows `rows` when given) and scales by 1/rms. Without it a.h comes from the norm kernel.
struct FoldedNorm {
    const int32_t *rows = nullptr;  // device, optional
};

// The launches knob skinny_moe_parts can put on the skinny GEMM in models with routed experts.
enum SkinnyPart : int { kPartOther = 0, kPartQkv = 1, kPartOProj = 2, kPartLmHead = 4 };

void set_input(const BaselineState &state, hp_cuda_gemv::Params &p, const __nv_bfloat16 *x, const FoldedNorm *norm, SkinnyPart part = kPartOther) {
    p.x = x;
    // Models with routed experts keep the GEMV unless knob skinny_moe (qwen3-30b-a3b batch 8: 12.72 ms
    // a step with the skinny GEMM against 10.07 without; knobs.json), or skinny_moe_parts names the launch.
    p.skinny = HP_CUDA_SKINNY_MOE || state.model->config.n_expert == 0 || (HP_CUDA_SKINNY_MOE_PARTS & part) != 0;
    if (!norm) return;
    const hp_config &c = state.model->config;
    p.x_rows = norm->rows;
    p.x_sum_sq = state.act.sum_sq;
    p.n_sum_sq = (c.d_model + hp_cuda_gemv::kTileRows - 1) / hp_cuda_gemv::kTileRows;
    p.norm_eps = c.norm_eps;
}

// out[r] = bf16(RMSNorm(x[rows ? rows[r] : r]) * weight): the input of projections that cannot fold it.
// With `embed`, the first layer's: x filled from the embedding table first (kernels.cuh launch_rms_norm).
// A residual add left by project_split (knob gemm_split_k) is done here first: the callers split only where a norm
// of every row (no gathered rows, no embedding) follows; false, with nothing launched, where that did not hold.
bool rms_norm(BaselineState &state, const hp_tensor &weight, const int32_t *rows, int n_row, __nv_bfloat16 *out,
              const NormEmbed *embed = nullptr) {
    const hp_config &c = state.model->config;
    const NormResidual *residual = state.residual_pending ? &state.residual : nullptr;
    state.residual_pending = false;
    if (launch_rms_norm(HP_CUDA_NORM_VEC, state.stream, state.act.x, rows, n_row, c.d_model, out, weight.dtype, weight.data, c.norm_eps, embed,
                        residual)) {
        return true;
    }
    log_message(state, HP_LOG_ERROR, "rms_norm", "a split residual add left before a norm of gathered rows or of the embedding");
    return false;
}

// The step's first launch: the embedding rows of `token_ids` into x, the first layer's norm of them into h, and
// (with seq_token_start) the token -> sequence map.
bool embed_and_norm(BaselineState &state, const int32_t *token_ids, int n_token, const int32_t *seq_token_start, int n_seq) {
    const hp_model &model = *state.model;
    NormEmbed embed;
    embed.token_ids = token_ids;
    embed.dtype = model.token_embd.dtype;
    embed.table = model.token_embd.data;
    embed.seq_token_start = seq_token_start;
    embed.n_seq = n_seq;
    embed.token_seq = state.act.token_seq;
    state.residual_pending = false;  // a new step: nothing of a failed one's is left to add
    return rms_norm(state, model.layers[0].attn_norm, nullptr, n_token, state.act.h, &embed);
}

// Knob gemm_split_k: a residual projection (o_proj, down_proj) on cuBLAS of at most gemm_split_k_max_tokens rows
// split along its inputs into gemm_split_k slices, one strided batch of products into a.split_partial, whose sum
// (and the bias) the next rms_norm adds into x before normalising it: more blocks for a skinny product, and
// cuBLAS's own split-K reduction and bias launch folded into the norm. Only where a norm of every row of x follows.
bool use_split(const BaselineState &state, const Matrix &w, int n_row) {
    constexpr int kSplit = HP_CUDA_GEMM_SPLIT_K > 1 ? HP_CUDA_GEMM_SPLIT_K : 1;  // (the default 0 is off: no division by it)
    return HP_CUDA_GEMM_SPLIT_K > 1 && !use_gemv(state, n_row) && n_row <= HP_CUDA_GEMM_SPLIT_K_MAX_TOKENS && w.n_out == state.model->config.d_model &&
           w.n_in % (8 * kSplit) == 0;
}

bool project_split(BaselineState &state, const Matrix &w, const __nv_bfloat16 *x, int n_row, const hp_tensor *bias) {
    const int split = HP_CUDA_GEMM_SPLIT_K > 1 ? HP_CUDA_GEMM_SPLIT_K : 1, k = w.n_in / split;  // only called where use_split
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status = cublasGemmStridedBatchedEx(
        state.cublas, CUBLAS_OP_T, CUBLAS_OP_N, w.n_out, n_row, k, &alpha, w.w, CUDA_R_16BF, w.n_in, k, x, CUDA_R_16BF, w.n_in, k, &beta,
        state.act.split_partial, CUDA_R_32F, w.n_out, (long long)w.n_out * n_row, split, CUBLAS_COMPUTE_32F, cublasGemmAlgo_t(HP_CUDA_GEMM_ALGO));
    if (status != CUBLAS_STATUS_SUCCESS) {
        log_message(state, HP_LOG_ERROR, "cublasGemmStridedBatchedEx", cublasGetStatusString(status));
        return false;
    }
    state.residual = NormResidual{state.act.split_partial, split, HP_DTYPE_F32, nullptr};
    if (bias && present(*bias)) {
        state.residual.bias_dtype = bias->dtype;
        state.residual.bias = bias->data;
    }
    state.residual_pending = true;
    return true;
}

// Y[n_row][n_out] (f32) = X W^T + bias, or Y += X W^T + bias (accumulate): the GEMV for decode
// steps, else cuBLAS and a bias kernel.
// Decode GEMV only: with `norm` the input x holds the folded norm's operand (rows norm->rows) and
// the result is scaled by 1/rms; with `norm_out` (accumulate) the GEMV also writes the next
// norm's a.h and a.sum_sq for that weight.
// `prefetch_front`: with an L2 prefetch plan, the end of w's bytes in the weight stream.
bool project(BaselineState &state, const Matrix &w, const __nv_bfloat16 *x, float *y, int n_row, bool accumulate,
             const hp_tensor *bias = nullptr, const FoldedNorm *norm = nullptr, const hp_tensor *norm_out = nullptr,
             uint64_t prefetch_front = 0, SkinnyPart part = kPartOther) {
    if (n_row == 0) return true;
    if (!use_gemv(state, n_row)) {
        const bool ok = gemm(state, w, x, y, n_row, accumulate ? 1.0f : 0.0f);
        if (bias) add_bias(state, y, n_row, *bias);
        return ok;
    }
    hp_cuda_gemv::Params p;
    set_input(state, p, x, norm, part);
    p.n_in = w.n_in;
    p.n_token = n_row;
    p.n_segment = 1;
    p.segment[0] = gemv_segment(w, y, bias);
    if (state.prefetch_step && prefetch_front) p.prefetch = state.weight_stream.next(prefetch_front, kL2Lookahead);
    if (norm_out) {
        p.norm_out.h = state.act.h;
        p.norm_out.w = norm_out->data;
        p.norm_out.w_dtype = norm_out->dtype;
        p.norm_out.sum_sq = state.act.sum_sq;
    }
    if (accumulate) hp_cuda_gemv::launch<hp_cuda_gemv::kAccumulate>(p, state.stream);
    else hp_cuda_gemv::launch<hp_cuda_gemv::kStore>(p, state.stream);
    return true;
}

// act[n_row][width] (bf16) = silu(X Wg^T + bg) * (X Wu^T + bu): one fused GEMV for decode steps
// (HP_CUDA_GEMV_FUSE), else two projections (on cuBLAS one batched GEMM, knob gemm_pair) and the
// SiLU kernel (gate and up as f32 scratch).
// Decode GEMV only: with `norm` the input x holds the folded norm's operand (see project).
bool gate_up(BaselineState &state, const Matrix &w_gate, const Matrix &w_up, const hp_tensor *b_gate, const hp_tensor *b_up,
             const __nv_bfloat16 *x, int n_row, __nv_bfloat16 *act, const FoldedNorm *norm = nullptr, uint64_t prefetch_front = 0) {
    if (n_row == 0) return true;
    const Activations &a = state.act;
    if (HP_CUDA_GEMV_FUSE && use_gemv(state, n_row)) {
        hp_cuda_gemv::Params p;
        set_input(state, p, x, norm);
        p.n_in = w_gate.n_in;
        p.n_token = n_row;
        p.n_segment = 1;
        p.segment[0] = gemv_segment(w_gate, act, b_gate);
        p.segment[0].w2 = w_up.w;
        if (state.prefetch_step && prefetch_front) p.prefetch = state.weight_stream.next(prefetch_front, kL2Lookahead);
        if (b_up && present(*b_up)) {
            p.segment[0].bias2 = b_up->data;
            p.segment[0].bias2_dtype = b_up->dtype;
        }
        hp_cuda_gemv::launch<hp_cuda_gemv::kSiluMul>(p, state.stream);
        return true;
    }
    bool ok;
    if (!use_gemv(state, n_row)) {
        ok = gemm_pair(state, w_gate, w_up, x, a.gate, a.up, n_row);
        if (b_gate) add_bias(state, a.gate, n_row, *b_gate);
        if (b_up) add_bias(state, a.up, n_row, *b_up);
    } else {
        ok = project(state, w_gate, x, a.gate, n_row, false, b_gate, norm) && project(state, w_up, x, a.up, n_row, false, b_up, norm);
    }
    silu_mul_bf16_kernel<<<blocks_for(int64_t(n_row) * w_gate.n_out, 256), 256, 0, state.stream>>>(a.gate, a.up, act,
                                                                                                  int64_t(n_row) * w_gate.n_out);
    return ok;
}

// The weight as bf16: itself, or a converted private copy.
bool as_matrix(BaselineState &state, const hp_tensor &tensor, Matrix &out) {
    if (!present(tensor)) return true;
    out.n_out = int(tensor.shape[0]);
    out.n_in = tensor.n_dim > 1 ? int(tensor.shape[1]) : 1;
    if (tensor.dtype == HP_DTYPE_BF16) {
        out.w = static_cast<const __nv_bfloat16 *>(tensor.data);
        return true;
    }
    const int64_t n = int64_t(out.n_out) * out.n_in;
    auto *copy = static_cast<__nv_bfloat16 *>(state_alloc(state, size_t(n) * sizeof(__nv_bfloat16), state.allocations));
    if (!copy) return false;
    to_bf16_kernel<<<blocks_for(std::min<int64_t>(n, 1 << 22), 256), 256, 0, state.stream>>>(tensor.dtype, tensor.data, copy, n);
    out.w = copy;
    return true;
}

// The weights of a dense decode step in GEMV order (l2_prefetch.h); models with MoE layers get no plan.
void plan_weight_stream(BaselineState &state) {
    const hp_config &c = state.model->config;
    for (int layer = 0; layer < c.n_layer; ++layer) {
        if (state.model->layers[layer].is_moe) return;
    }
    WeightStream &stream = state.weight_stream;
    auto bytes = [](const Matrix &m) { return uint64_t(m.n_out) * uint64_t(m.n_in) * sizeof(__nv_bfloat16); };
    for (LayerMatrices &m : state.layers) {
        stream.add(m.wq.w, bytes(m.wq));
        stream.add(m.wk.w, bytes(m.wk));
        stream.add(m.wv.w, bytes(m.wv));
        m.qkv_end = stream.size();
        stream.add(m.wo.w, bytes(m.wo));
        m.o_end = stream.size();
        stream.add(m.w_gate.w, bytes(m.w_gate), m.w_up.w);
        m.gate_up_end = stream.size();
        stream.add(m.w_down.w, bytes(m.w_down));
        m.down_end = stream.size();
    }
    stream.add(state.lm_head.w, bytes(state.lm_head));
}

// Whether the persistent one-token step (step_kernel.cuh) takes this model: knob persistent_step,
// dense layers, 16-bit KV, d_head 64 or 128, at most kMaxGroup query heads per kv head, every GEMV
// input width one its staged consumer takes, 16-byte aligned weights, and one block per SM fits.
bool step_kernel_fits(const BaselineState &state) {
    const hp_config &c = state.model->config;
    if (!hp_cuda_step::enabled() || state.model->kv->dtype == HP_DTYPE_F32 || (c.d_head != 64 && c.d_head != 128) ||
        c.n_head / c.n_head_kv > kMaxGroup || !state.lm_head.w || !hp_cuda_gemv::aligned16(state.lm_head.w) || state.lm_head.n_in != c.d_model) {
        return false;
    }
    using hp_cuda_step::step_gemv_fits;
    for (int layer = 0; layer < c.n_layer; ++layer) {
        const LayerMatrices &m = state.layers[size_t(layer)];
        if (state.model->layers[layer].is_moe) return false;
        for (const Matrix *matrix : {&m.wq, &m.wk, &m.wv, &m.wo, &m.w_gate, &m.w_up, &m.w_down}) {
            if (!matrix->w || !hp_cuda_gemv::aligned16(matrix->w)) return false;
        }
        const bool same_input = m.wq.n_in == c.d_model && m.wk.n_in == c.d_model && m.wv.n_in == c.d_model && m.w_gate.n_in == c.d_model &&
                                m.w_up.n_in == c.d_model && m.wo.n_out == c.d_model && m.w_down.n_out == c.d_model;
        if (!same_input || !step_gemv_fits(m.wo.n_in) || !step_gemv_fits(m.w_down.n_in)) return false;
    }
    return step_gemv_fits(c.d_model);
}

// The persistent step's ops (see step_kernel.cuh) over the current activations: per layer q/k/v
// (layer 0 reads the norm kernel's a.h, later layers the folded norm), attention, o_proj (writes the
// FFN norm's operand), gate/up, down_proj (writes the next norm's operand), then the lm_head.
void build_step_ops(BaselineState &state) {
    namespace step = hp_cuda_step;
    const hp_model &model = *state.model;
    const hp_config &c = model.config;
    const Activations &a = state.act;
    std::vector<step::StepOp> &ops = state.step_ops_host;
    ops.clear();
    auto gemv_op = [&](int kind, const __nv_bfloat16 *x, bool folded, int n_in) {
        step::StepOp op;
        op.kind = kind;
        hp_cuda_gemv::Params &p = op.gemv;
        p.x = x;
        p.n_in = n_in;
        p.n_token = 1;
        p.n_segment = 1;
        if (folded) {
            p.x_sum_sq = a.sum_sq;
            p.n_sum_sq = (c.d_model + hp_cuda_gemv::kTileRows - 1) / hp_cuda_gemv::kTileRows;
            p.norm_eps = c.norm_eps;
        }
        return op;
    };
    auto norm_out = [&](step::StepOp &op, const hp_tensor &weight) {
        op.gemv.norm_out = {a.h, weight.data, weight.dtype, a.sum_sq};
        op.unit_rows = hp_cuda_gemv::kTileRows;
    };
    for (int layer = 0; layer < c.n_layer; ++layer) {
        const hp_layer &w = model.layers[layer];
        const LayerMatrices &m = state.layers[size_t(layer)];
        step::StepOp qkv = gemv_op(step::kOpStore, a.h, layer > 0, c.d_model);
        qkv.gemv.n_segment = 3;
        qkv.gemv.segment[0] = gemv_segment(m.wq, a.q);
        qkv.gemv.segment[1] = gemv_segment(m.wk, a.k);
        qkv.gemv.segment[2] = gemv_segment(m.wv, a.v);
        ops.push_back(qkv);

        step::StepOp attention;
        attention.kind = step::kOpAttention;
        step::AttentionOp &at = attention.attention;
        at.q = a.q, at.k = a.k, at.v = a.v;
        if (present(w.bq)) at.bias_dtype = w.bq.dtype, at.bq = w.bq.data, at.bk = w.bk.data, at.bv = w.bv.data;
        if (c.has_qk_norm) at.norm_dtype = w.q_norm.dtype, at.q_norm = w.q_norm.data, at.k_norm = w.k_norm.data;
        at.k_cache = model.kv->k[layer];
        at.v_cache = model.kv->v[layer];
        at.out = a.attn;
        ops.push_back(attention);

        step::StepOp o = gemv_op(step::kOpAccumulate, a.attn, false, m.wo.n_in);
        o.gemv.segment[0] = gemv_segment(m.wo, a.x, &w.bo);
        norm_out(o, w.ffn_norm);
        ops.push_back(o);

        step::StepOp gate_up = gemv_op(step::kOpSiluMul, a.h, true, c.d_model);
        gate_up.gemv.segment[0] = gemv_segment(m.w_gate, a.act, &w.b_gate);
        gate_up.gemv.segment[0].w2 = m.w_up.w;
        if (present(w.b_up)) gate_up.gemv.segment[0].bias2 = w.b_up.data, gate_up.gemv.segment[0].bias2_dtype = w.b_up.dtype;
        ops.push_back(gate_up);

        step::StepOp down = gemv_op(step::kOpAccumulate, a.act, false, m.w_down.n_in);
        down.gemv.segment[0] = gemv_segment(m.w_down, a.x, &w.b_down);
        norm_out(down, layer + 1 < c.n_layer ? model.layers[layer + 1].attn_norm : model.output_norm);
        ops.push_back(down);
    }
    step::StepOp lm_head = gemv_op(step::kOpStore, a.h, true, c.d_model);
    lm_head.gemv.segment[0] = gemv_segment(state.lm_head, nullptr);  // the step's logits
    lm_head.logits = true;
    ops.push_back(lm_head);
    cudaMemcpyAsync(state.step_ops, ops.data(), ops.size() * sizeof(step::StepOp), cudaMemcpyHostToDevice, state.stream);
}

// Sets up the persistent step where the model fits it (step_kernel_fits): the kernel for its KV
// dtype and d_head, its shared memory, one block per SM, the op list and the grid barrier.
bool prepare_step_kernel(BaselineState &state) {
    namespace step = hp_cuda_step;
    if (!step_kernel_fits(state)) return true;
    const hp_config &c = state.model->config;
    const bool bf16 = state.model->kv->dtype == HP_DTYPE_BF16;
    if (c.d_head == 64) state.step_kernel = bf16 ? step::step_kernel<HP_DTYPE_BF16, 64> : step::step_kernel<HP_DTYPE_F16, 64>;
    else state.step_kernel = bf16 ? step::step_kernel<HP_DTYPE_BF16, 128> : step::step_kernel<HP_DTYPE_F16, 128>;
    const int max_input = std::max({c.d_model, c.d_ff, c.n_head * c.d_head});
    state.step_shared = step::step_shared_bytes(max_input, c.d_head);
    int blocks_per_sm = 0;
    if (cudaFuncSetAttribute(state.step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(state.step_shared)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, state.step_kernel, step::kThreads + 32, state.step_shared) != cudaSuccess ||
        blocks_per_sm < 1) {
        cudaGetLastError();
        log_message(state, HP_LOG_INFO, "persistent step", "does not fit on this device; one-token steps take the launch chain");
        state.step_kernel = nullptr;
        return true;
    }
    state.step_grid = hp_cuda_gemv::device_sm_count();
    const size_t n_op = size_t(c.n_layer) * 5 + 1;
    state.step_ops = static_cast<step::StepOp *>(state_alloc(state, n_op * sizeof(step::StepOp), state.allocations));
    state.step_barrier = static_cast<unsigned *>(state_alloc(state, sizeof(unsigned), state.allocations));
    if (HP_CUDA_PERSISTENT_TRACE) {
        const size_t bytes = n_op * size_t(state.step_grid) * 4 * sizeof(unsigned long long);
        state.step_trace = static_cast<unsigned long long *>(state_alloc(state, bytes, state.allocations));
        if (state.step_trace) cudaMemsetAsync(state.step_trace, 0, bytes, state.stream);
    }
    char detail[160];
    std::snprintf(detail, sizeof detail, "on for one-token steps (%zu ops, %d blocks, %zu KB of shared memory each)", n_op, state.step_grid,
                  state.step_shared >> 10);
    log_message(state, HP_LOG_INFO, "persistent step", detail);
    return state.step_ops && state.step_barrier;
}

// A one-token step with its logits as one persistent launch (step_kernel.cuh): the embedding and the
// first layer's norm as before, then the kernel.
bool persistent_step(BaselineState &state, const hp_batch &batch, hp_output &out) {
    const hp_model &model = *state.model;
    const hp_config &c = model.config;
    cudaMemsetAsync(state.step_barrier, 0, sizeof(unsigned), state.stream);
    if (!embed_and_norm(state, batch.token_ids, 1, nullptr, 0)) return false;
    hp_cuda_step::StepParams p;
    p.ops = state.step_ops;
    p.n_op = int(state.step_ops_host.size());
    p.n_head = c.n_head;
    p.n_head_kv = c.n_head_kv;
    p.head_eps = c.norm_eps;
    p.scale_log2 = float(M_LOG2E) / sqrtf(float(c.d_head));
    p.inv_freq = state.inv_freq;
    p.block_tokens = model.kv->block_tokens;
    p.positions = batch.positions;
    p.block_tables = batch.block_tables;
    p.logit_rows = batch.logit_rows;
    p.logits = out.logits;
    p.barrier = state.step_barrier;
    p.counters = state.attn_counters;
    p.partial = state.partial;
    p.max_split = hp_cuda_step::kMaxSplit - 1;
    p.trace = state.step_trace;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(state.step_grid));
    config.blockDim = dim3(hp_cuda_step::kThreads + 32);  // the consumer warps and the producer warp
    config.dynamicSmemBytes = state.step_shared;
    config.stream = state.stream;
    cudaLaunchAttribute cooperative;
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    config.attrs = &cooperative;
    config.numAttrs = 1;
    const cudaError_t code = cudaLaunchKernelEx(&config, state.step_kernel, p);
    if (code != cudaSuccess) log_message(state, HP_LOG_ERROR, "persistent step launch", cudaGetErrorString(code));
    return code == cudaSuccess;
}

int baseline_create(const hp_model *model, const hp_services *services, void **state_out) {
    if (model->device != HP_DEVICE_CUDA) return HP_ERR_UNSUPPORTED;
    const hp_config &c = model->config;
    if (c.d_head % 8 != 0 || c.d_head > kMaxHeadDim || c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0 ||
        c.n_head / c.n_head_kv > kMaxGroup) {
        return HP_ERR_UNSUPPORTED;
    }
    if (c.n_expert > 0 && (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)) return HP_ERR_UNSUPPORTED;  // routing needs 1 <= k <= n_expert
    auto *state = new (std::nothrow) BaselineState{model, *services, static_cast<cudaStream_t>(services->stream)};
    if (!state) return HP_ERR_OUT_OF_MEMORY;
    auto fail = [&](int code) {
        if (state->cublas) cublasDestroy(state->cublas);
        cudaStreamSynchronize(state->stream);
        for (void *ptr : state->allocations) services->free(services->ctx, ptr);
        for (void *ptr : state->activation_allocations) services->free(services->ctx, ptr);
        delete state;
        return code;
    };
    // cuBLAS on the engine's stream with a fixed workspace, so that GEMMs can be graph-captured.
    const size_t workspace_bytes = size_t(32) << 20;
    void *workspace = state_alloc(*state, workspace_bytes, state->allocations);
    if (!workspace || cublasCreate(&state->cublas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(state->cublas, state->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(state->cublas, workspace, workspace_bytes) != CUBLAS_STATUS_SUCCESS) {
        return fail(HP_ERR_OUT_OF_MEMORY);
    }
    const std::vector<float> inv_freq = rope_inv_freq(c);
    state->inv_freq = static_cast<float *>(state_alloc(*state, inv_freq.size() * sizeof(float), state->allocations));
    state->partial = static_cast<float *>(state_alloc(*state, kTokenSplits * c.n_head * (c.d_head + 2) * sizeof(float), state->allocations));
    const size_t counter_bytes = kTokenSplits * size_t(c.n_head_kv) * sizeof(int32_t);
    state->attn_counters = static_cast<int32_t *>(state_alloc(*state, counter_bytes, state->allocations));
    if (!state->inv_freq || !state->partial || !state->attn_counters) return fail(HP_ERR_OUT_OF_MEMORY);
    cudaMemsetAsync(state->attn_counters, 0, counter_bytes, state->stream);
    if (kFdOProj) {
        state->oproj_partial = static_cast<float *>(state_alloc(*state, size_t(c.n_head_kv) * c.d_model * sizeof(float), state->allocations));
        state->oproj_counters = static_cast<int32_t *>(state_alloc(*state, kFdMaxCluster * sizeof(int32_t), state->allocations));
        if (!state->oproj_partial || !state->oproj_counters) return fail(HP_ERR_OUT_OF_MEMORY);
        cudaMemsetAsync(state->oproj_counters, 0, kFdMaxCluster * sizeof(int32_t), state->stream);
        log_message(*state, HP_LOG_INFO, "attn_fd_oproj", "on: one-token steps whose attention splits run as one cluster do o_proj in the attention");
    }
    hp_cuda_gemv::skinny_wgmma_available();  // the device is asked once, here, never inside a captured step
    if (c.n_expert > 0) {
        state->moe_barrier = static_cast<unsigned long long *>(state_alloc(*state, sizeof(unsigned long long), state->allocations));
        if (!state->moe_barrier) return fail(HP_ERR_OUT_OF_MEMORY);
        cudaMemsetAsync(state->moe_barrier, 0, sizeof(unsigned long long), state->stream);
        if (HP_CUDA_MOE_FUSED_LOGIT_FLAGS) {  // zero with the counter: the tags are derived from it (fused_logit_tag)
            const size_t bytes = size_t(c.n_expert) * sizeof(unsigned long long);
            state->moe_logit_tags = static_cast<unsigned long long *>(state_alloc(*state, bytes, state->allocations));
            if (!state->moe_logit_tags) return fail(HP_ERR_OUT_OF_MEMORY);
            cudaMemsetAsync(state->moe_logit_tags, 0, bytes, state->stream);
        }
        if (hp_cuda_moe::kFusedActTags && state->moe_logit_tags) {  // zero with the counter: the tags are derived from it (fused_act_tag)
            const size_t bytes = size_t(c.n_expert_used) * size_t(std::max(c.d_ff_expert, 1)) * sizeof(uint32_t);
            state->moe_act_tags = static_cast<uint32_t *>(state_alloc(*state, bytes, state->allocations));
            if (!state->moe_act_tags) return fail(HP_ERR_OUT_OF_MEMORY);
            cudaMemsetAsync(state->moe_act_tags, 0, bytes, state->stream);
        }
        if (HP_CUDA_MOE_FUSED_DYNAMIC_ITEMS) {
            state->moe_items = static_cast<int *>(state_alloc(*state, sizeof(int), state->allocations));
            if (!state->moe_items) return fail(HP_ERR_OUT_OF_MEMORY);
            cudaMemsetAsync(state->moe_items, 0, sizeof(int), state->stream);
        }
        if (HP_CUDA_MOE_FUSED_SPLIT_DOWN) {
            const size_t bytes = size_t(hp_cuda_gemv::device_sm_count()) * c.d_model * sizeof(float);
            state->moe_partial = static_cast<float *>(state_alloc(*state, bytes, state->allocations));
            if (!state->moe_partial) return fail(HP_ERR_OUT_OF_MEMORY);
        }
        if (HP_CUDA_MOE_FUSED_TRACE) {
            const size_t bytes = size_t(c.n_layer) * hp_cuda_gemv::device_sm_count() * hp_cuda_moe::kFusedTracePoints * sizeof(unsigned long long);
            state->moe_trace = static_cast<unsigned long long *>(state_alloc(*state, bytes, state->allocations));
            if (state->moe_trace) cudaMemsetAsync(state->moe_trace, 0, bytes, state->stream);
        }
    }
    if (HP_CUDA_ATTN_TRACE) {
        const size_t bytes = size_t(c.n_layer) * kFdTraceBlocks * kFdTracePoints * sizeof(unsigned long long);
        state->attn_trace = static_cast<unsigned long long *>(state_alloc(*state, bytes, state->allocations));
        if (state->attn_trace) cudaMemsetAsync(state->attn_trace, 0, bytes, state->stream);
    }
    cudaMemcpyAsync(state->inv_freq, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice, state->stream);
    bool ok = as_matrix(*state, model->lm_head, state->lm_head);
    state->layers.resize(size_t(c.n_layer));
    std::vector<std::vector<const __nv_bfloat16 *>> tables(size_t(c.n_layer));
    for (int layer = 0; ok && layer < c.n_layer; ++layer) {
        const hp_layer &w = model->layers[layer];
        LayerMatrices &m = state->layers[size_t(layer)];
        ok = as_matrix(*state, w.wq, m.wq) && as_matrix(*state, w.wk, m.wk) && as_matrix(*state, w.wv, m.wv) && as_matrix(*state, w.wo, m.wo) &&
             as_matrix(*state, w.w_gate, m.w_gate) && as_matrix(*state, w.w_up, m.w_up) && as_matrix(*state, w.w_down, m.w_down) &&
             as_matrix(*state, w.router, m.router) && as_matrix(*state, w.shared_gate, m.shared_gate) &&
             as_matrix(*state, w.shared_up, m.shared_up) && as_matrix(*state, w.shared_down, m.shared_down) &&
             as_matrix(*state, w.shared_expert_gate, m.shared_expert_gate);
        if (!ok || !w.is_moe) continue;
        for (const hp_tensor *experts : {w.expert_gate, w.expert_up, w.expert_down}) {
            for (int e = 0; ok && e < c.n_expert; ++e) {
                Matrix matrix;
                ok = as_matrix(*state, experts[e], matrix);
                tables[size_t(layer)].push_back(matrix.w);
            }
        }
        m.experts_aligned = std::all_of(tables[size_t(layer)].begin(), tables[size_t(layer)].end(), hp_cuda_gemv::aligned16);
        m.expert_tables = static_cast<const __nv_bfloat16 **>(state_alloc(*state, tables[size_t(layer)].size() * sizeof(void *), state->allocations));
        ok = ok && m.expert_tables &&
             cudaMemcpyAsync(m.expert_tables, tables[size_t(layer)].data(), tables[size_t(layer)].size() * sizeof(void *),
                             cudaMemcpyHostToDevice, state->stream) == cudaSuccess;
    }
    if (ok) state->qkv_parts = qkv_batch_parts(*state);
    if (ok && hp_cuda_gemv::kL2Prefetch) plan_weight_stream(*state);
    ok = ok && prepare_step_kernel(*state) && reserve(*state, HP_CUDA_WORKSPACE_TOKENS) && cudaStreamSynchronize(state->stream) == cudaSuccess;
    if (!ok) return fail(HP_ERR_OUT_OF_MEMORY);
    *state_out = state;
    return HP_OK;
}

// The layer's q/k/v biases and q/k norm weights, where the model has them, into the head kernel's
// parameters (HeadParams) or the attention kernel's (FdHead, knob attn_fd_head): the same fields.
template <class Head>
void set_head_weights(Head &h, const hp_config &c, const hp_layer &w) {
    if (present(w.bq)) {
        h.bias_dtype = w.bq.dtype;
        h.bq = w.bq.data;
        h.bk = w.bk.data;
        h.bv = w.bv.data;
    }
    if (c.has_qk_norm) {
        h.norm_dtype = w.q_norm.dtype;
        h.q_norm = w.q_norm.data;
        h.k_norm = w.k_norm.data;
    }
}

// What the attention kernel needs to do the head kernel's work for `layer` (knob attn_fd_head): the q/k/v
// launch's k and v, the biases, the q/k norms, the rotation.
FdHead fd_head_params(const BaselineState &state, int layer) {
    const hp_config &c = state.model->config;
    FdHead h;
    h.k = state.act.k;
    h.v = state.act.v;
    set_head_weights(h, c, state.model->layers[layer]);
    h.inv_freq = state.inv_freq;
    h.eps = c.norm_eps;
    return h;
}

// Which flash-decoding kernel a step takes (launch_decode_attention): the tensor-core one (mma) or the
// CUDA-core one, the latter for small steps (`small`) in blocks of attn_fd_small_warps warps; and the
// CUDA-core kernel's blocks per GQA group (attn_fd_head_split).
struct DecodeAttentionPlan {
    bool mma = false, small = false;
    bool ring = false;  // the tensor-core kernel's variant without PREFETCH holds its K/V in a shared-memory ring
    int head_split = 1;
};
inline DecodeAttentionPlan plan_decode_attention(const hp_config &c, const hp_batch &batch, int group) {
    DecodeAttentionPlan plan;
    // attn_mma_ring_min_tokens .. _max_tokens: steps of that many tokens take the tensor cores with the ring
    // (attn_mma_ring, attn_mma_ring_128 by d_head), whatever attn_mma_min_tokens says.
    plan.ring = HP_CUDA_ATTN_KERNEL == 2 && mma_ring_of(c.d_head) >= 2 && batch.n_token >= HP_CUDA_ATTN_MMA_RING_MIN_TOKENS &&
                batch.n_token <= HP_CUDA_ATTN_MMA_RING_MAX_TOKENS;
    // attn_mma_min_tokens_wide: GQA groups above 4 (8 query heads per KV row) reach the tensor cores sooner.
    const int mma_min_tokens = group > 4 ? HP_CUDA_ATTN_MMA_MIN_TOKENS_WIDE : HP_CUDA_ATTN_MMA_MIN_TOKENS;
    plan.mma = HP_CUDA_ATTN_KERNEL == 2 && c.d_head >= 64 && (batch.n_token >= mma_min_tokens || plan.ring);
    plan.small = !plan.mma && batch.n_token <= HP_CUDA_ATTN_FD_SMALL_MAX_TOKENS;
    // attn_fd_head_split: small steps on the CUDA-core kernel split each GQA group over that many
    // blocks (grid rows n_head_kv * head_split), each scoring group / head_split query heads against
    // the same K/V rows (read again from L2), so that twice the SMs share the per-step arithmetic.
    constexpr int kHeadSplit = HP_CUDA_ATTN_FD_HEAD_SPLIT;
    plan.head_split = plan.small && kHeadSplit > 1 && group % kHeadSplit == 0 ? kHeadSplit : 1;
    return plan;
}

// Whether a step's attention runs the flash-decoding kernels (launch_decode_attention): 16-bit KV and
// d_head 32, 64 or 128; otherwise attention_split_kernel and its reduce kernel.
template <hp_dtype KV>
bool decode_attention_kernels(const hp_config &c) {
    return HP_CUDA_ATTN_KERNEL >= 1 && KV != HP_DTYPE_F32 && (c.d_head == 32 || c.d_head == 64 || c.d_head == 128);
}

// Knob attn_fd_head: whether the CUDA-core flash-decoding kernel does the head kernel's work itself
// (attention_head.cuh): decode steps (every token alone in its sequence, so only the token's own block
// reads its newest row) on that kernel with a block per GQA group (the row's one writer).
template <hp_dtype KV>
bool attention_folds_head(const hp_config &c, const hp_batch &batch, int group) {
    if (!kFdHead || !decode_attention_kernels<KV>(c) || batch.n_token != batch.n_seq) return false;
    const DecodeAttentionPlan plan = plan_decode_attention(c, batch, group);
    return !plan.mma && plan.head_split == 1;
}

// What the layer's o_proj launch would take (project()), for the attention to do it instead (knob
// attn_fd_oproj): the weights, the bias and, where o_proj folds the FFN norm, that norm's weight.
struct OProjInput {
    const Matrix *w = nullptr;
    const hp_tensor *bias = nullptr, *norm_out = nullptr;
};

// Knob attn_fd_oproj: whether the single-token attention does o_proj (attention_oproj.cuh): one token
// on the CUDA-core kernel's PREFETCH blocks with its splits in a cluster (checked at the launch), a
// block per GQA group, o_proj's rows an equal multiple of 32 per split, the step not on the L2
// prefetch plan (which counts o_proj's launch), and the buffers allocated.
bool attention_folds_oproj(const BaselineState &state, const hp_batch &batch, const DecodeAttentionPlan &plan, int n_split, const OProjInput *oproj) {
    const hp_config &c = state.model->config;
    if (!kFdOProj || !oproj || !oproj->w || !state.oproj_partial || state.prefetch_step) return false;
    if (batch.n_token != 1 || batch.n_seq != 1 || HP_CUDA_ATTN_FD_PREFETCH_MAX_TOKENS < 1) return false;
    if (!plan.small || plan.mma || plan.head_split != 1 || !fd_cluster(n_split)) return false;
    return oproj->w->n_out == c.d_model && oproj->w->n_in == c.n_head * c.d_head && hp_cuda_gemv::aligned16(oproj->w->w) && c.d_model % n_split == 0 &&
           fd_oproj_rows(c.d_model, n_split) % 32 == 0;
}

FdOProj fd_oproj_params(const BaselineState &state, const OProjInput &oproj) {
    FdOProj o;
    o.w = oproj.w->w;
    if (oproj.bias && present(*oproj.bias)) {
        o.bias = oproj.bias->data;
        o.bias_dtype = oproj.bias->dtype;
    }
    o.x = state.act.x;
    if (oproj.norm_out) {
        o.norm_out.h = state.act.h;
        o.norm_out.w = oproj.norm_out->data;
        o.norm_out.w_dtype = oproj.norm_out->dtype;
        o.norm_out.sum_sq = state.act.sum_sq;
    }
    o.partial = state.oproj_partial;
    o.counters = state.oproj_counters;
    o.d_model = state.model->config.d_model;
    return o;
}

// The flash-decoding attention (attention.cuh; attn_kernel 2: attention_mma.cuh for d_head 64 and
// 128 at steps of at least attn_mma_min_tokens tokens) for 16-bit KV and d_head 32, 64 or 128; with
// fold_head (attention_folds_head) the CUDA-core kernel also does the head kernel's work. Returns
// whether it also did o_proj (knob attn_fd_oproj, attention_folds_oproj; `oproj` optional).
template <hp_dtype KV>
bool launch_decode_attention(BaselineState &state, const hp_batch &batch, int layer, int group, bool fold_head, const OProjInput *oproj) {
    const hp_config &c = state.model->config;
    const hp_kv_cache &kv = *state.model->kv;
    const int block_tokens = kv.block_tokens;
    const int max_positions = batch.max_blocks_per_seq * block_tokens;
    DecodeAttentionParams p{c.n_head, c.n_head_kv, group, float(M_LOG2E) / sqrtf(float(c.d_head)), block_tokens,
                            (block_tokens & (block_tokens - 1)) == 0 ? __builtin_ctz(unsigned(block_tokens)) : -1, batch.max_blocks_per_seq, 1};
    const DecodeAttentionPlan plan = plan_decode_attention(c, batch, group);
    const bool mma = plan.mma, small = plan.small;
    p.head_split = plan.head_split;
    if (fold_head) p.head = fd_head_params(state, layer);
    const int block_group = group / p.head_split, grid_rows = c.n_head_kv * p.head_split;
    const int max_split = int(kTokenSplits / size_t(batch.n_token));
    // attn_fd_small_warps: small steps in blocks of more warps (fewer splits); the tensor-core kernel's
    // blocks by mma_blocks (attn_mma_warps8: 8-warp blocks; attn_mma_one_wave: blocks one wave holds).
    p.n_split = decode_attention_splits(batch.n_token, grid_rows, c.d_head, max_positions, max_split, small ? kFdSmallWarps : kFdWarps);
    bool wide = false;
    if (mma) {
        const MmaBlocks blocks = mma_blocks(batch.n_token, grid_rows, c.d_head, group, max_positions, max_split,
                                            mma_pinned(c.d_head, group) ? mma_wave<KV>(plan.ring) : MmaWave{});
        wide = blocks.warps == kMmaWideWarps;
        p.n_split = blocks.n_split;
    }
    const bool cluster = small && fd_cluster(p.n_split);  // attn_fd_cluster: a small step's splits fit one cluster
    const bool fold_oproj = attention_folds_oproj(state, batch, plan, p.n_split, oproj);
    if (fold_oproj) p.oproj = fd_oproj_params(state, *oproj);
    bool oproj_done = false;
    p.seq_token_start = batch.n_token == batch.n_seq ? batch.seq_token_start : nullptr;  // tokens may be alone in their sequences
    if (state.prefetch_step) p.prefetch = state.weight_stream.next(state.layers[size_t(layer)].qkv_end, kL2IdleLookahead);
    if (state.attn_trace) p.trace = state.attn_trace + size_t(layer) * kFdTraceBlocks * kFdTracePoints;
    // Launches `kernel` in blocks of n_warps warps, with `cluster` (std::true_type) as clusters of the
    // splits: false where the device cannot schedule those, or for a small step cannot hold them all at
    // once (nothing launched).
    auto launch = [&](auto cluster, auto kernel, int n_warps, size_t shared_bytes = 0) {
        return launch_decode_attention_kernel<decltype(cluster)::value>(
            kernel, grid_rows, batch.n_token, p.n_split, n_warps, shared_bytes, /*one_wave=*/small, state.stream, p, static_cast<const float *>(state.act.q), batch.positions,
            static_cast<const int32_t *>(state.act.token_seq), batch.block_tables, static_cast<const void *>(kv.k[layer]),
            static_cast<const void *>(kv.v[layer]), state.partial, state.attn_counters, state.act.attn);
    };
    if constexpr (KV != HP_DTYPE_F32) {
        auto for_head = [&](auto d_head) {
            constexpr int D = decltype(d_head)::value;
            // attn_mma_prefetch_min_tokens / _max_tokens: steps of that many tokens on the tensor cores
            // prefetch too, where the variant is held to the same registers as the other (group <= 4 runs G = 4).
            const bool prefetch = batch.n_token <= HP_CUDA_ATTN_FD_PREFETCH_MAX_TOKENS ||
                                  (mma && group <= 4 && mma_prefetch_held<D, 4>() && batch.n_token >= HP_CUDA_ATTN_MMA_PREFETCH_MIN_TOKENS &&
                                   batch.n_token <= HP_CUDA_ATTN_MMA_PREFETCH_MAX_TOKENS);
            if constexpr (HP_CUDA_ATTN_KERNEL == 2 && D >= 64) {
                if (mma) {
                    // The variant without PREFETCH holds a shared-memory ring where the plan says so (knobs
                    // attn_mma_ring, attn_mma_ring_min_tokens / _max_tokens); PREFETCH has none (ring 0).
                    // Blocks of W warps: kFdWarps, or kMmaWideWarps where `wide` (attn_mma_warps8).
                    auto mma_launch_ring = [&](auto in_cluster, auto ring, auto n_warps) {
                        constexpr bool C = decltype(in_cluster)::value;
                        constexpr int R = decltype(ring)::value, W = decltype(n_warps)::value;
                        constexpr bool E = HP_CUDA_ATTN_MMA_RING_EARLY;
                        if (group <= 4 && prefetch) return launch(in_cluster, decode_attention_mma_kernel<KV, D, 4, true, 0, E, C, W>, W);
                        if (group <= 4) return launch(in_cluster, decode_attention_mma_kernel<KV, D, 4, false, R, E, C, W>, W, mma_prepare_shared<KV, D, 4, false, R, E, C, W>());
                        if (prefetch) return launch(in_cluster, decode_attention_mma_kernel<KV, D, kMaxGroup, true, 0, E, C, W>, W);
                        return launch(in_cluster, decode_attention_mma_kernel<KV, D, kMaxGroup, false, R, E, C, W>, W,
                                      mma_prepare_shared<KV, D, kMaxGroup, false, R, E, C, W>());
                    };
                    auto mma_launch_warps = [&](auto in_cluster, auto n_warps) {
                        if constexpr (mma_ring<D>() >= 2) {
                            if (plan.ring) return mma_launch_ring(in_cluster, std::integral_constant<int, mma_ring<D>()>{}, n_warps);
                        }
                        return mma_launch_ring(in_cluster, std::integral_constant<int, 0>{}, n_warps);
                    };
                    auto mma_launch = [&](auto in_cluster) {
                        if constexpr (mma_wide_compiled(D)) {
                            if (wide) return mma_launch_warps(in_cluster, std::integral_constant<int, kMmaWideWarps>{});
                        }
                        return mma_launch_warps(in_cluster, std::integral_constant<int, kFdWarps>{});
                    };
                    // attn_mma_cluster: up to that many splits as one cluster where the device schedules
                    // it (kernels compiled only with the knob on), else the last-block reduction.
                    if constexpr (HP_CUDA_ATTN_MMA_CLUSTER >= 2) {
                        if (p.n_split <= HP_CUDA_ATTN_MMA_CLUSTER && fd_cluster(p.n_split) && mma_launch(std::true_type{})) return;
                    }
                    mma_launch(std::false_type{});
                    return;
                }
            }
            auto for_warps = [&](auto n_warps) {
                constexpr int W = decltype(n_warps)::value;
                auto for_cluster = [&](auto cluster) {
                    constexpr bool C = decltype(cluster)::value;
                    // The variant without PREFETCH may hold a shared-memory ring (knob attn_fd_ring).
                    auto ringed = [&](auto kernel) { return launch(cluster, kernel, W, fd_prepare_shared<false, W>(kernel)); };
                    // attn_fd_oproj: o_proj's slice of each block is its dynamic shared memory (compiled only with the knob on).
                    if constexpr (kFdOProj && C) {
                        if (fold_oproj && prefetch) {
                            auto with_oproj = [&](auto kernel) {  // a slice past the device's shared memory: the plain kernel and o_proj's launch
                                const size_t bytes = fd_oproj_shared_bytes(c.d_model, p.n_split, group * D);
                                return oproj_done = fd_oproj_prepare_shared(kernel, bytes) && launch(cluster, kernel, W, bytes);
                            };
                            constexpr int R = HP_CUDA_ATTN_FD_RING, S = HP_CUDA_ATTN_FD_SCATTER_SCORES;
                            constexpr int O = kFdOProjMode;
                            if (block_group <= 4 ? with_oproj(decode_attention_kernel<KV, D, 4, true, W, true, R, S, O>)
                                                 : with_oproj(decode_attention_kernel<KV, D, kMaxGroup, true, W, true, R, S, O>)) {
                                return true;
                            }
                        }
                    }
                    if (block_group <= 4) return prefetch ? launch(cluster, decode_attention_kernel<KV, D, 4, true, W, C>, W) : ringed(decode_attention_kernel<KV, D, 4, false, W, C>);
                    return prefetch ? launch(cluster, decode_attention_kernel<KV, D, kMaxGroup, true, W, C>, W) : ringed(decode_attention_kernel<KV, D, kMaxGroup, false, W, C>);
                };
                // attn_fd_cluster: a small step's splits as one cluster where the device schedules
                // such clusters (kernels compiled only with the knob on), else the last-block reduction.
                if constexpr (HP_CUDA_ATTN_FD_CLUSTER >= 2) {
                    if (cluster && for_cluster(std::true_type{})) return;
                }
                for_cluster(std::false_type{});
            };
            if (small && kFdSmallWarps != kFdWarps) for_warps(std::integral_constant<int, kFdSmallWarps>{});
            else for_warps(std::integral_constant<int, kFdWarps>{});
        };
        if (c.d_head == 32) for_head(std::integral_constant<int, 32>{});
        else if (c.d_head == 64) for_head(std::integral_constant<int, 64>{});
        else for_head(std::integral_constant<int, 128>{});
    }
    if (oproj_done && !state.oproj_logged) {
        state.oproj_logged = true;
        char detail[160];
        std::snprintf(detail, sizeof detail, "o_proj done in the single-token attention: %d splits of %d rows", p.n_split, fd_oproj_rows(c.d_model, p.n_split));
        log_message(state, HP_LOG_INFO, "attn_fd_oproj", detail);
    }
    return oproj_done;
}

// Gives the q/k/v launch `p` the head epilogue (HeadOut, gemv.cuh: bias, q/k norm, RoPE, the KV
// write) where skinny_head_fits says it takes it; returns whether it did (else the head kernel runs).
bool fold_head(const BaselineState &state, const hp_batch &batch, int layer, hp_cuda_gemv::Params &p) {
    const hp_config &c = state.model->config;
    const hp_kv_cache &kv = *state.model->kv;
    const hp_layer &w = state.model->layers[layer];
    hp_cuda_gemv::HeadOut &h = p.head;
    h.d_head = c.d_head;
    h.n_head_kv = c.n_head_kv;
    h.eps = c.norm_eps;
    h.inv_freq = state.inv_freq;
    if (c.has_qk_norm) {
        h.norm_dtype = w.q_norm.dtype;
        h.q_norm = w.q_norm.data;
        h.k_norm = w.k_norm.data;
    }
    h.positions = batch.positions;
    h.token_seq = state.act.token_seq;
    h.block_tables = batch.block_tables;
    h.block_tokens = kv.block_tokens;
    h.max_blocks = batch.max_blocks_per_seq;
    h.kv_dtype = kv.dtype;
    h.k_cache = kv.k[layer];
    h.v_cache = kv.v[layer];
    if (!hp_cuda_gemv::skinny_head_fits(p)) {
        h = hp_cuda_gemv::HeadOut{};
        return false;
    }
    const hp_tensor *bias[3] = {&w.bq, &w.bk, &w.bv};
    for (int s = 0; s < 3; ++s) p.segment[s].bias = bias[s]->data, p.segment[s].bias_dtype = bias[s]->dtype;
    return true;
}

// The head kernel of the layer's step: bias, q/k norm and RoPE of q and k, K and V into the cache.
// `qkv` (knob gemm_qkv): q, k and v from its rows [q | k | v] instead of a.q, a.k and a.v (q still written to a.q).
template <hp_dtype KV>
void launch_head(BaselineState &state, const hp_batch &batch, int layer, const float *qkv) {
    const hp_config &c = state.model->config;
    const hp_kv_cache &kv = *state.model->kv;
    const Activations &a = state.act;
    HeadParams hp{c.n_head, c.n_head_kv, c.d_head, c.norm_eps, HP_DTYPE_F32, nullptr, nullptr, nullptr, HP_DTYPE_F32, nullptr, nullptr,
                  state.inv_freq, kv.block_tokens, batch.max_blocks_per_seq};
    set_head_weights(hp, c, state.model->layers[layer]);
    hp.qkv = qkv;
    hp.qkv_stride = (c.n_head + 2 * c.n_head_kv) * c.d_head;
    if (state.prefetch_step) hp.prefetch = state.weight_stream.next(state.layers[size_t(layer)].qkv_end, kL2IdleLookahead);
    const int head_threads = std::min(256, (c.d_head + 31) / 32 * 32);
    hp_cuda_gemv::launch_pdl(head_kernel<KV>, dim3(c.n_head + c.n_head_kv, batch.n_token), dim3(head_threads), 0, state.stream,
        hp, a.q, a.k, a.v, batch.positions, a.token_seq, batch.block_tables, kv.k[layer], kv.v[layer]);
}

// Bias, q/k norm, RoPE and the KV write (the head kernel, unless the q/k/v launch did it, head_done, or
// the attention kernel does it, attn_fd_head), then attention. Returns whether the attention also did
// o_proj (`oproj`, optional: knob attn_fd_oproj). `qkv`: the head kernel's input rows (launch_head), if not a.q/k/v.
template <hp_dtype KV>
bool launch_attention(BaselineState &state, const hp_batch &batch, int layer, int n_split, bool head_done, const OProjInput *oproj = nullptr,
                      const float *qkv = nullptr) {
    const hp_config &c = state.model->config;
    const hp_kv_cache &kv = *state.model->kv;
    const Activations &a = state.act;
    const int group = c.n_head / c.n_head_kv;
    const bool fold_head = !head_done && !qkv && attention_folds_head<KV>(c, batch, group);
    if (!head_done && !fold_head) launch_head<KV>(state, batch, layer, qkv);
    if (decode_attention_kernels<KV>(c)) return launch_decode_attention<KV>(state, batch, layer, group, fold_head, oproj);
    AttentionParams ap{c.n_head, c.n_head_kv, c.d_head, n_split, 1.0f / sqrtf(float(c.d_head)), kv.block_tokens, batch.max_blocks_per_seq};
    const dim3 grid(c.n_head_kv, batch.n_token, n_split);
    if (batch.n_token <= HP_CUDA_ATTN_WIDE_V_MAX_TOKENS) {
        hp_cuda_gemv::launch_pdl(attention_split_kernel<KV, true>, grid, dim3(kAttnThreads), attention_shared_bytes(c.d_head), state.stream, ap,
                                 a.q, batch.positions, a.token_seq, batch.block_tables, kv.k[layer], kv.v[layer], state.partial);
    } else {
        hp_cuda_gemv::launch_pdl(attention_split_kernel<KV, false>, grid, dim3(kAttnThreads), attention_shared_bytes(c.d_head), state.stream, ap,
                                 a.q, batch.positions, a.token_seq, batch.block_tables, kv.k[layer], kv.v[layer], state.partial);
    }
    hp_cuda_gemv::launch_pdl(attention_reduce_kernel, dim3(c.n_head, batch.n_token), dim3(std::min(256, (c.d_head + 31) / 32 * 32)), 0,
        state.stream, state.partial, c.n_head, n_split, c.d_head, a.attn);
    return false;
}

// The grouped MoE kernels (moe.cuh) serve this model: knob moe_kernel 1 and at most kMaxExpert experts.
bool grouped_moe(const hp_config &c) { return HP_CUDA_MOE_KERNEL == 1 && c.n_expert <= hp_cuda_moe::kMaxExpert; }

// What a.h holds, after an MoE FFN, for the RMSNorm that follows it: nothing yet (the norm kernel
// runs), the normalised operand (grouped combine), or the folded norm's operand and partial sums.
enum class NextInput { raw, normed, folded };

// Routed experts (+ shared expert) of every token, added into the residual x. `folded`: a.h holds
// bf16(x * ffn_norm) and a.sum_sq its partial sums (decode GEMV's folded norm; grouped path only).
// `next_norm` is the norm after the FFN (the next layer's attention norm, or the output norm when
// `next_is_output`): a one-token step (moe_single_token) folds it into its down_proj, a grouped
// combine writes the next layer's normalised input; `next` says which happened.
bool moe(BaselineState &state, int layer, int n_token, int32_t *expert_counts, bool folded, const hp_tensor *next_norm, bool next_is_output,
         NextInput &next) {
    const hp_config &c = state.model->config;
    const hp_layer &w = state.model->layers[layer];
    const LayerMatrices &m = state.layers[size_t(layer)];
    const Activations &a = state.act;
    const int k = c.n_expert_used, width = c.d_ff_expert;
    const FoldedNorm folded_norm;
    const FoldedNorm *norm = folded ? &folded_norm : nullptr;
    int32_t *counts = expert_counts ? expert_counts + int64_t(layer) * c.n_expert : nullptr;
    const bool grouped = grouped_moe(c);
    hp_cuda_moe::MoeStep step;
    if (grouped) {
        hp_cuda_moe::RouteParams &r = step.route;
        r.logits = a.router;
        r.n_token = n_token;
        r.n_expert = c.n_expert;
        r.k = k;
        r.norm_topk_prob = c.norm_topk_prob;
        if (folded) {
            r.x_sum_sq = a.sum_sq;
            r.n_sum_sq = (c.d_model + hp_cuda_gemv::kTileRows - 1) / hp_cuda_gemv::kTileRows;
            r.d_model = c.d_model;
            r.norm_eps = c.norm_eps;
        }
        r.expert_counts = counts;
        r.routing = {a.expert_index, a.expert_weight, a.n_active, a.active_expert, a.group_start, a.group_pair, a.inv_rms};
        step.gate = m.expert_tables;
        step.up = m.expert_tables + c.n_expert;
        step.down = m.expert_tables + 2 * c.n_expert;
        step.vec = m.experts_aligned;
        step.h = a.h;
        step.d_model = c.d_model;
        step.d_ff = width;
        step.act = a.expert_act;
        step.out = a.expert_out;
        step.x = a.x;
        step.down_tiles = n_token >= HP_CUDA_MOE_DOWN_TILES_MIN_TOKENS ? HP_CUDA_MOE_DOWN_TILES : 1;
        step.single_token = HP_CUDA_MOE_SINGLE_TOKEN && n_token == 1 && !present(w.shared_gate) && k <= hp_cuda_moe::kMaxSingleExperts;
        const bool fold = HP_CUDA_GEMV_NORM && use_gemv(state, n_token);
        if (step.single_token && next_norm && fold) {
            step.norm_out.h = a.h;
            step.norm_out.w = next_norm->data;
            step.norm_out.w_dtype = next_norm->dtype;
            step.norm_out.sum_sq = a.sum_sq;
            next = NextInput::folded;
        } else if (!step.single_token && next_norm && !next_is_output) {
            step.next_norm_w = next_norm->data;
            step.next_norm_dtype = next_norm->dtype;
            step.norm_eps = c.norm_eps;
            step.h_out = a.h;
            next = NextInput::normed;
        }
    }
    if (step.single_token && HP_CUDA_MOE_FUSED && m.router.n_in == c.d_model) {  // router to residual in one launch (moe_fused.cuh)
        hp_cuda_moe::FusedParams f = hp_cuda_moe::fused_params(step, m.router.w, a.router, state.moe_barrier, state.moe_partial, state.moe_logit_tags,
                                                               state.moe_items, state.moe_act_tags);
        if (state.moe_trace) f.trace = state.moe_trace + size_t(layer) * hp_cuda_gemv::device_sm_count() * hp_cuda_moe::kFusedTracePoints;
        if (hp_cuda_moe::fused_fits(f, m.experts_aligned) && hp_cuda_moe::fused_resident(f)) {
            if (const cudaError_t code = hp_cuda_moe::launch_fused(f, state.stream); code != cudaSuccess) {
                log_message(state, HP_LOG_ERROR, "fused MoE launch", cudaGetErrorString(code));
                return false;
            }
            return true;
        }
    }
    bool ok = project(state, m.router, a.h, a.router, n_token, false, nullptr, norm);
    if (grouped) {
        hp_cuda_moe::moe_experts(step, state.stream);
    } else {
        route_kernel<<<blocks_for(n_token, 64), 64, 0, state.stream>>>(a.router, n_token, c.n_expert, k, c.norm_topk_prob, a.expert_index,
                                                                       a.expert_weight, counts);
        const int rows = HP_CUDA_MOE_ROWS_PER_BLOCK;
        expert_gate_up_kernel<<<dim3((width + rows - 1) / rows, n_token * k), rows * 32, 0, state.stream>>>(
            m.expert_tables, m.expert_tables + c.n_expert, a.expert_index, k, a.h, c.d_model, width, a.act);
        expert_down_kernel<<<dim3((c.d_model + rows - 1) / rows, n_token * k), rows * 32, 0, state.stream>>>(
            m.expert_tables + 2 * c.n_expert, a.expert_index, a.act, width, c.d_model, a.expert_out);
    }
    const bool shared = present(w.shared_gate);
    if (shared) {
        ok = ok && gate_up(state, m.shared_gate, m.shared_up, nullptr, nullptr, a.h, n_token, a.act, norm);
        ok = ok && project(state, m.shared_down, a.act, a.shared_out, n_token, false) &&
             project(state, m.shared_expert_gate, a.h, a.shared_logit, n_token, false, nullptr, norm);
    }
    if (grouped && step.single_token) return ok;
    if (grouped) {
        step.shared = shared ? a.shared_out : nullptr;
        step.shared_logit = a.shared_logit;
        hp_cuda_moe::moe_combine(step, state.stream);
    } else {
        moe_combine_kernel<<<n_token, 256, 0, state.stream>>>(a.x, a.expert_out, a.expert_weight, k, shared ? a.shared_out : nullptr,
                                                              a.shared_logit, c.d_model);
    }
    return ok;
}

int baseline_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    BaselineState &state = *static_cast<BaselineState *>(state_ptr);
    const hp_model &model = *state.model;
    const hp_config &c = model.config;
    const int n_token = batch->n_token;
    if (n_token < 0 || batch->n_seq < 0 || batch->n_logit_row < 0 || batch->max_blocks_per_seq <= 0) return HP_ERR_INVALID;
    if (n_token == 0) return HP_OK;
    if (n_token > state.act.capacity) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(state.stream, &capture);
        if (capture != cudaStreamCaptureStatusNone) {
            log_message(state, HP_LOG_ERROR, "workspace", "a captured step outgrew the workspace; run it once uncaptured first");
            return HP_ERR_OUT_OF_MEMORY;
        }
        if (!reserve(state, n_token)) return HP_ERR_OUT_OF_MEMORY;
    }
    const Activations &a = state.act;
    const int max_positions = batch->max_blocks_per_seq * model.kv->block_tokens;
    int n_split = std::clamp((max_positions + HP_CUDA_ATTN_SPLIT_TOKENS - 1) / HP_CUDA_ATTN_SPLIT_TOKENS, 1, HP_CUDA_ATTN_MAX_SPLIT);
    n_split = std::max(1, std::min<int>(n_split, int(kTokenSplits / size_t(n_token))));
    if (size_t(n_token) > kTokenSplits) return HP_ERR_UNSUPPORTED;  // attention partials hold kTokenSplits tokens

    if (state.step_kernel && n_token == 1 && batch->n_seq == 1 && batch->n_logit_row == 1) {
        const bool ok = persistent_step(state, *batch, *out);
        if (const cudaError_t code = cudaGetLastError(); code != cudaSuccess) {
            log_message(state, HP_LOG_ERROR, "kernel launch", cudaGetErrorString(code));
            return HP_ERR_INVALID;
        }
        return ok ? HP_OK : HP_ERR_INVALID;
    }
    bool ok = embed_and_norm(state, batch->token_ids, n_token, batch->seq_token_start, batch->n_seq);
    // RMSNorm folded into the GEMVs (gemv.cuh): `folded` says a.h and a.sum_sq already hold the next
    // norm's operand and partial sums (written by the last residual GEMV).
    const bool fold = HP_CUDA_GEMV_NORM && use_gemv(state, n_token);
    const bool qkv_skinny = qkv_on_skinny(state, n_token);  // knob skinny_qkv_max_tokens
    state.prefetch_step = state.weight_stream.size() > 0 && use_gemv(state, n_token);
    state.weight_stream.restart();
    const FoldedNorm folded_norm;
    bool folded = false;
    bool normed = false;  // a.h already holds this layer's attention input (written by a grouped MoE combine)
    for (int layer = 0; ok && layer < c.n_layer; ++layer) {
        const hp_layer &w = model.layers[layer];
        const LayerMatrices &m = state.layers[size_t(layer)];
        const FoldedNorm *attn_norm = folded ? &folded_norm : nullptr;
        if (layer > 0 && !folded && !normed) ok = ok && rms_norm(state, w.attn_norm, nullptr, n_token, a.h);
        bool head_done = false;        // the q/k/v launch did the head kernel's work
        const float *qkv_rows = nullptr;  // q/k/v in a.qkv's rows (knob gemm_qkv), else in a.q, a.k, a.v
        if (HP_CUDA_GEMV_FUSE && (use_gemv(state, n_token) || qkv_skinny) && m.wq.n_in == m.wk.n_in && m.wq.n_in == m.wv.n_in) {
            // q, k and v read the same input: one launch. Their biases, norms, RoPE and the KV write
            // are the head kernel's, or this launch's epilogue where the skinny GEMM takes it
            // (knob skinny_head).
            hp_cuda_gemv::Params p;
            set_input(state, p, a.h, attn_norm, kPartQkv);
            if (qkv_skinny) p.skinny = true;  // above the decode kernels' limit: this launch only
            p.n_in = m.wq.n_in;
            p.n_token = n_token;
            p.n_segment = 3;
            p.segment[0] = gemv_segment(m.wq, a.q);
            p.segment[1] = gemv_segment(m.wk, a.k);
            p.segment[2] = gemv_segment(m.wv, a.v);
            if (state.prefetch_step) p.prefetch = state.weight_stream.next(m.qkv_end, kL2Lookahead);
            head_done = fold_head(state, *batch, layer, p);
            hp_cuda_gemv::launch<hp_cuda_gemv::kStore>(p, state.stream);
        } else if (!use_gemv(state, n_token) && state.qkv_parts > 0) {
            ok = ok && gemm_qkv(state, layer, n_token);
            qkv_rows = a.qkv;
        } else {
            ok = ok && project(state, m.wq, a.h, a.q, n_token, false, nullptr, attn_norm);
            if (!use_gemv(state, n_token)) {
                ok = ok && gemm_pair(state, m.wk, m.wv, a.h, a.k, a.v, n_token);
            } else {
                ok = ok && project(state, m.wk, a.h, a.k, n_token, false, nullptr, attn_norm) &&
                     project(state, m.wv, a.h, a.v, n_token, false, nullptr, attn_norm);
            }
        }
        // o_proj folds the FFN norm when gate/up (or the router and the grouped experts) are GEMVs.
        const bool grouped = w.is_moe && grouped_moe(c);
        const bool ffn_folded = fold && (!w.is_moe || grouped);
        const OProjInput oproj{&m.wo, &w.bo, ffn_folded ? &w.ffn_norm : nullptr};  // knob attn_fd_oproj: the attention may do o_proj
        bool oproj_done = false;
        switch (model.kv->dtype) {
            case HP_DTYPE_F32: oproj_done = launch_attention<HP_DTYPE_F32>(state, *batch, layer, n_split, head_done, &oproj, qkv_rows); break;
            case HP_DTYPE_F16: oproj_done = launch_attention<HP_DTYPE_F16>(state, *batch, layer, n_split, head_done, &oproj, qkv_rows); break;
            case HP_DTYPE_BF16: oproj_done = launch_attention<HP_DTYPE_BF16>(state, *batch, layer, n_split, head_done, &oproj, qkv_rows); break;
        }
        folded = ffn_folded;
        if (!oproj_done && !folded && use_split(state, m.wo, n_token)) {
            ok = ok && project_split(state, m.wo, a.attn, n_token, &w.bo);  // the ffn norm below adds it
        } else if (!oproj_done) {
            ok = ok && project(state, m.wo, a.attn, a.x, n_token, true, &w.bo, nullptr, folded ? &w.ffn_norm : nullptr, m.o_end, kPartOProj);
        }
        if (!folded) ok = ok && rms_norm(state, w.ffn_norm, nullptr, n_token, a.h);
        if (w.is_moe) {
            const hp_tensor *next_norm = layer + 1 < c.n_layer ? &model.layers[layer + 1].attn_norm
                                         : batch->n_logit_row > 0 ? &model.output_norm : nullptr;
            NextInput next = NextInput::raw;
            ok = ok && moe(state, layer, n_token, out->expert_counts, folded, next_norm, layer + 1 == c.n_layer, next);
            folded = next == NextInput::folded;
            normed = next == NextInput::normed;
            continue;
        }
        normed = false;
        ok = ok && gate_up(state, m.w_gate, m.w_up, &w.b_gate, &w.b_up, a.h, n_token, a.act, folded ? &folded_norm : nullptr, m.gate_up_end);
        // down_proj folds the next layer's attention norm, or the output norm.
        const hp_tensor *next_norm = layer + 1 < c.n_layer ? &model.layers[layer + 1].attn_norm
                                     : batch->n_logit_row > 0 ? &model.output_norm : nullptr;
        folded = fold && next_norm;
        if (!folded && layer + 1 < c.n_layer && use_split(state, m.w_down, n_token)) {
            ok = ok && project_split(state, m.w_down, a.act, n_token, &w.b_down);  // the next layer's attention norm adds it
        } else {
            ok = ok && project(state, m.w_down, a.act, a.x, n_token, true, &w.b_down, nullptr, folded ? next_norm : nullptr, m.down_end);
        }
    }
    if (batch->n_logit_row > 0) {
        const FoldedNorm logit_norm{batch->logit_rows};
        if (folded) {  // a.h holds every token's row: the lm_head reads the logit rows of it
            ok = ok && project(state, state.lm_head, a.h, out->logits, batch->n_logit_row, false, nullptr, &logit_norm, nullptr,
                               state.weight_stream.size(), kPartLmHead);
        } else {
            ok = ok && rms_norm(state, model.output_norm, batch->logit_rows, batch->n_logit_row, a.h);
            ok = ok && project(state, state.lm_head, a.h, out->logits, batch->n_logit_row, false, nullptr, nullptr, nullptr,
                               state.weight_stream.size(), kPartLmHead);
        }
    }
    if (const cudaError_t code = cudaGetLastError(); code != cudaSuccess) {
        log_message(state, HP_LOG_ERROR, "kernel launch", cudaGetErrorString(code));
        return HP_ERR_INVALID;
    }
    return ok ? HP_OK : HP_ERR_INVALID;
}

// HP_CUDA_PERSISTENT_TRACE builds: the last persistent step's time per op kind, averaged over the layers: the
// op's span (from the previous op's last arrival to its own), and per block on average the time to
// its input, its work, its arrival, and the barrier's latency (previous last arrival to first start).
void log_step_trace(const BaselineState &state) {
    const size_t n_op = state.step_ops_host.size(), grid = size_t(state.step_grid);
    std::vector<unsigned long long> trace(n_op * grid * 4);
    if (trace.empty() || cudaMemcpy(trace.data(), state.step_trace, trace.size() * sizeof(trace[0]), cudaMemcpyDeviceToHost) != cudaSuccess) return;
    if (trace[0] == 0) return;  // no persistent step ran
    const char *names[] = {"q/k/v", "attention", "o_proj", "gate/up", "down", "lm_head"};
    double span[6] = {}, phase[6][3] = {}, wait[6] = {};
    int count[6] = {};
    unsigned long long previous_end = 0, first_start = ~0ull;
    for (size_t i = 0; i < n_op; ++i) {
        unsigned long long start_min = ~0ull, end_max = 0;
        double phases[3] = {};
        for (size_t b = 0; b < grid; ++b) {
            const unsigned long long *t = &trace[(i * grid + b) * 4];
            start_min = std::min(start_min, t[0]);
            end_max = std::max(end_max, t[3]);
            for (int k = 0; k < 3; ++k) phases[k] += double(t[k + 1] - t[k]);
        }
        first_start = std::min(first_start, start_min);
        const int kind = i + 1 == n_op ? 5 : int(i % 5);
        span[kind] += double(end_max - (i ? previous_end : start_min)) / 1e3;
        for (int k = 0; k < 3; ++k) phase[kind][k] += phases[k] / double(grid) / 1e3;
        wait[kind] += i ? double(start_min - previous_end) / 1e3 : 0.0;
        ++count[kind];
        previous_end = end_max;
    }
    char line[760];
    int at = std::snprintf(line, sizeof line, "last step %.1f us; per op, us: span (block: input, work, arrival; barrier):", double(previous_end - first_start) / 1e3);
    for (int k = 0; k < 6 && at < int(sizeof line); ++k) {
        const double n = count[k];
        if (n) at += std::snprintf(line + at, sizeof line - size_t(at), " %s %.2f (%.2f, %.2f, %.2f; %.2f);", names[k], span[k] / n,
                                   phase[k][0] / n, phase[k][1] / n, phase[k][2] / n, wait[k] / n);
    }
    log_message(state, HP_LOG_INFO, "persistent trace", line);
}

// HP_CUDA_MOE_FUSED_TRACE builds: the last step's fused MoE kernels, averaged over the layers: per
// block the time to pass griddepcontrol.wait after it started, the router rows, the logits' way to
// every block (barrier 1 and their read, or the tagged words: moe_fused_logit_flags), the
// routing, the gate/up rows, barrier 2 and down's parts (split down: gate/up, its partials, the
// barrier, the tile sums); the kernel's span (first block past the wait to the last block's end)
// and the gate/up phase's span (first block routed to the last one done).
void log_moe_trace(const BaselineState &state) {
    constexpr int P = hp_cuda_moe::kFusedTracePoints;
    const size_t grid = size_t(hp_cuda_gemv::device_sm_count()), n_layer = size_t(state.model->config.n_layer);
    std::vector<unsigned long long> trace(n_layer * grid * P);
    if (cudaMemcpy(trace.data(), state.moe_trace, trace.size() * sizeof(trace[0]), cudaMemcpyDeviceToHost) != cudaSuccess) return;
    double phase[P - 1] = {}, span = 0, gate_up_span = 0;
    int layers = 0;
    for (size_t l = 0; l < n_layer; ++l) {
        const unsigned long long *t = &trace[l * grid * P];
        if (t[0] == 0) continue;
        unsigned long long first_wait = ~0ull, last_end = 0, first_routed = ~0ull, last_gate_up = 0;
        for (size_t b = 0; b < grid; ++b) {
            const unsigned long long *bt = t + b * P;
            for (int k = 0; k + 1 < P; ++k) phase[k] += double(bt[k + 1] - bt[k]) / double(grid) / 1e3;
            first_wait = std::min(first_wait, bt[1]);
            last_end = std::max(last_end, bt[P - 1]);
            first_routed = std::min(first_routed, bt[4]);
            last_gate_up = std::max(last_gate_up, bt[5]);
        }
        span += double(last_end - first_wait) / 1e3;
        gate_up_span += double(last_gate_up - first_routed) / 1e3;
        ++layers;
    }
    if (!layers) return;
    char line[480];
    const char *tail = hp_cuda_moe::kFusedDownKnob == hp_cuda_moe::FusedDown::split
                           ? "gate/up %.2f, down partials %.2f, barrier 2 %.2f, tile sums %.2f, the rest %.2f"
                           : "gate/up %.2f, barrier 2 %.2f, act %.2f, first down tile %.2f, the rest of down %.2f";
    const int at = std::snprintf(line, sizeof line, "per layer, us: span %.2f, gate/up span %.2f; per block: wait %.2f, router %.2f, logits in %.2f, route %.2f, ",
                                 span / layers, gate_up_span / layers, phase[0] / layers, phase[1] / layers, phase[2] / layers, phase[3] / layers);
    std::snprintf(line + at, sizeof line - size_t(at), tail, phase[4] / layers, phase[5] / layers, phase[6] / layers, phase[7] / layers,
                  phase[8] / layers);
    log_message(state, HP_LOG_INFO, "fused MoE trace", line);
}

// HP_CUDA_ATTN_TRACE builds: the last step's flash-decoding attention per phase, averaged over the
// blocks that recorded and the layers: from the block's start to the wait's end, its steps, the
// block's warps, their combination, the cluster barrier, the end; span: from the first block past
// the wait to the last block's end.
void log_attn_trace(const BaselineState &state) {
    constexpr int P = kFdTracePoints;
    const size_t n_layer = size_t(state.model->config.n_layer);
    std::vector<unsigned long long> trace(n_layer * kFdTraceBlocks * P);
    if (cudaMemcpy(trace.data(), state.attn_trace, trace.size() * sizeof(trace[0]), cudaMemcpyDeviceToHost) != cudaSuccess) return;
    double phase[P - 1] = {}, span = 0, wait_skew = 0;
    int layers = 0;
    for (size_t l = 0; l < n_layer; ++l) {
        const unsigned long long *t = &trace[l * kFdTraceBlocks * P];
        unsigned long long first_wait = ~0ull, last_wait = 0, last_end = 0;
        double layer_phase[P - 1] = {};
        int blocks = 0;
        for (size_t b = 0; b < size_t(kFdTraceBlocks); ++b) {
            const unsigned long long *bt = t + b * P;
            if (bt[0] == 0) continue;
            const unsigned long long cluster = bt[5] ? bt[5] : bt[4];  // no cluster barrier: 0 us
            const unsigned long long at[P] = {bt[0], bt[1], bt[2], bt[3], bt[4], cluster, bt[6]};
            for (int k = 0; k + 1 < P; ++k) layer_phase[k] += double(at[k + 1] - at[k]) / 1e3;
            first_wait = std::min(first_wait, bt[1]);
            last_wait = std::max(last_wait, bt[1]);
            last_end = std::max(last_end, bt[6]);
            ++blocks;
        }
        if (!blocks) continue;
        for (int k = 0; k + 1 < P; ++k) phase[k] += layer_phase[k] / blocks;
        span += double(last_end - first_wait) / 1e3;
        wait_skew += double(last_wait - first_wait) / 1e3;
        ++layers;
    }
    if (!layers) return;
    char line[400];
    std::snprintf(line, sizeof line,
                  "per layer, us: span %.2f (last block past the wait %.2f after the first); per block: to the wait's end %.2f, steps %.2f, "
                  "block's warps %.2f, their combination %.2f, cluster barrier %.2f, end %.2f",
                  span / layers, wait_skew / layers, phase[0] / layers, phase[1] / layers, phase[2] / layers, phase[3] / layers,
                  phase[4] / layers, phase[5] / layers);
    log_message(state, HP_LOG_INFO, "attention trace", line);
}

void baseline_destroy(void *state_ptr) {
    auto *state = static_cast<BaselineState *>(state_ptr);
    cudaStreamSynchronize(state->stream);
    if (state->step_trace) log_step_trace(*state);
    if (state->moe_trace) log_moe_trace(*state);
    if (state->attn_trace) log_attn_trace(*state);
    cublasDestroy(state->cublas);
    for (void *ptr : state->allocations) state->services.free(state->services.ctx, ptr);
    for (void *ptr : state->activation_allocations) state->services.free(state->services.ctx, ptr);
    delete state;
}

const hp_forward_vtable kVtable = {HP_FORWARD_ABI_VERSION, "cuda-baseline", baseline_create, baseline_forward, baseline_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kVtable; }
