// The CPU reference forward pass: the specification every faster pass is checked against.
//
// Float32 math over bf16/f16/f32 weights, one obvious loop per operation, written from the
// Hugging Face modelling code of Llama, Qwen2, Qwen3, Mixtral, Qwen2-MoE and Qwen3-MoE:
//   x = embed[token]
//   per layer: h = rms_norm(x) * attn_norm; q,k,v = h W^T (+ b); [q/k per-head rms_norm];
//              rope(q, k) (rotate_half pairs i, i + d_head/2); write k,v to the paged cache;
//              causal GQA attention; x += o_proj(attn)
//              h = rms_norm(x) * ffn_norm; x += mlp(h)  (dense SiLU-gated, or routed experts)
//   logits = lm_head(rms_norm(x) * output_norm)
// Clarity over speed: single-threaded, no blocking, no fusion. Depends on the ABI header only.
#include <hotpass/forward_abi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

namespace {

float bf16_to_f32(uint16_t bits) {
    const uint32_t widened = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &widened, sizeof value);
    return value;
}

float f16_to_f32(uint16_t bits) {
    const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    float magnitude;
    if (exponent == 0) magnitude = std::ldexp(float(mantissa), -24);
    else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
    else magnitude = std::ldexp(float(mantissa | 0x400u), int(exponent) - 25);
    return sign ? -magnitude : magnitude;
}

uint16_t f32_to_bf16(float value) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

