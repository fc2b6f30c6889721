// Loading a checkpoint folder or a preset into a validated Model.
#include "hotpass/model/model.h"

#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "hotpass/core/mapped_file.h"
#include "hotpass/model/safetensors.h"

namespace hp::model {
namespace {

// Non-weight buffers some older checkpoints carry; they are recomputed, never read.
bool is_ignorable_buffer(std::string_view name) { return name.ends_with("rotary_emb.inv_freq"); }

struct Located {
    const SafetensorsFile *file;
    const SafetensorsEntry *entry;
};

// The checkpoint's safetensors files, in order: the shards named by the index, or the single file.
Result<std::vector<std::filesystem::path>> checkpoint_files(const std::filesystem::path &dir,
                                                            std::map<std::string, std::string> &weight_map) {
    const std::filesystem::path index_path = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(index_path)) {
        auto text = read_text_file(index_path);
        if (!text.ok()) return Error{text.error()};
        const auto index = nlohmann::json::parse(*text, nullptr, false);
        if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
            return error("{}: not a valid index (needs a 'weight_map' object)", index_path.string());
        }
        std::set<std::string> files;
        for (auto item = index["weight_map"].begin(); item != index["weight_map"].end(); ++item) {
            if (!item.value().is_string()) return error("{}: weight_map['{}'] must be a file name", index_path.string(), item.key());
            const std::string file = item.value().get<std::string>();
            if (file.find('/') != std::string::npos) return error("{}: shard name '{}' must be a plain file name", index_path.string(), file);
            weight_map[item.key()] = file;
            files.insert(file);
        }
        std::vector<std::filesystem::path> paths;
        for (const std::string &file : files) paths.push_back(dir / file);
        return paths;
    }
    if (std::filesystem::exists(dir / "model.safetensors")) return std::vector<std::filesystem::path>{dir / "model.safetensors"};
    return error("{}: no model.safetensors or model.safetensors.index.json", dir.string());
}

}  // namespace

const TensorView *Model::find(std::string_view name) const {
    for (const TensorView &tensor : tensors) {
        if (tensor.spec.name == name) return &tensor;
    }
    return nullptr;
}

uint64_t Model::n_param() const {
    uint64_t n = 0;
    for (const TensorView &tensor : tensors) n += tensor.n_element();
    return n;
}

uint64_t Model::n_byte() const {
    uint64_t n = 0;
    for (const TensorView &tensor : tensors) n += tensor.n_byte;
    return n;
}

namespace {

// Fraction of a tensor's elements one decoded token reads.
double read_fraction(const TensorSpec &spec, const ModelConfig &config) {
    if (spec.slot == Slot::token_embd) return config.tied_embeddings ? 1.0 : 1.0 / config.n_vocab;
    if (spec.slot == Slot::expert_gate || spec.slot == Slot::expert_up || spec.slot == Slot::expert_down) {
        return double(config.n_expert_used) / config.n_expert;
    }
    return 1.0;
}

uint64_t n_element(const TensorSpec &spec) {
    uint64_t n = 1;
    for (int64_t extent : spec.shape) n *= uint64_t(extent);
    return n;
}

}  // namespace

uint64_t bytes_read_per_token(const ModelConfig &config, DType dtype) {
    double bytes = 0;
    for (const TensorSpec &spec : expected_tensors(config)) {
        bytes += double(n_element(spec)) * dtype_size(dtype) * read_fraction(spec, config);
    }
    return uint64_t(bytes);
}

uint64_t bytes_read_per_token(const Model &model, int n_layer) {
    double bytes = 0;
    for (const TensorView &tensor : model.tensors) {
        if (n_layer > 0 && tensor.spec.layer >= n_layer) continue;
        bytes += double(tensor.n_byte) * read_fraction(tensor.spec, model.config);
    }
    return uint64_t(bytes);
}

uint64_t n_param(const ModelConfig &config) {
    uint64_t n = 0;
    for (const TensorSpec &spec : expected_tensors(config)) n += n_element(spec);
    return n;
}

