// The CPU baseline on the Hugging Face reference checkpoints in ../shared/models/hf: per prompt,
// logits at every position within 1e-3 * max|HF logits| of transformers' own float32 logits, and
// the same 16 greedy tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "hotpass/engine/engine.h"
#include "hotpass/engine/generate.h"
#include "hotpass/model/model.h"

namespace hp::test {
namespace {

class CpuBaselineHf : public testing::TestWithParam<std::string> {
protected:
    static void SetUpTestSuite() { setenv("HOTPASS_PLUGIN_DIR", HOTPASS_PLUGIN_DIR, 1); }
};

TEST_P(CpuBaselineHf, MatchesTransformers) {
    const std::filesystem::path dir = std::filesystem::path(HOTPASS_SHARED_DIR) / "models/hf" / GetParam();
    if (!std::filesystem::exists(dir / "hf_reference.json")) GTEST_SKIP() << dir << " is missing";
    auto model = model::load_model(dir);
    ASSERT_TRUE(model.ok()) << model.error();
    std::ifstream file(dir / "hf_reference.json");
    const nlohmann::json reference = nlohmann::json::parse(file);
    const int n_vocab = model->config.n_vocab;
    for (int n_thread : {1, 2}) {
        engine::EngineOptions options;
        options.forward = "baseline";
        options.n_thread = n_thread;
        options.kv.block_tokens = 16;
        auto engine = engine::Engine::create(*model, options);
        ASSERT_TRUE(engine.ok()) << engine.error();
        for (const auto &prompt : reference["prompts"]) {
            const std::vector<int32_t> tokens = prompt["tokens"].get<std::vector<int32_t>>();
            const auto hf_logits = prompt["logits"].get<std::vector<std::vector<float>>>();
            engine::GenerateOptions generate;
            generate.n_new = 16;
            generate.prompt_logits = true;
            generate.stop_at_eos = false;
            auto result = engine::generate_greedy(**engine, {tokens}, generate);
            ASSERT_TRUE(result.ok()) << result.error();
            const std::vector<float> &logits = result->prompt_logits[0];
            ASSERT_EQ(logits.size(), tokens.size() * size_t(n_vocab));
            float max_ref = 0, max_diff = 0;
            for (size_t p = 0; p < tokens.size(); ++p) {
                for (int v = 0; v < n_vocab; ++v) {
                    max_ref = std::max(max_ref, std::fabs(hf_logits[p][size_t(v)]));
                    max_diff = std::max(max_diff, std::fabs(hf_logits[p][size_t(v)] - logits[p * size_t(n_vocab) + size_t(v)]));
                }
            }
            EXPECT_LE(max_diff, 1e-3f * max_ref) << GetParam() << ", prompt of " << tokens.size() << " tokens, " << n_thread << " threads";
            EXPECT_EQ(result->generated[0], prompt["greedy"].get<std::vector<int32_t>>())
                << GetParam() << ", prompt of " << tokens.size() << " tokens, " << n_thread << " threads";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CpuBaselineHf, testing::Values("llama_gqa", "mixtral", "qwen3_moe"));

}  // namespace
}  // namespace hp::test
