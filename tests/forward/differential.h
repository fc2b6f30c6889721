// Runs the same schedule of engine steps through two forward-pass plugins loaded over the ABI and
// compares what they produce: the logits of every step, the KV-cache contents and the MoE expert
// counts. The schedule mixes prefill chunks (lengths not multiples of any block), decode tokens of
// several sequences, chunked-prefill continuations and recycled (fragmented) KV blocks. Token ids
// are fresh random numbers from `seed`; the next decode token is the reference's argmax.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hotpass/engine/engine.h"
#include "hotpass/engine/generate.h"
#include "hotpass/model/model.h"

namespace hp::test {

struct DiffOptions {
    DType kv_dtype = DType::f32;
    int block_tokens = 16;
    int n_thread = 2;
    uint64_t seed = 1;
    float tolerance = 1e-3f;  // max |a - b| <= tolerance * max |reference|, per step
};

// Logit tolerance relative to max |reference logit|. A reduced-precision KV cache stores the two
// passes' (slightly different) K/V rows with occasional one-step rounding flips, which attention
// amplifies: allow about 4 bf16 steps (2^-8) or 6 f16 steps (2^-11) of the largest logit.
inline float kv_tolerance(DType kv_dtype) {
    return kv_dtype == DType::bf16 ? 1.5e-2f : kv_dtype == DType::f16 ? 3e-3f : 1e-3f;
}

// Fresh random seed for each run, overridable with HOTPASS_TEST_SEED to reproduce a failure.
inline uint64_t fresh_seed() {
    if (const char *text = std::getenv("HOTPASS_TEST_SEED")) return std::strtoull(text, nullptr, 10);
    return std::random_device{}();
}

struct Difference {
    float max_abs = 0;
    float max_ref = 0;
};

inline Difference compare(const std::vector<float> &ref, const std::vector<float> &got) {
    Difference d;
    for (size_t i = 0; i < ref.size(); ++i) {
        d.max_ref = std::max(d.max_ref, std::fabs(ref[i]));
        const float diff = std::fabs(ref[i] - got[i]);
        d.max_abs = std::isnan(diff) ? INFINITY : std::max(d.max_abs, diff);
    }
    return d;
}

inline float kv_value(const hp_kv_cache &kv, const void *data, int64_t i) {
    switch (kv.dtype) {
        case HP_DTYPE_F32: return static_cast<const float *>(data)[i];
        case HP_DTYPE_F16: return f16_to_f32(static_cast<const uint16_t *>(data)[i]);
        case HP_DTYPE_BF16: return bf16_to_f32(static_cast<const uint16_t *>(data)[i]);
    }
    return NAN;
}

inline std::unique_ptr<engine::Engine> make_engine(const model::Model &model, const std::string &forward, const DiffOptions &options) {
    engine::EngineOptions engine_options;
    engine_options.forward = forward;
    engine_options.n_thread = options.n_thread;
    engine_options.kv.dtype = options.kv_dtype;
    engine_options.kv.block_tokens = options.block_tokens;
    engine_options.kv.max_tokens = 2048;
    auto engine = engine::Engine::create(model, engine_options);
    EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error());
    return engine.ok() ? std::move(engine).value() : nullptr;
}

