// The CUDA reference forward pass: the GPU specification, checked against the CPU reference
// (forward/cpu/reference/forward.cpp), whose structure and function names it mirrors.
//
// Float32 activations and accumulation over weights as stored (bf16/f16/f32), one plain kernel per
// operation (kernels.cuh), every token batched through each operation in the CPU's order.
// Device convention (docs/cuda.md): on HP_DEVICE_CUDA the hp_batch arrays, hp_output.logits and
// hp_output.expert_counts are device pointers; all work goes on hp_services.stream. The batch is
// copied back and validated on the host first, so this pass synchronizes and is NOT CUDA-graph
// capturable (the baseline is). Depends on the ABI header and the CUDA runtime only.
#include <cuda_runtime.h>

#include <hotpass/forward_abi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>
#include <vector>

#include "kernels.cuh"

namespace {

using namespace hp_cuda_reference;

bool present(const hp_tensor &tensor) { return tensor.data != nullptr; }

// inv_freq[i] = theta^(-2i/d_head), with Llama 3's scaling: the CPU reference's rope_inv_freq.
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

// Per-token float32 activations, sized for `capacity` tokens.
struct Activations {
    int capacity = 0;
    float *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *delta = nullptr;
    float *gate = nullptr, *up = nullptr, *expert_out = nullptr, *router = nullptr, *expert_weight = nullptr, *shared_logit = nullptr;
    int32_t *expert_index = nullptr, *token_seq = nullptr;
};

struct ReferenceState {
    const hp_model *model;
    hp_services services;
    cudaStream_t stream;
    float *inv_freq = nullptr;  // device [d_head / 2]
    // Per MoE layer: device tables of the experts' weight pointers, gate[E], up[E], down[E].
    std::vector<const void **> expert_tables;
    Activations act;
    std::vector<void *> allocations;  // everything from services.alloc, freed by destroy
};

void *state_alloc(ReferenceState &state, size_t bytes) {
    void *ptr = state.services.alloc(state.services.ctx, std::max<size_t>(bytes, 4), 256);
    if (ptr) state.allocations.push_back(ptr);
    return ptr;
}

void state_free(ReferenceState &state, void *ptr) {
    if (!ptr) return;
    state.services.free(state.services.ctx, ptr);
    state.allocations.erase(std::find(state.allocations.begin(), state.allocations.end(), ptr));
}

void log_error(const ReferenceState &state, const char *what, cudaError_t code) {
    if (!state.services.log) return;
    char message[256];
    std::snprintf(message, sizeof message, "cuda-reference: %s: %s", what, cudaGetErrorString(code));
    state.services.log(state.services.ctx, HP_LOG_ERROR, message);
}

int max_ff_width(const hp_config &c) { return std::max({c.d_ff, c.d_ff_expert, c.d_ff_shared_expert, 1}); }

// Grows the activations to hold n_token tokens (the stream is idle: forward synchronized).
bool reserve(ReferenceState &state, int n_token) {
    Activations &a = state.act;
    if (n_token <= a.capacity) return true;
    for (void *ptr : {(void *)a.x, (void *)a.h, (void *)a.q, (void *)a.k, (void *)a.v, (void *)a.attn, (void *)a.delta,
                      (void *)a.gate, (void *)a.up, (void *)a.expert_out, (void *)a.router, (void *)a.expert_weight,
                      (void *)a.shared_logit, (void *)a.expert_index, (void *)a.token_seq}) {
        state_free(state, ptr);
    }
    a = Activations{};
    const hp_config &c = state.model->config;
    const size_t n = size_t(std::max(n_token, 16));
    const size_t f = sizeof(float);
    const size_t q_width = size_t(c.n_head) * c.d_head, kv_width = size_t(c.n_head_kv) * c.d_head;
    const size_t k = size_t(std::max(c.n_expert_used, 1));
    a.x = static_cast<float *>(state_alloc(state, n * c.d_model * f));
    a.h = static_cast<float *>(state_alloc(state, n * c.d_model * f));
    a.q = static_cast<float *>(state_alloc(state, n * q_width * f));
    a.k = static_cast<float *>(state_alloc(state, n * kv_width * f));
    a.v = static_cast<float *>(state_alloc(state, n * kv_width * f));
    a.attn = static_cast<float *>(state_alloc(state, n * q_width * f));
    a.delta = static_cast<float *>(state_alloc(state, n * c.d_model * f));
    a.gate = static_cast<float *>(state_alloc(state, n * max_ff_width(c) * f));
    a.up = static_cast<float *>(state_alloc(state, n * max_ff_width(c) * f));
    a.expert_out = static_cast<float *>(state_alloc(state, n * c.d_model * f));
    a.router = static_cast<float *>(state_alloc(state, n * std::max(c.n_expert, 1) * f));
    a.expert_weight = static_cast<float *>(state_alloc(state, n * k * f));
    a.shared_logit = static_cast<float *>(state_alloc(state, n * f));
    a.expert_index = static_cast<int32_t *>(state_alloc(state, n * k * sizeof(int32_t)));
    a.token_seq = static_cast<int32_t *>(state_alloc(state, n * sizeof(int32_t)));
    for (void *ptr : {(void *)a.x, (void *)a.h, (void *)a.q, (void *)a.k, (void *)a.v, (void *)a.attn, (void *)a.delta,
                      (void *)a.gate, (void *)a.up, (void *)a.expert_out, (void *)a.router, (void *)a.expert_weight,
                      (void *)a.shared_logit, (void *)a.expert_index, (void *)a.token_seq}) {
        if (!ptr) return false;
    }
    a.capacity = int(n);
    return true;
}

// The CPU reference's batch_is_valid, on a host copy of the batch arrays.
bool batch_is_valid(const hp_model &model, const hp_batch &batch) {
    const hp_config &c = model.config;
    if (batch.seq_token_start[0] != 0 || batch.seq_token_start[batch.n_seq] != batch.n_token) return false;
    for (int s = 0; s < batch.n_seq; ++s) {
        const int begin = batch.seq_token_start[s], end = batch.seq_token_start[s + 1];
        if (end < begin) return false;
        for (int t = begin; t < end; ++t) {
            const int position = batch.positions[t];
            if (batch.token_ids[t] < 0 || batch.token_ids[t] >= c.n_vocab || position < 0) return false;
            if (t > begin && position != batch.positions[t - 1] + 1) return false;
            if (position / model.kv->block_tokens >= batch.max_blocks_per_seq) return false;
            for (int p = 0; p <= position; p += model.kv->block_tokens) {
                const int block = batch.block_tables[int64_t(s) * batch.max_blocks_per_seq + p / model.kv->block_tokens];
                if (block < 0 || block >= model.kv->n_block) return false;
            }
        }
    }
    for (int r = 0; r < batch.n_logit_row; ++r) {
        if (batch.logit_rows[r] < 0 || batch.logit_rows[r] >= batch.n_token) return false;
    }
    return true;
}

bool device_batch_is_valid(ReferenceState &state, const hp_batch &batch) {
    if (batch.n_token < 0 || batch.n_seq < 0 || batch.n_logit_row < 0 || batch.max_blocks_per_seq < 0) return false;
    std::vector<int32_t> token_ids(size_t(batch.n_token)), positions(size_t(batch.n_token)), seq_start(size_t(batch.n_seq) + 1),
        tables(size_t(batch.n_seq) * size_t(batch.max_blocks_per_seq)), logit_rows(size_t(batch.n_logit_row));
    const std::pair<std::vector<int32_t> *, const int32_t *> copies[] = {{&token_ids, batch.token_ids}, {&positions, batch.positions},
                                                                         {&seq_start, batch.seq_token_start}, {&tables, batch.block_tables},
                                                                         {&logit_rows, batch.logit_rows}};
    for (const auto &[host, device] : copies) {
        if (host->empty()) continue;
        if (cudaMemcpyAsync(host->data(), device, host->size() * sizeof(int32_t), cudaMemcpyDeviceToHost, state.stream) != cudaSuccess) return false;
    }
    if (cudaStreamSynchronize(state.stream) != cudaSuccess) return false;
    hp_batch host = batch;
    host.token_ids = token_ids.data();
    host.positions = positions.data();
    host.seq_token_start = seq_start.data();
    host.block_tables = tables.data();
    host.logit_rows = logit_rows.data();
    return batch_is_valid(*state.model, host);
}

// y = x W^T (+ b) for n_row rows: the CPU's linear(), over a batch.
void linear(ReferenceState &state, const hp_tensor &w, const hp_tensor &b, const float *x, int64_t x_stride, float *y,
            int64_t y_stride, int n_row) {
    const int n_out = int(w.shape[0]), n_in = int(w.shape[1]);
    if (n_row == 0) return;
    linear_kernel<<<dim3((n_out + 7) / 8, n_row), 256, 0, state.stream>>>(w.dtype, w.data, nullptr, nullptr, 0, 1, b.dtype,
                                                                         present(b) ? b.data : nullptr, x, x_stride, y, y_stride, n_out, n_in);
}

void rms_norm(ReferenceState &state, const float *x, int64_t x_stride, const int32_t *rows, float *y, int64_t y_stride, int n,
              int n_row, const hp_tensor &weight) {
    if (n_row == 0) return;
    rms_norm_kernel<<<n_row, 256, 0, state.stream>>>(x, x_stride, rows, y, y_stride, n, weight.dtype, weight.data, state.model->config.norm_eps);
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// down(silu(gate(x)) * up(x)) (+ biases) for n_row rows into y.
void gated_mlp(ReferenceState &state, const hp_tensor &gate, const hp_tensor &up, const hp_tensor &down, const hp_tensor &b_gate,
               const hp_tensor &b_up, const hp_tensor &b_down, const float *x, float *y, int n_row) {
    const hp_config &c = state.model->config;
    const int width = int(gate.shape[0]);
    linear(state, gate, b_gate, x, c.d_model, state.act.gate, width, n_row);
    linear(state, up, b_up, x, c.d_model, state.act.up, width, n_row);
    silu_mul_kernel<<<blocks_for(int64_t(n_row) * width, 256), 256, 0, state.stream>>>(state.act.gate, state.act.up, int64_t(n_row) * width);
    linear(state, down, b_down, state.act.gate, width, y, c.d_model, n_row);
}

// Routed experts plus the optional shared expert, for every token: the CPU's moe().
void moe(ReferenceState &state, int layer, const float *x, float *y, int n_token, int32_t *expert_counts) {
    const hp_config &c = state.model->config;
    const hp_layer &w = state.model->layers[layer];
    const hp_tensor none{};
    Activations &a = state.act;
    linear(state, w.router, none, x, c.d_model, a.router, c.n_expert, n_token);
    route_kernel<<<blocks_for(n_token, 64), 64, 0, state.stream>>>(a.router, n_token, c.n_expert, c.n_expert_used, c.norm_topk_prob,
                                                                   a.expert_index, a.expert_weight,
                                                                   expert_counts ? expert_counts + int64_t(layer) * c.n_expert : nullptr);
    cudaMemsetAsync(y, 0, sizeof(float) * size_t(n_token) * c.d_model, state.stream);
    const void *const *tables = state.expert_tables[size_t(layer)];
    const int width = c.d_ff_expert, k = c.n_expert_used;
    const dim3 up_grid((width + 7) / 8, n_token), down_grid((c.d_model + 7) / 8, n_token);
    for (int slot = 0; slot < k; ++slot) {
        linear_kernel<<<up_grid, 256, 0, state.stream>>>(w.expert_gate[0].dtype, nullptr, tables, a.expert_index, slot, k, HP_DTYPE_F32,
                                                         nullptr, x, c.d_model, a.gate, width, width, c.d_model);
        linear_kernel<<<up_grid, 256, 0, state.stream>>>(w.expert_up[0].dtype, nullptr, tables + c.n_expert, a.expert_index, slot, k,
                                                         HP_DTYPE_F32, nullptr, x, c.d_model, a.up, width, width, c.d_model);
        silu_mul_kernel<<<blocks_for(int64_t(n_token) * width, 256), 256, 0, state.stream>>>(a.gate, a.up, int64_t(n_token) * width);
        linear_kernel<<<down_grid, 256, 0, state.stream>>>(w.expert_down[0].dtype, nullptr, tables + 2 * c.n_expert, a.expert_index, slot,
                                                           k, HP_DTYPE_F32, nullptr, a.gate, width, a.expert_out, c.d_model, c.d_model, width);
        weighted_add_kernel<<<n_token, 256, 0, state.stream>>>(y, a.expert_out, a.expert_weight, slot, k, nullptr, c.d_model);
    }
    if (present(w.shared_gate)) {
        gated_mlp(state, w.shared_gate, w.shared_up, w.shared_down, none, none, none, x, a.expert_out, n_token);
        linear(state, w.shared_expert_gate, none, x, c.d_model, a.shared_logit, 1, n_token);
        weighted_add_kernel<<<n_token, 256, 0, state.stream>>>(y, a.expert_out, nullptr, 0, 1, a.shared_logit, c.d_model);
    }
}

int reference_create(const hp_model *model, const hp_services *services, void **state_out) {
    if (model->device != HP_DEVICE_CUDA) return HP_ERR_UNSUPPORTED;
    const hp_config &c = model->config;
    if (c.d_head % 2 != 0 || c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) return HP_ERR_UNSUPPORTED;
    auto *state = new (std::nothrow) ReferenceState{model, *services, static_cast<cudaStream_t>(services->stream)};
    if (!state) return HP_ERR_OUT_OF_MEMORY;
    const std::vector<float> inv_freq = rope_inv_freq(c);
    state->inv_freq = static_cast<float *>(state_alloc(*state, inv_freq.size() * sizeof(float)));
    bool ok = state->inv_freq &&
              cudaMemcpyAsync(state->inv_freq, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice, state->stream) == cudaSuccess;
    state->expert_tables.assign(size_t(c.n_layer), nullptr);
    std::vector<std::vector<const void *>> host_tables(size_t(c.n_layer));
    for (int layer = 0; ok && layer < c.n_layer; ++layer) {
        const hp_layer &w = model->layers[layer];
        if (!w.is_moe) continue;
        std::vector<const void *> &table = host_tables[size_t(layer)];
        for (const hp_tensor *experts : {w.expert_gate, w.expert_up, w.expert_down}) {
            for (int e = 0; e < c.n_expert; ++e) table.push_back(experts[e].data);
        }
        state->expert_tables[size_t(layer)] = static_cast<const void **>(state_alloc(*state, table.size() * sizeof(void *)));
        ok = state->expert_tables[size_t(layer)] &&
             cudaMemcpyAsync(state->expert_tables[size_t(layer)], table.data(), table.size() * sizeof(void *), cudaMemcpyHostToDevice,
                             state->stream) == cudaSuccess;
    }
    ok = ok && reserve(*state, 64) && cudaStreamSynchronize(state->stream) == cudaSuccess;
    if (!ok) {
        for (void *ptr : state->allocations) services->free(services->ctx, ptr);
        delete state;
        return HP_ERR_OUT_OF_MEMORY;
    }
    *state_out = state;
    return HP_OK;
}

int reference_forward(void *state_ptr, const hp_batch *batch, hp_output *out) {
    ReferenceState &state = *static_cast<ReferenceState *>(state_ptr);
    const hp_model &model = *state.model;
    const hp_config &c = model.config;
    const hp_kv_cache &kv = *model.kv;
    if (!device_batch_is_valid(state, *batch)) return HP_ERR_INVALID;
    if (!reserve(state, batch->n_token)) return HP_ERR_OUT_OF_MEMORY;
    const int n_token = batch->n_token;
    if (n_token == 0) return HP_OK;
    const int q_width = c.n_head * c.d_head, kv_width = c.n_head_kv * c.d_head;
    Activations &a = state.act;
    cudaStream_t stream = state.stream;

    token_seq_kernel<<<blocks_for(batch->n_seq, 64), 64, 0, stream>>>(batch->seq_token_start, batch->n_seq, a.token_seq);
    embed_kernel<<<n_token, 256, 0, stream>>>(a.x, batch->token_ids, model.token_embd.dtype, model.token_embd.data, c.d_model);
    for (int layer = 0; layer < c.n_layer; ++layer) {
        const hp_layer &w = model.layers[layer];
        // Projections, q/k norm and RoPE for every token; K and V go into the cache before any
        // attention so that later tokens of a chunk see them.
        rms_norm(state, a.x, c.d_model, nullptr, a.h, c.d_model, c.d_model, n_token, w.attn_norm);
        linear(state, w.wq, w.bq, a.h, c.d_model, a.q, q_width, n_token);
        linear(state, w.wk, w.bk, a.h, c.d_model, a.k, kv_width, n_token);
        linear(state, w.wv, w.bv, a.h, c.d_model, a.v, kv_width, n_token);
        if (c.has_qk_norm) {
            rms_norm(state, a.q, c.d_head, nullptr, a.q, c.d_head, c.d_head, n_token * c.n_head, w.q_norm);
            rms_norm(state, a.k, c.d_head, nullptr, a.k, c.d_head, c.d_head, n_token * c.n_head_kv, w.k_norm);
        }
        rope_kernel<<<blocks_for(int64_t(n_token) * c.n_head * (c.d_head / 2), 256), 256, 0, stream>>>(a.q, n_token * c.n_head, c.n_head, c.d_head,
                                                                                                      batch->positions, state.inv_freq);
        rope_kernel<<<blocks_for(int64_t(n_token) * c.n_head_kv * (c.d_head / 2), 256), 256, 0, stream>>>(
            a.k, n_token * c.n_head_kv, c.n_head_kv, c.d_head, batch->positions, state.inv_freq);
        kv_store_kernel<<<n_token, 256, 0, stream>>>(a.k, a.v, kv_width, batch->positions, a.token_seq, batch->block_tables,
                                                     batch->max_blocks_per_seq, kv.block_tokens, kv.dtype, kv.k[layer], kv.v[layer]);
        attention_kernel<<<dim3(c.n_head, n_token), 32, 0, stream>>>(a.q, a.attn, c.n_head, c.n_head_kv, c.d_head, batch->positions,
                                                                     a.token_seq, batch->block_tables, batch->max_blocks_per_seq,
                                                                     kv.block_tokens, kv.dtype, kv.k[layer], kv.v[layer]);
        linear(state, w.wo, w.bo, a.attn, q_width, a.delta, c.d_model, n_token);
        add_kernel<<<blocks_for(int64_t(n_token) * c.d_model, 256), 256, 0, stream>>>(a.x, a.delta, int64_t(n_token) * c.d_model);

        rms_norm(state, a.x, c.d_model, nullptr, a.h, c.d_model, c.d_model, n_token, w.ffn_norm);
        if (w.is_moe) moe(state, layer, a.h, a.delta, n_token, out->expert_counts);
        else gated_mlp(state, w.w_gate, w.w_up, w.w_down, w.b_gate, w.b_up, w.b_down, a.h, a.delta, n_token);
        add_kernel<<<blocks_for(int64_t(n_token) * c.d_model, 256), 256, 0, stream>>>(a.x, a.delta, int64_t(n_token) * c.d_model);
    }
    const hp_tensor none{};
    rms_norm(state, a.x, c.d_model, batch->logit_rows, a.h, c.d_model, c.d_model, batch->n_logit_row, model.output_norm);
    linear(state, model.lm_head, none, a.h, c.d_model, out->logits, c.n_vocab, batch->n_logit_row);
    if (const cudaError_t code = cudaGetLastError(); code != cudaSuccess) {
        log_error(state, "kernel launch", code);
        return HP_ERR_INVALID;
    }
    return HP_OK;
}

void reference_destroy(void *state_ptr) {
    auto *state = static_cast<ReferenceState *>(state_ptr);
    cudaStreamSynchronize(state->stream);
    for (void *ptr : state->allocations) state->services.free(state->services.ctx, ptr);
    delete state;
}

const hp_forward_vtable kVtable = {HP_FORWARD_ABI_VERSION, "cuda-reference", reference_create, reference_forward, reference_destroy};

}  // namespace

extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kVtable; }
