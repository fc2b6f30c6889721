#include "hotpass/model/model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "hotpass/core/mapped_file.h"
#include "hotpass/model/safetensors.h"

namespace hp::model {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string &name) {
    const fs::path dir = fs::temp_directory_path() / ("hotpass-test-" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

TEST(ModelLoading, LoadsEverySharedCheckpoint) {
    for (const char *name : {"llama_gqa", "mixtral", "qwen3_moe"}) {
        auto model = load_model(fs::path(HOTPASS_SHARED_DIR "/models/hf") / name);
        ASSERT_TRUE(model.ok()) << name << ": " << model.error();
        EXPECT_EQ(model->tensors.size(), expected_tensors(model->config).size());
        EXPECT_EQ(model->tensors.front().dtype, DType::bf16);
    }
    auto mixtral = load_model(fs::path(HOTPASS_SHARED_DIR "/models/hf/mixtral"));
    ASSERT_TRUE(mixtral.ok());
    EXPECT_NE(mixtral->find("model.layers.1.block_sparse_moe.experts.3.w2.weight"), nullptr);
}

// Writes a tiny checkpoint, then rewrites its safetensors with `edit` applied to the tensor list.
fs::path edited_checkpoint(const std::string &name, const std::function<void(std::vector<SafetensorsTensor> &)> &edit) {
    auto config = preset_config("tiny-llama");
    const fs::path dir = temp_dir(name);
    EXPECT_TRUE(write_checkpoint(*config, SyntheticOptions{}, dir).ok());
    auto file = open_safetensors(dir / "model.safetensors");
    std::vector<SafetensorsTensor> tensors;
    std::vector<std::vector<uint8_t>> copies;
    for (const auto &entry : file->header.entries) {
        copies.emplace_back(file->data(entry), file->data(entry) + (entry.end - entry.begin));
    }
    for (size_t i = 0; i < file->header.entries.size(); ++i) {
        const auto &entry = file->header.entries[i];
        tensors.push_back({entry.name, *dtype_from_name(entry.dtype_name), entry.shape, copies[i].data()});
    }
    edit(tensors);
    EXPECT_TRUE(write_safetensors(dir / "model.safetensors", tensors).ok());
    return dir;
}

TEST(ModelLoading, MissingExtraAndMisshapenTensorsAreNamed) {
    auto dir = edited_checkpoint("missing", [](auto &tensors) {
        std::erase_if(tensors, [](const auto &t) { return t.name == "model.layers.2.mlp.up_proj.weight"; });
    });
    auto model = load_model(dir);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.error().find("missing tensor 'model.layers.2.mlp.up_proj.weight' (expected shape [688, 256]"), std::string::npos)
        << model.error();

    static const std::vector<uint8_t> extra_bytes(8);
    dir = edited_checkpoint("extra", [](auto &tensors) {
        tensors.push_back({"model.layers.0.mystery.weight", DType::f32, {2}, extra_bytes.data()});
    });
    model = load_model(dir);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.error().find("unexpected tensor 'model.layers.0.mystery.weight' with shape [2]"), std::string::npos)
        << model.error();

    dir = edited_checkpoint("shape", [](auto &tensors) {
        for (auto &t : tensors) {
            if (t.name == "model.layers.1.self_attn.k_proj.weight") t.shape = {32, 128};  // same bytes, wrong shape
        }
    });
    model = load_model(dir);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.error().find("tensor 'model.layers.1.self_attn.k_proj.weight' has shape [32, 128], expected [64, 256]"),
              std::string::npos)
        << model.error();

}

TEST(ModelLoading, MissingFilesAreClearErrors) {
    const fs::path empty = temp_dir("empty");
    auto model = load_model(empty);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.error().find("no config.json"), std::string::npos);

    auto config = preset_config("tiny-llama");
    ASSERT_TRUE(write_file_atomic(empty / "config.json", config_to_json(*config)).ok());
    model = load_model(empty);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.error().find("no model.safetensors or model.safetensors.index.json"), std::string::npos);
}

TEST(ModelLoading, CheckModelSpecTakesWhatOpenModelTakes) {
    EXPECT_TRUE(check_model_spec("preset:tiny-llama").ok());
    EXPECT_TRUE(check_model_spec("preset:qwen3-30b-a3b").ok());  // looked up, not generated
    const Status unknown = check_model_spec("preset:tiny-lama");
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.error().find("unknown preset"), std::string::npos) << unknown.error();
    EXPECT_FALSE(check_model_spec("/nonexistent/model").ok());
    const fs::path dir = temp_dir("spec");
    ASSERT_TRUE(write_checkpoint(*preset_config("tiny-llama"), SyntheticOptions{}, dir).ok());
    EXPECT_TRUE(check_model_spec(dir.string()).ok());
    fs::resize_file(dir / "model.safetensors", 1000);  // truncated
    EXPECT_FALSE(check_model_spec(dir.string()).ok());
}

