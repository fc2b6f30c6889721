// Where the GPU tests find ../shared/models/hf: a copy inside the repository (checkpoints/hf,
// git-ignored, carried to the GPU machine) first, then the shared folder beside the checkout.
#pragma once

#include <filesystem>
#include <string>

namespace hp::gpu_test {

inline std::filesystem::path checkpoint_dir(const std::string &name) {
    const std::filesystem::path local = std::filesystem::path(HOTPASS_SOURCE_DIR) / "checkpoints/hf" / name;
    if (std::filesystem::exists(local / "hf_reference.json")) return local;
    return std::filesystem::path(HOTPASS_SHARED_DIR) / "models/hf" / name;
}

}  // namespace hp::gpu_test
