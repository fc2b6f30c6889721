// Synthetic checkpoints: named presets with real models' shapes, and deterministic weights from
// a seed, initialised as transformers does (Linear/Embedding ~ N(0, initializer_range), norms 1,
// biases 0). Value i of a tensor depends only on (seed, tensor name, i), so any device can
// regenerate the same weights without a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/dtype.h"
#include "hotpass/core/result.h"
#include "hotpass/model/config.h"
#include "hotpass/model/tensor_names.h"

namespace hp::model {

struct SyntheticOptions {
    uint64_t seed = 0;
    DType dtype = DType::bf16;
    // transformers initialises biases to 0 and norms to 1, which leaves those code paths
    // untested; tests set these to exercise them (norms become 1 + norm_std * N(0,1)).
    float bias_std = 0.0f;
    float norm_std = 0.0f;
    uint64_t max_shard_bytes = uint64_t(4) << 30;  // folders above this are sharded
    // Preset weights in memory (open_model): tensors of at least 2 MiB start on a 2 MiB boundary
    // and are advised as transparent huge pages (MADV_HUGEPAGE), so a decode step's weight stream
    // crosses 512x fewer pages. false: plain 4 KiB pages (for A/B measurements).
    bool huge_pages = true;
};

struct PresetInfo {
    std::string_view name;
    std::string_view description;
};
const std::vector<PresetInfo> &preset_list();
Result<ModelConfig> preset_config(std::string_view name);

// Fills `out` (n_element of options.dtype) with tensor `spec`'s synthetic values.
void synthesize_tensor(const TensorSpec &spec, const ModelConfig &config, const SyntheticOptions &options, void *out);

// Writes a Hugging Face style folder: config.json, generation_config.json, and
// model.safetensors (or model-0000i-of-0000N.safetensors + model.safetensors.index.json).
// `progress(done_bytes, total_bytes)` is called after each tensor. The weight files of a checkpoint
// written there before (model.safetensors, shards, the index) are removed first.
Status write_checkpoint(const ModelConfig &config, const SyntheticOptions &options, const std::filesystem::path &dir,
                        const std::function<void(uint64_t, uint64_t)> &progress = {});

}  // namespace hp::model