Result<Model> load_model(const std::filesystem::path &dir) {
    if (!std::filesystem::is_directory(dir)) return error("{}: not a directory", dir.string());
    auto config = load_config(dir);
    if (!config.ok()) return Error{config.error()};

    std::map<std::string, std::string> weight_map;
    auto paths = checkpoint_files(dir, weight_map);
    if (!paths.ok()) return Error{paths.error()};

    auto files = std::make_shared<std::vector<SafetensorsFile>>();
    files->reserve(paths->size());
    for (const auto &path : *paths) {
        auto file = open_safetensors(path);
        if (!file.ok()) return Error{file.error()};
        files->push_back(std::move(file).value());
    }
    std::map<std::string, Located> found;
    for (const SafetensorsFile &file : *files) {
        const std::string file_name = file.mapping->path().filename().string();
        for (const SafetensorsEntry &entry : file.header.entries) {
            if (!weight_map.empty()) {
                auto listed = weight_map.find(entry.name);
                if (listed == weight_map.end() || listed->second != file_name) {
                    return error("{}: tensor '{}' is in {} but the index says {}", dir.string(), entry.name, file_name,
                                 listed == weight_map.end() ? "nothing" : listed->second);
                }
            }
            if (!found.emplace(entry.name, Located{&file, &entry}).second) {
                return error("{}: tensor '{}' appears in more than one shard", dir.string(), entry.name);
            }
        }
    }
    for (const auto &[name, file] : weight_map) {
        if (!found.count(name)) return error("{}: the index lists tensor '{}' in {} but that file does not hold it", dir.string(), name, file);
    }

    Model model;
    model.config = std::move(config).value();
    model.source = dir.string();
    std::set<std::string> used;
    const std::string arch_name(architecture_hf_name(model.config.arch));
    for (TensorSpec &spec : expected_tensors(model.config)) {
        auto located = found.find(spec.name);
        if (located == found.end()) {
            return error("{}: missing tensor '{}' (expected shape {} for this {} config)", dir.string(), spec.name,
                         shape_string(spec.shape), arch_name);
        }
        const SafetensorsEntry &entry = *located->second.entry;
        if (entry.shape != spec.shape) {
            return error("{}: tensor '{}' has shape {}, expected {} from config.json", dir.string(), spec.name,
                         shape_string(entry.shape), shape_string(spec.shape));
        }
        const auto dtype = dtype_from_name(entry.dtype_name);
        if (!dtype) return error("{}: tensor '{}' has dtype {}; supported: BF16, F16, F32", dir.string(), spec.name, entry.dtype_name);
        used.insert(spec.name);
        model.tensors.push_back(TensorView{std::move(spec), *dtype, located->second.file->data(entry), entry.end - entry.begin});
    }
    for (const auto &[name, located] : found) {
        if (used.count(name) || is_ignorable_buffer(name)) continue;
        if (model.config.tied_embeddings && name == "lm_head.weight") continue;  // tied: embed_tokens is used
        return error("{}: unexpected tensor '{}' with shape {}: not part of a {} with this config.json", dir.string(), name,
                     shape_string(located.entry->shape), arch_name);
    }
    model.storage.push_back(files);
    return model;
}

// Huge pages: the mapping reserves 2 MiB of slack and unmaps what lies outside the aligned range.
std::shared_ptr<void> map_tensor_memory(size_t n_byte, bool huge_pages) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = std::max<size_t>(n_byte, 1);
    if (!huge_pages || bytes < kHuge) {
        void *memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) return nullptr;
        return std::shared_ptr<void>(memory, [bytes](void *ptr) { munmap(ptr, bytes); });
    }
    const size_t page = size_t(sysconf(_SC_PAGE_SIZE)), mapped = (bytes + page - 1) / page * page;
    void *reserved = mmap(nullptr, mapped + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reserved == MAP_FAILED) return nullptr;
    char *start = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(reserved) + kHuge - 1) & ~uintptr_t(kHuge - 1));
    const size_t head = size_t(start - static_cast<char *>(reserved));  // a multiple of the page size
    if (head > 0) munmap(reserved, head);
    munmap(start + mapped, kHuge - head);
    madvise(start, mapped, MADV_HUGEPAGE);
    return std::shared_ptr<void>(start, [mapped](void *ptr) { munmap(ptr, mapped); });
}

Status check_model_spec(std::string_view spec) {
    if (spec.starts_with("preset:")) {
        auto config = preset_config(spec.substr(7));
        return config.ok() ? Status::success() : Status(Error{config.error()});
    }
    auto model = load_model(std::filesystem::path(spec));
    return model.ok() ? Status::success() : Status(Error{model.error()});
}

Result<Model> open_model(std::string_view spec, const SyntheticOptions &options) {
    if (!spec.starts_with("preset:")) return load_model(std::filesystem::path(spec));
    auto config = preset_config(spec.substr(7));
    if (!config.ok()) return Error{config.error()};
    config->dtype = options.dtype;
    const uint64_t total_bytes = n_param(*config) * dtype_size(options.dtype);
    const uint64_t memory_bytes = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
    if (total_bytes > memory_bytes * 8 / 10) {
        return error("{} needs {:.1f} GB of weights in memory but this machine has {:.1f} GB; use a smaller preset",
                     spec, total_bytes / 1e9, memory_bytes / 1e9);
    }
    Model model;
    model.config = std::move(config).value();
    model.source = std::string(spec);
    for (TensorSpec &tensor_spec : expected_tensors(model.config)) {
        uint64_t n_byte = dtype_size(options.dtype);
        for (int64_t extent : tensor_spec.shape) n_byte *= uint64_t(extent);
        // Page-aligned anonymous memory (huge pages where advised), made read-only once filled:
        // like a mapped checkpoint, a write to a weight faults.
        std::shared_ptr<void> buffer = map_tensor_memory(n_byte, options.huge_pages);
        if (!buffer) return error("out of memory generating {} ({} bytes)", tensor_spec.name, n_byte);
        synthesize_tensor(tensor_spec, model.config, options, buffer.get());
        mprotect(buffer.get(), std::max<size_t>(n_byte, 1), PROT_READ);
        model.tensors.push_back(TensorView{std::move(tensor_spec), options.dtype, buffer.get(), n_byte});
        model.storage.push_back(std::move(buffer));
    }
    return model;
}

}  // namespace hp::model
