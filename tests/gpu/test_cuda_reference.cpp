// The CUDA reference forward pass (the GPU specification): against Hugging Face transformers' own
// float32 logits and greedy continuations for every shared checkpoint (max|Δ| <= 1e-3 max|ref|,
// identical tokens), and against the CPU reference on mixed random batches for every tiny preset
// (max|Δ| <= 1e-3 max|ref| per step, identical MoE expert counts).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "checkpoints.h"
#include "gpu_rig.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/engine/generate.h"
#include "scenario.h"

namespace hp {
namespace {

class CudaReferenceVsHf : public testing::TestWithParam<std::string> {};

TEST_P(CudaReferenceVsHf, LogitsAndGreedyTokensMatchTransformers) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const std::filesystem::path dir = gpu_test::checkpoint_dir(GetParam());
    if (!std::filesystem::exists(dir / "hf_reference.json")) GTEST_SKIP() << "no checkpoint at " << dir;
    auto model = model::load_model(dir);
    ASSERT_TRUE(model.ok()) << model.error();
    auto reference = nlohmann::json::parse(*read_text_file(dir / "hf_reference.json"));
    engine::EngineOptions options;
    options.device = backend::DeviceKind::cuda;
    options.forward = "reference";  // the engine's default is the baseline
    auto engine = engine::Engine::create(*model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    const int n_vocab = model->config.n_vocab;
    for (const auto &prompt : reference["prompts"]) {
        const std::vector<int32_t> tokens = prompt["tokens"];
        engine::GenerateOptions generate;
        generate.n_new = 16;
        generate.prompt_logits = true;
        auto result = engine::generate_greedy(**engine, {tokens}, generate);
        ASSERT_TRUE(result.ok()) << result.error();
        std::vector<float> expected;
        for (size_t position = 0; position < tokens.size(); ++position) {
            const std::vector<float> row = prompt["logits"][position];
            ASSERT_EQ(row.size(), size_t(n_vocab));
            expected.insert(expected.end(), row.begin(), row.end());
        }
        const auto d = gpu_test::compare(result->prompt_logits[0], expected);
        EXPECT_LE(d.max_delta, 1e-3 * d.max_ref) << GetParam() << " prompt of " << tokens.size() << " tokens";
        EXPECT_EQ(result->generated[0], prompt["greedy"].get<std::vector<int32_t>>()) << GetParam();
        std::printf("%s: %zu-token prompt max|delta| %.3g (max|ref| %.3g)\n", GetParam().c_str(), tokens.size(), d.max_delta, d.max_ref);
    }
}

INSTANTIATE_TEST_SUITE_P(SharedCheckpoints, CudaReferenceVsHf, testing::Values("llama_gqa", "mixtral", "qwen3_moe"));

struct PresetCase {
    std::string preset;
    DType kv_dtype;
};

std::string case_name(const testing::TestParamInfo<PresetCase> &info) {
    std::string name = info.param.preset + "_kv_" + std::string(dtype_name(info.param.kv_dtype));
    for (char &ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name;
}

class CudaReferenceVsCpu : public testing::TestWithParam<PresetCase> {};

TEST_P(CudaReferenceVsCpu, MixedRandomBatchesMatch) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    model::SyntheticOptions synthetic;
    synthetic.seed = 11;
    synthetic.bias_std = 0.05f;
    synthetic.norm_std = 0.1f;
    auto model = model::open_model("preset:" + GetParam().preset, synthetic);
    ASSERT_TRUE(model.ok()) << model.error();
    engine::EngineOptions options;
    options.forward = "reference";  // the engine's default is the baseline
    options.kv.dtype = GetParam().kv_dtype;
    options.kv.block_tokens = 8;
    options.kv.max_tokens = 512;
    auto cpu = engine::Engine::create(*model, options);
    options.device = backend::DeviceKind::cuda;
    auto gpu = engine::Engine::create(*model, options);
    ASSERT_TRUE(cpu.ok()) << cpu.error();
    ASSERT_TRUE(gpu.ok()) << gpu.error();
    const auto expected = gpu_test::run_scenario(**cpu, 5);
    const auto actual = gpu_test::run_scenario(**gpu, 5);
    ASSERT_EQ(expected.error, "");
    ASSERT_EQ(actual.error, "");
    ASSERT_EQ(actual.logits.size(), expected.logits.size());
    for (size_t step = 0; step < expected.logits.size(); ++step) {
        const auto d = gpu_test::compare(actual.logits[step], expected.logits[step]);
        EXPECT_LE(d.max_delta, 1e-3 * d.max_ref) << GetParam().preset << " step " << step;
        std::printf("%s step %zu: max|delta| %.3g (max|ref| %.3g)\n", GetParam().preset.c_str(), step, d.max_delta, d.max_ref);
    }
    EXPECT_EQ(actual.expert_counts, expected.expert_counts);
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, CudaReferenceVsCpu,
                         testing::Values(PresetCase{"tiny-llama", DType::f32}, PresetCase{"tiny-llama3", DType::f32},
                                         PresetCase{"tiny-qwen2", DType::f32}, PresetCase{"tiny-qwen3", DType::f32},
                                         PresetCase{"tiny-moe", DType::f32}, PresetCase{"tiny-qwen2-moe", DType::f32},
                                         PresetCase{"tiny-mixtral", DType::f32}, PresetCase{"tiny-llama", DType::bf16},
                                         PresetCase{"tiny-qwen3", DType::f16}),
                         case_name);

}  // namespace
}  // namespace hp