// Runs the schedule on `reference` and `candidate` (same model, fresh engines) and checks them.
// MoE routing is a discrete choice: where two router probabilities are nearly tied, float32
// rounding differences may pick another expert, after which the two passes legitimately differ.
// Steps are compared up to such a divergence (detected from the expert counts); the schedule then
// stops and returns false so the caller can retry with other tokens.
inline bool run_schedule(const model::Model &model, const std::string &reference, const std::string &candidate,
                         const DiffOptions &options) {
    SCOPED_TRACE("seed " + std::to_string(options.seed) + " (set HOTPASS_TEST_SEED to reproduce)");
    auto ref = make_engine(model, reference, options);
    auto got = make_engine(model, candidate, options);
    if (!ref || !got) {
        ADD_FAILURE() << "no engine";
        return true;
    }
    bool diverged = false;
    std::mt19937_64 rng(options.seed);
    const int n_vocab = model.config.n_vocab;
    auto random_tokens = [&](int n) {
        std::vector<int32_t> tokens(static_cast<size_t>(n));
        for (auto &token : tokens) token = int32_t(rng() % uint64_t(n_vocab));
        return tokens;
    };
    auto length = [&](int lo, int hi) { return lo + int(rng() % uint64_t(hi - lo + 1)); };

    struct Seq {
        int ref_id, got_id;
        int32_t next;  // the reference's greedy token, fed next
    };
    std::vector<Seq> seqs;
    struct Input {
        size_t seq;
        std::vector<int32_t> tokens;
        bool all_logits;
    };
    int step_index = 0;
    // One step: inputs[i] = (sequence index, tokens, all_logits).
    auto step = [&](const std::vector<Input> &inputs) {
        if (diverged) return;
        std::vector<engine::StepInput> ref_in, got_in;
        for (const Input &input : inputs) {
            ref_in.push_back({seqs[input.seq].ref_id, input.tokens, input.all_logits});
            got_in.push_back({seqs[input.seq].got_id, input.tokens, input.all_logits});
        }
        auto ref_logits = ref->step(ref_in);
        auto got_logits = got->step(got_in);
        ASSERT_TRUE(ref_logits.ok()) << ref_logits.error();
        ASSERT_TRUE(got_logits.ok()) << got_logits.error();
        ASSERT_EQ(ref_logits->size(), got_logits->size());
        if (ref->expert_counts() != got->expert_counts()) {
            diverged = true;
            return;
        }
        const Difference d = compare(*ref_logits, *got_logits);
        EXPECT_LE(d.max_abs, options.tolerance * d.max_ref)
            << "step " << step_index << ": logits differ by " << d.max_abs << " (max |ref| " << d.max_ref << ")";
        size_t row = 0;
        for (const Input &input : inputs) {
            row += input.all_logits ? input.tokens.size() : 1;
            seqs[input.seq].next = engine::argmax(ref_logits->data() + (row - 1) * size_t(n_vocab), n_vocab);
        }
        ++step_index;
    };
    auto add = [&] {
        seqs.push_back({ref->add_sequence(), got->add_sequence(), 0});
        return seqs.size() - 1;
    };
    auto decode = [&](size_t s) { return Input{s, {seqs[s].next}, false}; };

    // 1. two prompts prefilled together, logits for every position (over 64 tokens: the GEMM path)
    const size_t a = add(), b = add();
    step({{a, random_tokens(length(66, 90)), true}, {b, random_tokens(length(1, 9)), true}});
    // 2. decode a and b; then four more short prompts join and all six decode (token tiles > 4)
    for (int i = 0; i < 2; ++i) step({decode(a), decode(b)});
    std::vector<Input> joining;
    for (int i = 0; i < 4; ++i) joining.push_back({add(), random_tokens(length(1, 6)), i % 2 == 0});
    step(joining);
    for (int i = 0; i < 3; ++i) {
        std::vector<Input> all;
        for (size_t s = 0; s < seqs.size(); ++s) all.push_back(decode(s));
        step(all);
    }
    // 3. mixed: decodes beside a new prefill chunk
    const size_t c = add();
    step({decode(a), {c, random_tokens(length(11, 30)), true}, decode(b)});
    // 4. free b's blocks; a new prompt reuses them (non-contiguous block tables)
    ref->remove_sequence(seqs[b].ref_id);
    got->remove_sequence(seqs[b].got_id);
    const size_t e = add();
    step({{e, random_tokens(length(20, 45)), true}, decode(a), decode(c)});
    // 5. chunked prefill continuing a, then a last decode of everyone left
    step({{a, random_tokens(length(5, 23)), true}});
    std::vector<Input> last;
    for (size_t s = 0; s < seqs.size(); ++s) {
        if (s != b) last.push_back(decode(s));
    }
    step(last);

    if (diverged) return false;
    // The KV caches hold the same rows (the engines allocate blocks identically).
    const hp_kv_cache &ref_kv = ref->kv_cache().view(), &got_kv = got->kv_cache().view();
    const int64_t n_kv = int64_t(ref_kv.n_block) * ref_kv.block_tokens * model.config.n_head_kv * model.config.d_head;
    for (int layer = 0; layer < ref->abi_model().config.n_layer; ++layer) {
        // A stored element may land one rounding step of the KV dtype away from the reference's.
        const float step = ref_kv.dtype == HP_DTYPE_BF16 ? 1.0f / 128 : ref_kv.dtype == HP_DTYPE_F16 ? 1.0f / 1024 : 0.0f;
        float max_ref = 0;
        for (int64_t i = 0; i < n_kv; ++i) max_ref = std::max({max_ref, std::fabs(kv_value(ref_kv, ref_kv.k[layer], i)), std::fabs(kv_value(ref_kv, ref_kv.v[layer], i))});
        int64_t n_bad = 0;
        float worst = 0;
        for (int64_t i = 0; i < n_kv; ++i) {
            for (auto [r, g] : {std::pair{ref_kv.k[layer], got_kv.k[layer]}, std::pair{ref_kv.v[layer], got_kv.v[layer]}}) {
                const float x = kv_value(ref_kv, r, i), y = kv_value(got_kv, g, i);
                const float diff = std::isnan(y) ? INFINITY : std::fabs(x - y);
                if (diff > options.tolerance * max_ref + step * std::fabs(x)) ++n_bad, worst = std::max(worst, diff);
            }
        }
        EXPECT_EQ(n_bad, 0) << "KV cache of layer " << layer << ": " << n_bad << " elements differ, worst by " << worst;
    }
    return true;
}

