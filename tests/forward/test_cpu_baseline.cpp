// The CPU baseline against the CPU reference, both loaded through the plugin ABI, on fresh random
// tokens: every architecture preset (biases and norms randomised), every KV dtype, several KV
// block sizes and thread counts, bf16/f16/f32 weights. See differential.h for the schedule.
#include <gtest/gtest.h>

#include <cstdlib>

#include "differential.h"

namespace hp::test {
namespace {

struct BaselineCase {
    std::string preset;
    DType weights;
    DType kv;
    int block_tokens;
    int n_thread;
};

std::string case_name(const testing::TestParamInfo<BaselineCase> &info) {
    std::string name = info.param.preset + "_w" + std::string(dtype_name(info.param.weights)) + "_kv" +
                       std::string(dtype_name(info.param.kv)) + "_block" + std::to_string(info.param.block_tokens) + "_t" +
                       std::to_string(info.param.n_thread);
    for (char &ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name;
}

class CpuBaselineDifferential : public testing::TestWithParam<BaselineCase> {
protected:
    static void SetUpTestSuite() { setenv("HOTPASS_PLUGIN_DIR", HOTPASS_PLUGIN_DIR, 1); }
};

TEST_P(CpuBaselineDifferential, MatchesReference) {
    const BaselineCase &param = GetParam();
    model::SyntheticOptions synthetic;
    synthetic.seed = fresh_seed();
    synthetic.dtype = param.weights;
    synthetic.bias_std = 0.05f;
    synthetic.norm_std = 0.2f;
    auto model = model::open_model("preset:" + param.preset, synthetic);
    ASSERT_TRUE(model.ok()) << model.error();
    DiffOptions options;
    options.kv_dtype = param.kv;
    options.block_tokens = param.block_tokens;
    options.n_thread = param.n_thread;
    options.seed = synthetic.seed;
    options.tolerance = kv_tolerance(param.kv);
    run_differential(*model, "reference", "baseline", options);
}

std::vector<BaselineCase> all_cases() {
    std::vector<BaselineCase> cases;
    for (const char *preset : {"tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-moe", "tiny-qwen2-moe", "tiny-mixtral"}) {
        cases.push_back({preset, DType::bf16, DType::f32, 16, 2});
        cases.push_back({preset, DType::bf16, DType::bf16, 7, 1});
        cases.push_back({preset, DType::bf16, DType::f16, 1, 3});
    }
    for (DType weights : {DType::f16, DType::f32}) {
        cases.push_back({"tiny-llama", weights, DType::f32, 5, 2});
        cases.push_back({"tiny-moe", weights, DType::bf16, 16, 2});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Presets, CpuBaselineDifferential, testing::ValuesIn(all_cases()), case_name);

// Widths that are multiples of no vector or block size: every matmul's k loop ends in a tail, row
// ranges end mid-tile and GEMM panels are partial; 1 to 3 threads, bf16/f16/f32 weights.
TEST(CpuBaselineOddShapes, MatchesReference) {
    setenv("HOTPASS_PLUGIN_DIR", HOTPASS_PLUGIN_DIR, 1);
    for (const char *preset : {"tiny-llama", "tiny-moe"}) {
        for (DType weights : {DType::bf16, DType::f16, DType::f32}) {
            const uint64_t seed = fresh_seed();
            auto model = odd_shape_model(preset, weights, seed);
            ASSERT_TRUE(model.ok()) << model.error();
            for (int n_thread : {1, 3}) {
                SCOPED_TRACE(std::string(preset) + " weights " + std::string(dtype_name(weights)) + " threads " + std::to_string(n_thread));
                DiffOptions options;
                options.kv_dtype = DType::f32;
                options.block_tokens = 5;
                options.n_thread = n_thread;
                options.seed = seed;
                options.tolerance = kv_tolerance(options.kv_dtype);
                run_differential(*model, "reference", "baseline", options);
            }
        }
    }
}

}  // namespace
}  // namespace hp::test
