// Preset weights generated on the GPU (engine placement + the backend's fill kernel) are the same
// bits as model::synthesize_tensor's on the host, for every tiny preset, the first layer of
// llama-3.2-1b and every weight dtype.
#include <gtest/gtest.h>

#include <cstring>

#include "hotpass/backend/backend.h"
#include "hotpass/engine/engine.h"

namespace hp {
namespace {

struct Case {
    std::string preset;
    DType dtype;
    int n_layer;
};

class SyntheticOnDevice : public testing::TestWithParam<Case> {};

TEST_P(SyntheticOnDevice, MatchesHostBitForBit) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const Case &param = GetParam();
    auto shell = engine::preset_shell("preset:" + param.preset, param.dtype);
    ASSERT_TRUE(shell.ok()) << shell.error();
    engine::EngineOptions options;
    options.device = backend::DeviceKind::cuda;
    options.n_layer = param.n_layer;
    options.synthetic.seed = 1234;
    options.synthetic.dtype = param.dtype;
    options.synthetic.bias_std = 0.05f;
    options.synthetic.norm_std = 0.1f;
    options.kv.max_tokens = 64;
    auto engine = engine::Engine::create(*shell, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    const hp_model &view = (*engine)->abi_model();
    uint64_t n_checked = 0;
    for (int i = 0; i < view.n_tensors; ++i) {
        const hp_tensor &tensor = view.tensors[i];
        const model::TensorView *spec = shell->find(tensor.name);
        ASSERT_NE(spec, nullptr) << tensor.name;
        std::vector<uint8_t> host(spec->n_byte), device(spec->n_byte);
        model::synthesize_tensor(spec->spec, shell->config, options.synthetic, host.data());
        ASSERT_TRUE((*engine)->device().download(device.data(), tensor.data, device.size()).ok());
        const size_t element = dtype_size(param.dtype);
        uint64_t mismatches = 0;
        for (size_t e = 0; e < host.size() / element; ++e) mismatches += std::memcmp(&host[e * element], &device[e * element], element) != 0;
        EXPECT_EQ(mismatches, 0u) << param.preset << " " << tensor.name << " (" << host.size() / element << " elements)";
        n_checked += host.size() / element;
    }
    EXPECT_GT(n_checked, 0u);
    std::printf("%s: %llu elements identical\n", param.preset.c_str(), (unsigned long long)n_checked);
}

INSTANTIATE_TEST_SUITE_P(Presets, SyntheticOnDevice,
                         testing::Values(Case{"tiny-llama", DType::bf16, 0}, Case{"tiny-llama3", DType::bf16, 0},
                                         Case{"tiny-qwen2", DType::bf16, 0}, Case{"tiny-qwen3", DType::bf16, 0},
                                         Case{"tiny-moe", DType::bf16, 0}, Case{"tiny-qwen2-moe", DType::bf16, 0},
                                         Case{"tiny-mixtral", DType::bf16, 0}, Case{"tiny-llama", DType::f32, 0},
                                         Case{"tiny-llama", DType::f16, 0}, Case{"llama-3.2-1b", DType::bf16, 1}),
                         [](const testing::TestParamInfo<Case> &info) {
                             std::string name = info.param.preset + "_" + std::string(dtype_name(info.param.dtype));
                             for (char &ch : name) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return name;
                         });

}  // namespace
}  // namespace hp
