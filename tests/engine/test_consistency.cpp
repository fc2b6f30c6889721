// Self-consistency of the engine path and the reference plugin: the same tokens give the same
// logits however they are split into steps, batched with other sequences, or laid out in KV blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "hotpass/engine/generate.h"

namespace hp::engine {
namespace {

double max_abs_delta(const std::vector<float> &a, const std::vector<float> &b) {
    EXPECT_EQ(a.size(), b.size());
    double delta = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) delta = std::max(delta, double(std::fabs(a[i] - b[i])));
    return delta;
}

double max_abs(const std::vector<float> &a) {
    double m = 0;
    for (float x : a) m = std::max(m, double(std::fabs(x)));
    return m;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto &token : tokens) token = int32_t(rng() % uint32_t(n_vocab));
    return tokens;
}

model::Model preset(const char *name) {
    model::SyntheticOptions options;
    options.seed = 11;
    options.bias_std = 0.05f;
    options.norm_std = 0.1f;
    auto model = model::open_model(std::string("preset:") + name, options);
    HP_CHECK(model.ok(), "{}", model.error());
    return std::move(model).value();
}

// Logits of every position of `tokens`, fed in steps of `chunk` tokens.
std::vector<float> chunked_logits(Engine &engine, const std::vector<int32_t> &tokens, int chunk) {
    const int seq = engine.add_sequence();
    std::vector<float> all;
    for (size_t start = 0; start < tokens.size(); start += size_t(chunk)) {
        const size_t n = std::min(tokens.size() - start, size_t(chunk));
        auto logits = engine.step({StepInput{seq, std::span(tokens).subspan(start, n), true}});
        HP_CHECK(logits.ok(), "{}", logits.error());
        all.insert(all.end(), logits->begin(), logits->end());
    }
    engine.remove_sequence(seq);
    return all;
}

class Consistency : public testing::TestWithParam<const char *> {};

