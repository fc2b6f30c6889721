// Model: a validated config plus a read-only view of every weight, backed by mapped safetensors
// files (a checkpoint folder) or by memory generated from a seed (`preset:NAME`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hotpass/core/dtype.h"
#include "hotpass/core/result.h"
#include "hotpass/model/config.h"
#include "hotpass/model/synthetic.h"
#include "hotpass/model/tensor_names.h"

namespace hp::model {

struct TensorView {
    TensorSpec spec;  // name, shape, slot
    DType dtype = DType::bf16;
    const void *data = nullptr;
    uint64_t n_byte = 0;

    uint64_t n_element() const { return n_byte / dtype_size(dtype); }
};

struct Model {
    ModelConfig config;
    std::string source;               // the folder, or "preset:NAME"
    std::vector<TensorView> tensors;  // expected_tensors(config) order
    std::vector<std::shared_ptr<const void>> storage;  // keeps mappings / buffers alive

    const TensorView *find(std::string_view name) const;
    uint64_t n_param() const;
    uint64_t n_byte() const;
};

// Bytes of weights one decoded token reads: every layer weight (for MoE layers: router,
// n_expert_used experts and the shared expert), the final norm, lm_head and one embedding row.
// n_layer > 0 counts only the first n_layer decoder layers (the fast tier's).
uint64_t bytes_read_per_token(const Model &model, int n_layer = 0);
// The same from a config alone, for weights of `dtype` (presets that are never materialised).
uint64_t bytes_read_per_token(const ModelConfig &config, DType dtype);
uint64_t n_param(const ModelConfig &config);

// Opens and validates a Hugging Face checkpoint folder: config.json plus model.safetensors or a
// sharded model.safetensors.index.json. Every expected tensor must be present with its shape;
// extra tensors are errors.
Result<Model> load_model(const std::filesystem::path &dir);

// `spec` is a checkpoint folder or `preset:NAME`; presets are generated in memory from
// options.seed (refused when they would not fit in memory).
Result<Model> open_model(std::string_view spec, const SyntheticOptions &options = {});
// Whether open_model could take `spec`, cheaply: a folder is opened (mapped and validated), a
// preset only looked up. For commands that hand the model to an executor process.
Status check_model_spec(std::string_view spec);

// Zeroed, page-aligned anonymous memory of n_byte bytes for one in-memory tensor (NULL when the
// mapping fails), unmapped when the last owner lets go. With huge_pages, memory of at least 2 MiB
// starts on a 2 MiB boundary and is advised as transparent huge pages (MADV_HUGEPAGE) before it
// is touched; where THP is off the advice does nothing and the pages stay 4 KiB.
std::shared_ptr<void> map_tensor_memory(size_t n_byte, bool huge_pages);

}  // namespace hp::model
