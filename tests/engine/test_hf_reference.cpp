// The CPU reference, loaded through the plugin ABI, against Hugging Face transformers' own
// float32 logits and greedy continuations (../shared/models/hf/*/hf_reference.json).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "hotpass/core/mapped_file.h"
#include "hotpass/engine/generate.h"

namespace hp::engine {
namespace {

class HfReference : public testing::TestWithParam<std::string> {};

TEST_P(HfReference, LogitsAndGreedyTokensMatchTransformers) {
    const std::filesystem::path dir = std::filesystem::path(HOTPASS_SHARED_DIR "/models/hf") / GetParam();
    auto model = model::load_model(dir);
    ASSERT_TRUE(model.ok()) << model.error();
    auto reference = nlohmann::json::parse(*read_text_file(dir / "hf_reference.json"));
    EngineOptions options;
    options.forward = "reference";  // these tests are about the reference
    auto engine = Engine::create(*model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    const int n_vocab = model->config.n_vocab;
    ASSERT_EQ(reference["prompts"].size(), 3u);
    for (const auto &prompt : reference["prompts"]) {
        const std::vector<int32_t> tokens = prompt["tokens"];
        GenerateOptions generate;
        generate.n_new = 16;
        generate.prompt_logits = true;
        auto result = generate_greedy(**engine, {tokens}, generate);
        ASSERT_TRUE(result.ok()) << result.error();
        double max_ref = 0, max_delta = 0;
        for (size_t position = 0; position < tokens.size(); ++position) {
            const std::vector<float> expected = prompt["logits"][position];
            ASSERT_EQ(expected.size(), size_t(n_vocab));
            for (int v = 0; v < n_vocab; ++v) {
                max_ref = std::max(max_ref, double(std::fabs(expected[size_t(v)])));
                max_delta = std::max(max_delta, double(std::fabs(expected[size_t(v)] - result->prompt_logits[0][position * size_t(n_vocab) + size_t(v)])));
            }
        }
        EXPECT_LE(max_delta, 1e-3 * max_ref) << GetParam() << " prompt of " << tokens.size() << " tokens";
        EXPECT_EQ(result->generated[0], prompt["greedy"].get<std::vector<int32_t>>()) << GetParam();
    }
}

INSTANTIATE_TEST_SUITE_P(SharedCheckpoints, HfReference, testing::Values("llama_gqa", "mixtral", "qwen3_moe"));

}  // namespace
}  // namespace hp::engine