TEST_P(Consistency, PrefillEqualsTokenByTokenAcrossBlockSizes) {
    const model::Model model = preset(GetParam());
    const auto tokens = random_tokens(37, model.config.n_vocab, 5);
    EngineOptions options;
    options.forward = "reference";  // these tests are about the reference
    options.kv.block_tokens = 16;
    auto engine = Engine::create(model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    const std::vector<float> whole = chunked_logits(**engine, tokens, int(tokens.size()));
    const double tolerance = 1e-4 * max_abs(whole);
    EXPECT_LE(max_abs_delta(whole, chunked_logits(**engine, tokens, 1)), tolerance);
    EXPECT_LE(max_abs_delta(whole, chunked_logits(**engine, tokens, 5)), tolerance);

    for (int block_tokens : {1, 3, 7, 64}) {  // block boundaries crossed mid-prompt and mid-chunk
        options.kv.block_tokens = block_tokens;
        auto other = Engine::create(model, options);
        ASSERT_TRUE(other.ok()) << other.error();
        EXPECT_LE(max_abs_delta(whole, chunked_logits(**other, tokens, 6)), tolerance) << "block_tokens " << block_tokens;
    }
}

TEST_P(Consistency, BatchedEqualsOneSequenceAtATime) {
    const model::Model model = preset(GetParam());
    const int n_vocab = model.config.n_vocab;
    EngineOptions options;
    options.forward = "reference";  // these tests are about the reference
    options.kv.block_tokens = 8;
    auto engine = Engine::create(model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    std::vector<std::vector<int32_t>> prompts;
    for (int p = 0; p < 4; ++p) prompts.push_back(random_tokens(3 + 7 * p, n_vocab, 100 + uint32_t(p)));

    GenerateOptions generate;
    generate.n_new = 6;
    generate.prompt_logits = true;
    generate.stop_at_eos = false;
    generate.prefill_chunk = 9;  // mixes prefill chunks of different sequences in one step
    auto batched = generate_greedy(**engine, prompts, generate);
    ASSERT_TRUE(batched.ok()) << batched.error();
    for (size_t p = 0; p < prompts.size(); ++p) {
        generate.prefill_chunk = 0;
        auto alone = generate_greedy(**engine, {prompts[p]}, generate);
        ASSERT_TRUE(alone.ok()) << alone.error();
        EXPECT_LE(max_abs_delta(batched->prompt_logits[p], alone->prompt_logits[0]), 1e-4 * max_abs(alone->prompt_logits[0]));
        EXPECT_EQ(batched->generated[p], alone->generated[0]) << "prompt " << p;
    }
    // Every block went back to the free list.
    EXPECT_EQ((*engine)->kv_cache().n_free_block(), (*engine)->kv_cache().n_block());
}

TEST_P(Consistency, LowPrecisionKvCacheStaysClose) {
    const model::Model model = preset(GetParam());
    const auto tokens = random_tokens(20, model.config.n_vocab, 9);
    EngineOptions options;
    options.forward = "reference";  // these tests are about the reference
    auto f32 = Engine::create(model, options);
    options.kv.dtype = DType::bf16;
    auto bf16 = Engine::create(model, options);
    options.kv.dtype = DType::f16;
    auto f16 = Engine::create(model, options);
    ASSERT_TRUE(f32.ok() && bf16.ok() && f16.ok());
    const auto exact = chunked_logits(**f32, tokens, 4);
    const auto a = chunked_logits(**bf16, tokens, 4);
    const auto b = chunked_logits(**f16, tokens, 4);
    EXPECT_LE(max_abs_delta(exact, a), 3e-2 * max_abs(exact));
    EXPECT_LE(max_abs_delta(exact, b), 5e-3 * max_abs(exact));
    EXPECT_GT(max_abs_delta(exact, a), 0.0);  // the cache really is bf16
}

INSTANTIATE_TEST_SUITE_P(Presets, Consistency,
                         testing::Values("tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-moe",
                                         "tiny-qwen2-moe", "tiny-mixtral"));

TEST(Engine, ExpertCountsAddUpAndServedLayersAreBounded) {
    const model::Model model = preset("tiny-moe");
    EngineOptions options;
    options.forward = "reference";  // these tests are about the reference
    options.n_layer = 2;
    auto engine = Engine::create(model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    EXPECT_EQ((*engine)->abi_model().config.n_layer, 2);
    EXPECT_EQ((*engine)->abi_model().config.n_layer_model, 4);
    const auto tokens = random_tokens(10, model.config.n_vocab, 1);
    chunked_logits(**engine, tokens, 10);
    const auto &counts = (*engine)->expert_counts();
    ASSERT_EQ(counts.size(), size_t(2 * 8));
    for (int layer = 0; layer < 2; ++layer) {
        int total = 0;
        for (int e = 0; e < 8; ++e) total += counts[size_t(layer * 8 + e)];
        EXPECT_EQ(total, 10 * 2) << "layer " << layer;  // 10 tokens x top-2
    }
}

TEST(Engine, FullCacheFailsCleanlyAndBadTokensAreRejected) {
    const model::Model model = preset("tiny-llama");
    EngineOptions options;
    options.forward = "reference";  // these tests are about the reference
    options.kv.block_tokens = 4;
    options.kv.n_block = 2;
    auto engine = Engine::create(model, options);
    ASSERT_TRUE(engine.ok());
    const int seq = (*engine)->add_sequence();
    const auto tokens = random_tokens(9, model.config.n_vocab, 2);
    auto full = (*engine)->step({StepInput{seq, tokens, false}});
    ASSERT_FALSE(full.ok());
    EXPECT_NE(full.error().find("KV cache full"), std::string::npos);
    EXPECT_EQ((*engine)->sequence_length(seq), 0);
    EXPECT_EQ((*engine)->kv_cache().n_free_block(), 2);
    const std::vector<int32_t> bad = {1, model.config.n_vocab};
    auto rejected = (*engine)->step({StepInput{seq, bad, false}});
    ASSERT_FALSE(rejected.ok());
    EXPECT_NE(rejected.error().find("outside the vocabulary"), std::string::npos);
    auto fine = (*engine)->step({StepInput{seq, std::span(tokens).first(8), false}});
    EXPECT_TRUE(fine.ok());
}

}  // namespace
}  // namespace hp::engine