// `preset`'s model with widths that are multiples of no vector or block size (d_model 200, heads
// of 38, d_ff 333, experts 77 wide, vocab 517): every matmul's k loop ends in a tail, row ranges end
// mid-tile and GEMM panels are partial. (The presets' widths are all multiples of 32.)
inline Result<model::Model> odd_shape_model(const std::string &preset, DType weights, uint64_t seed) {
    auto config = model::preset_config(preset);
    if (!config.ok()) return Error{config.error()};
    config->d_model = 200;
    config->n_head = 4;
    config->n_head_kv = 2;
    config->d_head = 38;
    config->d_ff = 333;
    if (config->n_expert > 0) config->d_ff_expert = 77;
    config->n_vocab = 517;
    config->dtype = weights;
    model::SyntheticOptions synthetic;
    synthetic.seed = seed;
    synthetic.dtype = weights;
    synthetic.bias_std = 0.05f;
    synthetic.norm_std = 0.2f;
    model::Model model;
    model.config = *config;
    model.source = "test:odd-shapes:" + preset;
    for (model::TensorSpec &spec : model::expected_tensors(model.config)) {
        uint64_t n_byte = dtype_size(weights);
        for (int64_t extent : spec.shape) n_byte *= uint64_t(extent);
        void *memory = std::aligned_alloc(64, (n_byte + 63) / 64 * 64);
        if (!memory) return Error{"out of memory"};
        model::synthesize_tensor(spec, model.config, synthetic, memory);
        model.tensors.push_back(model::TensorView{spec, weights, memory, n_byte});
        model.storage.push_back(std::shared_ptr<const void>(memory, [](const void *ptr) { std::free(const_cast<void *>(ptr)); }));
    }
    return model;
}

// The schedule on fresh tokens; MoE schedules whose routing diverged at a near-tie are rerun with
// other tokens (a real routing bug diverges every time).
inline void run_differential(const model::Model &model, const std::string &reference, const std::string &candidate,
                             DiffOptions options) {
    for (int attempt = 0; attempt < 4; ++attempt, options.seed = options.seed * 6364136223846793005ull + 1) {
        if (run_schedule(model, reference, candidate, options)) return;
        std::fprintf(stderr, "note: MoE routing diverged (near-tie) with seed %llu; retrying\n", (unsigned long long)options.seed);
    }
    ADD_FAILURE() << "MoE routing diverged from the reference on 4 token schedules in a row";
}

}  // namespace hp::test
