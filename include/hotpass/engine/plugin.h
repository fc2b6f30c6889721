// ForwardPlugin: one loaded forward-pass plugin (.so) behind the C ABI, and the engine services
// it is given. Loading checks the exported symbol and the ABI version before calling anything.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "hotpass/backend/backend.h"
#include "hotpass/core/result.h"
#include "hotpass/forward_abi.h"

namespace hp::engine {

// Memory handed to a plugin through hp_services, tracked so it can be accounted for and
// reclaimed when the plugin is destroyed.
class PluginAllocator {
public:
    ~PluginAllocator();
    // Allocate from `backend` (device memory for CUDA) instead of the host; before any alloc.
    void set_backend(backend::Backend *backend) { backend_ = backend; }
    void *alloc(size_t bytes, size_t alignment);
    void free(void *ptr);
    size_t live_bytes() const;
    void release_all();

private:
    mutable std::mutex mutex_;
    std::map<void *, size_t> live_;
    backend::Backend *backend_ = nullptr;
};

class ForwardPlugin {
public:
    // Opens `path` (RTLD_NOW | RTLD_LOCAL), resolves hp_forward_entry and checks abi_version.
    static Result<std::unique_ptr<ForwardPlugin>> open(const std::filesystem::path &path);
    ~ForwardPlugin();
    ForwardPlugin(const ForwardPlugin &) = delete;
    ForwardPlugin &operator=(const ForwardPlugin &) = delete;

    // Creates the plugin's state for `model` (which must outlive the plugin).
    Status create(const hp_model *model, int n_thread);
    // The same on `backend` (which must outlive the plugin): the plugin allocates its memory
    // there and gets backend->stream() as hp_services.stream. nullptr: as above. On a CUDA backend
    // it calls keep_loaded() first.
    Status create(const hp_model *model, int n_thread, backend::Backend *backend);
    // Keeps the library mapped after this plugin is destroyed, until the process ends
    // (RTLD_NODELETE): the CUDA runtime cannot be trusted with a plugin unloaded and loaded again
    // (plugin.cpp), so each CUDA plugin a process creates costs its mapping for the process's life.
    Status keep_loaded();
    // One engine step; errors carry the plugin's return code.
    Status forward(const hp_batch &batch, hp_output &out);

    std::string_view name() const { return vtable_->name ? vtable_->name : "?"; }
    const std::filesystem::path &path() const { return path_; }
    size_t private_bytes() const { return allocator_.live_bytes(); }

private:
    ForwardPlugin() = default;
    std::filesystem::path path_;
    void *handle_ = nullptr;
    bool pinned_ = false;  // RTLD_NODELETE set: dlclose leaves the library mapped
    const hp_forward_vtable *vtable_ = nullptr;
    void *state_ = nullptr;
    PluginAllocator allocator_;
    hp_services services_{};
};

// Resolves `reference` (an in-tree plugin name) or a path to a .so. In-tree plugins are looked
// up in $HOTPASS_PLUGIN_DIR, then <dir of the running executable>/../lib/hotpass/forward.
Result<std::filesystem::path> resolve_forward(std::string_view name_or_path);
// The same for `device`: in-tree names map to libhp_forward_<device>_<name>.so
// (libhp_forward_cuda_baseline.so for "baseline" on CUDA).
Result<std::filesystem::path> resolve_forward(std::string_view name_or_path, hp_device device);

}  // namespace hp::engine
