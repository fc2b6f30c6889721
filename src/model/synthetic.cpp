// Deterministic synthetic weights and the Hugging Face folder writer.
#include "hotpass/model/synthetic.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>

#include "hotpass/core/hash.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/model/safetensors.h"

namespace hp::model {
namespace {

uint64_t n_element_of(const TensorSpec &spec) {
    uint64_t n = 1;
    for (int64_t extent : spec.shape) n *= uint64_t(extent);
    return n;
}

void store(DType dtype, void *out, uint64_t index, float value) {
    switch (dtype) {
        case DType::f32: static_cast<float *>(out)[index] = value; break;
        case DType::f16: static_cast<uint16_t *>(out)[index] = f32_to_f16(value); break;
        case DType::bf16: static_cast<uint16_t *>(out)[index] = f32_to_bf16(value); break;
    }
}

}  // namespace

void synthesize_tensor(const TensorSpec &spec, const ModelConfig &config, const SyntheticOptions &options, void *out) {
    const uint64_t n_element = n_element_of(spec);
    const uint64_t key = hash64(spec.name, options.seed);
    float mean = 0.0f, std = config.initializer_range;
    if (spec.is_norm()) {
        mean = 1.0f;
        std = options.norm_std;
    } else if (spec.is_bias()) {
        std = options.bias_std;
    }
    auto fill = [&](uint64_t begin, uint64_t end) {
        for (uint64_t i = begin; i < end; ++i) {
            store(options.dtype, out, i, std == 0.0f ? mean : mean + std * normal_at(key, i));
        }
    };
    const uint64_t n_thread = n_element < (1u << 20) ? 1 : std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> workers;
    const uint64_t chunk = (n_element + n_thread - 1) / n_thread;
    for (uint64_t t = 1; t < n_thread; ++t) {
        workers.emplace_back(fill, std::min(n_element, t * chunk), std::min(n_element, (t + 1) * chunk));
    }
    fill(0, std::min(n_element, chunk));
    for (std::thread &worker : workers) worker.join();
}

Status write_checkpoint(const ModelConfig &config, const SyntheticOptions &options, const std::filesystem::path &dir,
                        const std::function<void(uint64_t, uint64_t)> &progress) {
    std::error_code code;
    std::filesystem::create_directories(dir, code);
    if (code) return error("cannot create {}: {}", dir.string(), code.message());
    // The weights of a checkpoint written there before go first: a stale index or shard would be
    // read instead of (or beside) the new weights.
    std::vector<std::filesystem::path> stale;
    for (const auto &entry : std::filesystem::directory_iterator(dir, code)) {
        const std::string name = entry.path().filename().string();
        if (name == "model.safetensors" || name == "model.safetensors.index.json" || (name.starts_with("model-") && name.ends_with(".safetensors")) ||
            name.ends_with(".safetensors.tmp")) {
            stale.push_back(entry.path());
        }
    }
    for (const std::filesystem::path &path : stale) {
        if (!std::filesystem::remove(path, code)) return error("cannot remove the old {}: {}", path.string(), code.message());
    }
    ModelConfig written = config;
    written.dtype = options.dtype;
    HP_TRY(write_file_atomic(dir / "config.json", config_to_json(written)));
    nlohmann::json generation = {{"_from_model_config", true}, {"transformers_version", "5.0.0"}};
    if (config.bos_token_id >= 0) generation["bos_token_id"] = config.bos_token_id;
    if (!config.eos_token_ids.empty()) generation["eos_token_id"] = config.eos_token_ids;
    HP_TRY(write_file_atomic(dir / "generation_config.json", generation.dump(2) + "\n"));

    // Group tensors, in order, into shards of at most max_shard_bytes (a tensor larger than that
    // gets a shard of its own), as transformers' save_pretrained does.
    const std::vector<TensorSpec> specs = expected_tensors(config);
    std::vector<std::vector<size_t>> shards(1);
    uint64_t shard_bytes = 0, total_bytes = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const uint64_t n_byte = n_element_of(specs[i]) * dtype_size(options.dtype);
        if (!shards.back().empty() && shard_bytes + n_byte > options.max_shard_bytes) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shards.back().push_back(i);
        shard_bytes += n_byte;
        total_bytes += n_byte;
    }
    const std::filesystem::space_info space = std::filesystem::space(dir, code);
    if (!code && space.available < total_bytes) {
        return error("{} needs {:.2f} GB but only {:.2f} GB are free on that disk", dir.string(), total_bytes / 1e9,
                     space.available / 1e9);
    }

    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t done_bytes = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string file_name = shards.size() == 1 ? "model.safetensors"
                                                         : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
        std::vector<SafetensorsPlan> plan;
        for (size_t index : shards[s]) {
            plan.push_back({specs[index].name, options.dtype, specs[index].shape});
            weight_map[specs[index].name] = file_name;
        }
        HP_TRY(write_safetensors_streaming(dir / file_name, plan, [&](size_t k, std::vector<uint8_t> &buffer) {
            synthesize_tensor(specs[shards[s][k]], config, options, buffer.data());
            done_bytes += buffer.size();
            if (progress) progress(done_bytes, total_bytes);
        }));
    }
    if (shards.size() > 1) {
        nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
        HP_TRY(write_file_atomic(dir / "model.safetensors.index.json", index.dump(2) + "\n"));
    }
    return Status::success();
}

}  // namespace hp::model