TEST(ModelLoading, ShardedCheckpointLoadsLikeTheSingleFile) {
    auto config = preset_config("tiny-moe");
    const fs::path single = temp_dir("single"), sharded = temp_dir("sharded");
    SyntheticOptions options;
    options.seed = 7;
    ASSERT_TRUE(write_checkpoint(*config, options, single).ok());
    options.max_shard_bytes = 3 << 20;  // tiny-moe is ~6.4 MB: two shards
    ASSERT_TRUE(write_checkpoint(*config, options, sharded).ok());
    EXPECT_TRUE(fs::exists(sharded / "model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(sharded / "model.safetensors"));
    auto a = load_model(single);
    auto b = load_model(sharded);
    ASSERT_TRUE(a.ok()) << a.error();
    ASSERT_TRUE(b.ok()) << b.error();
    ASSERT_EQ(a->tensors.size(), b->tensors.size());
    for (size_t i = 0; i < a->tensors.size(); ++i) {
        ASSERT_EQ(a->tensors[i].n_byte, b->tensors[i].n_byte);
        ASSERT_EQ(std::memcmp(a->tensors[i].data, b->tensors[i].data, a->tensors[i].n_byte), 0) << a->tensors[i].spec.name;
    }
    // An index that places a tensor in a shard that does not hold it.
    auto index = nlohmann::json::parse(*read_text_file(sharded / "model.safetensors.index.json"));
    const std::string holder = index["weight_map"]["model.norm.weight"];
    std::string other;
    for (const auto &file : index["weight_map"]) {
        if (file != holder) other = file;
    }
    index["weight_map"]["model.norm.weight"] = other;
    ASSERT_TRUE(write_file_atomic(sharded / "model.safetensors.index.json", index.dump()).ok());
    auto broken = load_model(sharded);
    ASSERT_FALSE(broken.ok());
    EXPECT_NE(broken.error().find("tensor 'model.norm.weight' is in " + holder + " but the index says " + other),
              std::string::npos)
        << broken.error();

    // Rewriting the folder as a single file (another seed) leaves no stale index or shard to be
    // read in its place.
    options.seed = 8;
    options.max_shard_bytes = SyntheticOptions{}.max_shard_bytes;
    ASSERT_TRUE(write_checkpoint(*config, options, sharded).ok());
    EXPECT_FALSE(fs::exists(sharded / "model.safetensors.index.json"));
    EXPECT_EQ(std::distance(fs::directory_iterator(sharded), fs::directory_iterator()), 3);  // config, generation_config, weights
    ASSERT_TRUE(write_checkpoint(*config, options, single).ok());
    auto rewritten = load_model(sharded);
    auto expected = load_model(single);
    ASSERT_TRUE(rewritten.ok()) << rewritten.error();
    ASSERT_TRUE(expected.ok()) << expected.error();
    for (size_t i = 0; i < expected->tensors.size(); ++i) {
        ASSERT_EQ(std::memcmp(rewritten->tensors[i].data, expected->tensors[i].data, expected->tensors[i].n_byte), 0)
            << expected->tensors[i].spec.name;
    }
}

TEST(ModelLoading, PresetInMemoryMatchesTheWrittenCheckpoint) {
    SyntheticOptions options;
    options.seed = 3;
    auto in_memory = open_model("preset:tiny-llama", options);
    ASSERT_TRUE(in_memory.ok()) << in_memory.error();
    const fs::path dir = temp_dir("preset");
    ASSERT_TRUE(write_checkpoint(in_memory->config, options, dir).ok());
    auto on_disk = load_model(dir);
    ASSERT_TRUE(on_disk.ok()) << on_disk.error();
    ASSERT_EQ(in_memory->tensors.size(), on_disk->tensors.size());
    for (size_t i = 0; i < on_disk->tensors.size(); ++i) {
        ASSERT_EQ(std::memcmp(in_memory->tensors[i].data, on_disk->tensors[i].data, on_disk->tensors[i].n_byte), 0);
    }
    // Weights on 4 KiB pages hold the same values as on huge pages.
    options.huge_pages = false;
    auto small_pages = open_model("preset:tiny-llama", options);
    ASSERT_TRUE(small_pages.ok()) << small_pages.error();
    for (size_t i = 0; i < on_disk->tensors.size(); ++i) {
        ASSERT_EQ(std::memcmp(in_memory->tensors[i].data, small_pages->tensors[i].data, on_disk->tensors[i].n_byte), 0);
    }
    EXPECT_FALSE(open_model("preset:no-such").ok());
    auto huge = open_model("preset:qwen3-30b-a3b");
    ASSERT_FALSE(huge.ok());
    EXPECT_NE(huge.error().find("needs"), std::string::npos);
}

TEST(ModelLoading, TensorMemoryOfAtLeastTwoMiBStartsOnAHugePageBoundary) {
    constexpr size_t kHuge = size_t(2) << 20;
    for (size_t n_byte : {kHuge, 3 * kHuge + 4097, size_t(65536000)}) {
        std::shared_ptr<void> memory = map_tensor_memory(n_byte, true);
        ASSERT_NE(memory, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.get()) % kHuge, 0u) << n_byte;
        auto *bytes = static_cast<unsigned char *>(memory.get());
        EXPECT_EQ(bytes[0] | bytes[n_byte - 1], 0);  // zeroed, and the last byte is mapped
        std::memset(bytes, 7, n_byte);
        EXPECT_EQ(bytes[n_byte - 1], 7);
    }
    std::shared_ptr<void> small = map_tensor_memory(4096, true), plain = map_tensor_memory(3 * kHuge, false);
    ASSERT_NE(small, nullptr);
    ASSERT_NE(plain, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(plain.get()) % 4096, 0u);
}

}  // namespace
}  // namespace hp::model