uint16_t f32_to_f16(float value) {  // via the bit pattern, round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u;
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
    if (abs_bits < 0x38800000u) return sign | uint16_t(std::nearbyint(std::fabs(value) * 16777216.0f));
    const uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    return sign | uint16_t(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

// Element i of a tensor (or of a raw buffer of `dtype`), as float32.
float load(hp_dtype dtype, const void *data, int64_t i) {
    switch (dtype) {
        case HP_DTYPE_F32: return static_cast<const float *>(data)[i];
        case HP_DTYPE_F16: return f16_to_f32(static_cast<const uint16_t *>(data)[i]);
        case HP_DTYPE_BF16: return bf16_to_f32(static_cast<const uint16_t *>(data)[i]);
    }
    return NAN;
}

void store(hp_dtype dtype, void *data, int64_t i, float value) {
    switch (dtype) {
        case HP_DTYPE_F32: static_cast<float *>(data)[i] = value; break;
        case HP_DTYPE_F16: static_cast<uint16_t *>(data)[i] = f32_to_f16(value); break;
        case HP_DTYPE_BF16: static_cast<uint16_t *>(data)[i] = f32_to_bf16(value); break;
    }
}

bool present(const hp_tensor &tensor) { return tensor.data != nullptr; }

// Dot product of row `row` of weight `w` [rows][n] with x[n].
template <typename Element, float (*convert)(Element)>
float row_dot(const void *w, int64_t row, int64_t n, const float *x) {
    const Element *values = static_cast<const Element *>(w) + row * n;
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) sum += convert(values[k]) * x[k];
    return sum;
}
float identity(float value) { return value; }

// y[out] = W[out][in] x[in] (+ b[out]), as torch.nn.functional.linear.
void linear(const hp_tensor &w, const hp_tensor &b, const float *x, float *y) {
    const int64_t n_out = w.shape[0], n_in = w.shape[1];
    for (int64_t row = 0; row < n_out; ++row) {
        float sum = 0.0f;
        switch (w.dtype) {
            case HP_DTYPE_F32: sum = row_dot<float, identity>(w.data, row, n_in, x); break;
            case HP_DTYPE_F16: sum = row_dot<uint16_t, f16_to_f32>(w.data, row, n_in, x); break;
            case HP_DTYPE_BF16: sum = row_dot<uint16_t, bf16_to_f32>(w.data, row, n_in, x); break;
        }
        y[row] = present(b) ? sum + load(b.dtype, b.data, row) : sum;
    }
}

// y = x / sqrt(mean(x^2) + eps) * weight, over n elements.
void rms_norm(const float *x, const hp_tensor &weight, float eps, int64_t n, float *y) {
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(sum_sq / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * load(weight.dtype, weight.data, i);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// Rotates one head in place: element i pairs with i + d_head/2 (transformers' rotate_half).
void apply_rope(float *head, int d_head, int position, const float *inv_freq) {
    const int half = d_head / 2;
    for (int i = 0; i < half; ++i) {
        const float angle = float(position) * inv_freq[i];
        const float cos_a = std::cos(angle), sin_a = std::sin(angle);
        const float first = head[i], second = head[i + half];
        head[i] = first * cos_a - second * sin_a;
        head[i + half] = second * cos_a + first * sin_a;
    }
}

// inv_freq[i] = theta^(-2i/d_head), with Llama 3's frequency-dependent scaling when configured.
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

struct ReferenceState {
    const hp_model *model;
    std::vector<float> inv_freq;  // [d_head / 2]
};

// Where position `position` of a sequence lives in one layer's cache: element offset of its row
// [n_head_kv][d_head].
int64_t kv_offset(const hp_model &model, const int32_t *block_table, int position) {
    const hp_kv_cache &kv = *model.kv;
    const int64_t row = int64_t(model.config.n_head_kv) * model.config.d_head;
    const int64_t block = block_table[position / kv.block_tokens];
    return (block * kv.block_tokens + position % kv.block_tokens) * row;
}

// Causal scaled-dot-product attention of one token's q [n_head][d_head] over positions
// [0, position] of its sequence, with GQA (query head h reads kv head h / (n_head / n_head_kv)).
void attention(const hp_model &model, int layer, const int32_t *block_table, int position, const float *q, float *out) {
    const hp_config &c = model.config;
    const hp_kv_cache &kv = *model.kv;
    const int group = c.n_head / c.n_head_kv;
    const float scale = 1.0f / std::sqrt(float(c.d_head));
    std::vector<float> scores(static_cast<size_t>(position) + 1);
    for (int h = 0; h < c.n_head; ++h) {
        const int kv_head = h / group;
        const float *q_head = q + int64_t(h) * c.d_head;
        float max_score = -INFINITY;
        for (int p = 0; p <= position; ++p) {
            const int64_t base = kv_offset(model, block_table, p) + int64_t(kv_head) * c.d_head;
            float dot = 0.0f;
            for (int i = 0; i < c.d_head; ++i) dot += q_head[i] * load(kv.dtype, kv.k[layer], base + i);
            scores[size_t(p)] = dot * scale;
            max_score = std::max(max_score, scores[size_t(p)]);
        }
        float total = 0.0f;
        for (int p = 0; p <= position; ++p) {
            scores[size_t(p)] = std::exp(scores[size_t(p)] - max_score);
            total += scores[size_t(p)];
        }
        float *out_head = out + int64_t(h) * c.d_head;
        std::fill(out_head, out_head + c.d_head, 0.0f);
        for (int p = 0; p <= position; ++p) {
            const float weight = scores[size_t(p)] / total;
            const int64_t base = kv_offset(model, block_table, p) + int64_t(kv_head) * c.d_head;
            for (int i = 0; i < c.d_head; ++i) out_head[i] += weight * load(kv.dtype, kv.v[layer], base + i);
        }
    }
}

// down(silu(gate(x)) * up(x)) (+ biases): the SiLU-gated MLP of every architecture here.
void gated_mlp(const hp_tensor &gate, const hp_tensor &up, const hp_tensor &down, const hp_tensor &b_gate,
               const hp_tensor &b_up, const hp_tensor &b_down, const float *x, float *y) {
    const int64_t width = gate.shape[0];
    std::vector<float> gate_out(static_cast<size_t>(width)), up_out(static_cast<size_t>(width));
    linear(gate, b_gate, x, gate_out.data());
    linear(up, b_up, x, up_out.data());
    for (int64_t i = 0; i < width; ++i) gate_out[size_t(i)] = silu(gate_out[size_t(i)]) * up_out[size_t(i)];
    linear(down, b_down, gate_out.data(), y);
}

// Routed experts: softmax over the router logits, top-k, optional renormalisation, weighted sum
// of the chosen experts; plus the sigmoid-gated shared expert when present.
void moe(const hp_model &model, int layer, const float *x, float *y, int32_t *expert_counts) {
    const hp_config &c = model.config;
    const hp_layer &w = model.layers[layer];
    const hp_tensor none{};
    std::vector<float> probs(static_cast<size_t>(c.n_expert));
    linear(w.router, none, x, probs.data());
    const float max_logit = *std::max_element(probs.begin(), probs.end());
    float total = 0.0f;
    for (float &p : probs) total += (p = std::exp(p - max_logit));
    for (float &p : probs) p /= total;

    // Top-k by probability; ties go to the lower expert index, as torch.topk does.
    std::vector<int> order(static_cast<size_t>(c.n_expert));
    for (int e = 0; e < c.n_expert; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[size_t(a)] > probs[size_t(b)]; });
    order.resize(size_t(c.n_expert_used));
    float chosen_total = 0.0f;
    for (int e : order) chosen_total += probs[size_t(e)];

    std::fill(y, y + c.d_model, 0.0f);
    std::vector<float> expert_out(static_cast<size_t>(c.d_model));
    for (int e : order) {
        const float weight = c.norm_topk_prob ? probs[size_t(e)] / chosen_total : probs[size_t(e)];
        gated_mlp(w.expert_gate[e], w.expert_up[e], w.expert_down[e], none, none, none, x, expert_out.data());
        for (int i = 0; i < c.d_model; ++i) y[i] += weight * expert_out[size_t(i)];
        if (expert_counts) expert_counts[int64_t(layer) * c.n_expert + e] += 1;
    }
    if (present(w.shared_gate)) {
        gated_mlp(w.shared_gate, w.shared_up, w.shared_down, none, none, none, x, expert_out.data());
        float gate_logit = 0.0f;
        linear(w.shared_expert_gate, none, x, &gate_logit);
        const float gate = 1.0f / (1.0f + std::exp(-gate_logit));
        for (int i = 0; i < c.d_model; ++i) y[i] += gate * expert_out[size_t(i)];
    }
}

// Rejects batches that would make the reference read or write out of bounds.
bool batch_is_valid(const hp_model &model, const hp_batch &batch) {
    const hp_config &c = model.config;
    if (batch.n_token < 0 || batch.n_seq < 0 || batch.n_logit_row < 0) return false;
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

int reference_create(const hp_model *model, const hp_services *services, void **state) {
    if (model->device != HP_DEVICE_CPU) return HP_ERR_UNSUPPORTED;
    auto *reference = new (std::nothrow) ReferenceState{model, rope_inv_freq(model->config)};
    if (!reference) return HP_ERR_OUT_OF_MEMORY;
    *state = reference;
    return HP_OK;
}

int reference_forward(void *state, const hp_batch *batch, hp_output *out) {
    const hp_model &model = *static_cast<ReferenceState *>(state)->model;
    const float *inv_freq = static_cast<ReferenceState *>(state)->inv_freq.data();
    const hp_config &c = model.config;
    if (!batch_is_valid(model, *batch)) return HP_ERR_INVALID;
    const int64_t d_model = c.d_model, q_width = int64_t(c.n_head) * c.d_head, kv_width = int64_t(c.n_head_kv) * c.d_head;
    const int n_token = batch->n_token;

    // Which sequence each token belongs to, and that sequence's block table.
    std::vector<const int32_t *> block_table(static_cast<size_t>(n_token));
    for (int s = 0; s < batch->n_seq; ++s) {
        for (int t = batch->seq_token_start[s]; t < batch->seq_token_start[s + 1]; ++t) {
            block_table[size_t(t)] = batch->block_tables + int64_t(s) * batch->max_blocks_per_seq;
        }
    }

    // x: the residual stream, [n_token][d_model].
    std::vector<float> x(static_cast<size_t>(n_token * d_model));
    for (int t = 0; t < n_token; ++t) {
        for (int64_t i = 0; i < d_model; ++i) {
            x[size_t(t * d_model + i)] = load(model.token_embd.dtype, model.token_embd.data, int64_t(batch->token_ids[t]) * d_model + i);
        }
    }
    std::vector<float> h(static_cast<size_t>(d_model)), q(static_cast<size_t>(n_token * q_width)), k(static_cast<size_t>(kv_width)), v(static_cast<size_t>(kv_width));
    std::vector<float> attn(static_cast<size_t>(q_width)), delta(static_cast<size_t>(d_model));
    for (int layer = 0; layer < c.n_layer; ++layer) {
        const hp_layer &w = model.layers[layer];
        // Projections and RoPE for every token; K and V go straight into the cache so that
        // later tokens of the same chunk can attend to them.
        for (int t = 0; t < n_token; ++t) {
            float *q_t = q.data() + int64_t(t) * q_width;
            rms_norm(x.data() + t * d_model, w.attn_norm, c.norm_eps, d_model, h.data());
            linear(w.wq, w.bq, h.data(), q_t);
            linear(w.wk, w.bk, h.data(), k.data());
            linear(w.wv, w.bv, h.data(), v.data());
            for (int head = 0; head < c.n_head; ++head) {
                float *q_head = q_t + int64_t(head) * c.d_head;
                if (c.has_qk_norm) rms_norm(q_head, w.q_norm, c.norm_eps, c.d_head, q_head);
                apply_rope(q_head, c.d_head, batch->positions[t], inv_freq);
            }
            for (int head = 0; head < c.n_head_kv; ++head) {
                float *k_head = k.data() + int64_t(head) * c.d_head;
                if (c.has_qk_norm) rms_norm(k_head, w.k_norm, c.norm_eps, c.d_head, k_head);
                apply_rope(k_head, c.d_head, batch->positions[t], inv_freq);
            }
            const int64_t offset = kv_offset(model, block_table[size_t(t)], batch->positions[t]);
            for (int64_t i = 0; i < kv_width; ++i) {
                store(model.kv->dtype, model.kv->k[layer], offset + i, k[size_t(i)]);
                store(model.kv->dtype, model.kv->v[layer], offset + i, v[size_t(i)]);
            }
        }
        for (int t = 0; t < n_token; ++t) {
            float *x_t = x.data() + t * d_model;
            attention(model, layer, block_table[size_t(t)], batch->positions[t], q.data() + int64_t(t) * q_width, attn.data());
            linear(w.wo, w.bo, attn.data(), delta.data());
            for (int64_t i = 0; i < d_model; ++i) x_t[i] += delta[size_t(i)];

            rms_norm(x_t, w.ffn_norm, c.norm_eps, d_model, h.data());
            if (w.is_moe) moe(model, layer, h.data(), delta.data(), out->expert_counts);
            else gated_mlp(w.w_gate, w.w_up, w.w_down, w.b_gate, w.b_up, w.b_down, h.data(), delta.data());
            for (int64_t i = 0; i < d_model; ++i) x_t[i] += delta[size_t(i)];
        }
    }
    const hp_tensor none{};
    for (int r = 0; r < batch->n_logit_row; ++r) {
        rms_norm(x.data() + int64_t(batch->logit_rows[r]) * d_model, model.output_norm, c.norm_eps, d_model, h.data());
        linear(model.lm_head, none, h.data(), out->logits + int64_t(r) * c.n_vocab);
    }
    return HP_OK;
}

void reference_destroy(void *state) { delete static_cast<ReferenceState *>(state); }

const hp_forward_vtable kVtable = {HP_FORWARD_ABI_VERSION, "cpu-reference", reference_create, reference_forward,
                                   reference_destroy};

}  // namespace

// A file that includes this one to wrap the reference (the adversarial test candidates do)
// defines HP_REFERENCE_NO_ENTRY and exports its own entry.
#ifndef HP_REFERENCE_NO_ENTRY
extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &kVtable; }
#endif
