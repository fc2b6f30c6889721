// Loading forward-pass plugins and serving them engine memory and logging.
#include "hotpass/engine/plugin.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

namespace hp::engine {

PluginAllocator::~PluginAllocator() { release_all(); }

void *PluginAllocator::alloc(size_t bytes, size_t alignment) {
    alignment = std::max<size_t>(alignment, 64);
    if ((alignment & (alignment - 1)) != 0) return nullptr;
    void *ptr = backend_ ? backend_->alloc(bytes, alignment)
                         : std::aligned_alloc(alignment, (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment);
    if (ptr) {
        std::lock_guard lock(mutex_);
        live_[ptr] = bytes;
    }
    return ptr;
}

void PluginAllocator::free(void *ptr) {
    if (!ptr) return;
    std::lock_guard lock(mutex_);
    auto found = live_.find(ptr);
    if (found == live_.end()) {
        spdlog::warn("plugin freed a pointer it was not given: {}", ptr);
        return;
    }
    backend_ ? backend_->free(ptr) : std::free(ptr);
    live_.erase(found);
}

size_t PluginAllocator::live_bytes() const {
    std::lock_guard lock(mutex_);
    size_t total = 0;
    for (const auto &[ptr, bytes] : live_) total += bytes;
    return total;
}

void PluginAllocator::release_all() {
    std::lock_guard lock(mutex_);
    for (const auto &[ptr, bytes] : live_) backend_ ? backend_->free(ptr) : std::free(ptr);
    live_.clear();
}

namespace {

void *service_alloc(void *ctx, size_t bytes, size_t alignment) {
    return static_cast<PluginAllocator *>(ctx)->alloc(bytes, alignment);
}
void service_free(void *ctx, void *ptr) { static_cast<PluginAllocator *>(ctx)->free(ptr); }
void service_log(void *, hp_log_level level, const char *message) {
    switch (level) {
        case HP_LOG_DEBUG: spdlog::debug("plugin: {}", message); break;
        case HP_LOG_INFO: spdlog::info("plugin: {}", message); break;
        case HP_LOG_WARN: spdlog::warn("plugin: {}", message); break;
        case HP_LOG_ERROR: spdlog::error("plugin: {}", message); break;
    }
}

const char *return_code_name(int code) {
    switch (code) {
        case HP_ERR_UNSUPPORTED: return "unsupported";
        case HP_ERR_OUT_OF_MEMORY: return "out of memory";
        case HP_ERR_INVALID: return "invalid input";
        default: return "error";
    }
}

}  // namespace

Result<std::unique_ptr<ForwardPlugin>> ForwardPlugin::open(const std::filesystem::path &path) {
    if (!std::filesystem::exists(path)) return error("forward plugin {} does not exist", path.string());
    std::unique_ptr<ForwardPlugin> plugin(new ForwardPlugin());
    plugin->path_ = path;
    plugin->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!plugin->handle_) return error("cannot load forward plugin {}: {}", path.string(), dlerror());
    auto entry = reinterpret_cast<hp_forward_entry_fn>(dlsym(plugin->handle_, HP_FORWARD_ENTRY_SYMBOL));
    if (!entry) return error("{} does not export {}", path.string(), HP_FORWARD_ENTRY_SYMBOL);
    plugin->vtable_ = entry();
    if (!plugin->vtable_) return error("{}: {}() returned NULL", path.string(), HP_FORWARD_ENTRY_SYMBOL);
    if (plugin->vtable_->abi_version != HP_FORWARD_ABI_VERSION) {
        return error("{}: ABI version {} but this engine speaks {}", path.string(), plugin->vtable_->abi_version,
                     HP_FORWARD_ABI_VERSION);
    }
    if (!plugin->vtable_->create || !plugin->vtable_->forward || !plugin->vtable_->destroy) {
        return error("{}: the function table has a NULL entry", path.string());
    }
    return plugin;
}

ForwardPlugin::~ForwardPlugin() {
    if (state_) vtable_->destroy(state_);
    allocator_.release_all();
    if (handle_) dlclose(handle_);
}

// A plugin run on CUDA stays mapped until the process ends: the CUDA runtime (13.0, driver 580) can
// hang in the first kernel launch of a plugin that was unloaded and loaded again.
// test_cuda_baseline's RefusesTopKOutsideTheExperts loads the baseline three times in one process; the
// third load's first launch spun in __cudaGetKernel on every run of some builds, and passed with
// dlclose made a no-op (bench/RESULTS.md). Candidates have one file name per artifact (builder.cpp),
// so a pinned library is never a stale build of another source.
Status ForwardPlugin::keep_loaded() {
    if (pinned_) return Status::success();
    void *pin = dlopen(path_.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);  // sets RTLD_NODELETE on the loaded library
    if (!pin) return error("cannot keep forward plugin {} loaded: {}", path_.string(), dlerror());
    dlclose(pin);  // the reference taken here; the library stays
    pinned_ = true;
    return Status::success();
}

Status ForwardPlugin::create(const hp_model *model, int n_thread) { return create(model, n_thread, nullptr); }

Status ForwardPlugin::create(const hp_model *model, int n_thread, backend::Backend *backend) {
    HP_CHECK(state_ == nullptr, "create() called twice on {}", path_.string());
    // Pinned before create(), which may refuse the model: a refused load counts too (keep_loaded).
    if (backend && backend->kind() == backend::DeviceKind::cuda) HP_TRY(keep_loaded());
    allocator_.set_backend(backend);
    services_.stream = backend ? backend->stream() : nullptr;
    services_.ctx = &allocator_;
    services_.alloc = service_alloc;
    services_.free = service_free;
    services_.log = service_log;
    services_.n_thread = n_thread;
    services_.rank = 0;
    services_.world_size = 1;
    const int code = vtable_->create(model, &services_, &state_);
    if (code != HP_OK) {
        state_ = nullptr;
        return error("{}: create() failed: {} ({})", name(), return_code_name(code), code);
    }
    return Status::success();
}

Status ForwardPlugin::forward(const hp_batch &batch, hp_output &out) {
    HP_CHECK(state_ != nullptr, "forward() before create()");
    const int code = vtable_->forward(state_, &batch, &out);
    if (code != HP_OK) return error("{}: forward() failed: {} ({})", name(), return_code_name(code), code);
    return Status::success();
}

Result<std::filesystem::path> resolve_forward(std::string_view name_or_path) {
    return resolve_forward(name_or_path, HP_DEVICE_CPU);
}

Result<std::filesystem::path> resolve_forward(std::string_view name_or_path, hp_device device) {
    if (name_or_path.find('/') != std::string_view::npos || name_or_path.ends_with(".so")) {
        return std::filesystem::absolute(std::filesystem::path(name_or_path));
    }
    const std::string file = fmt::format("libhp_forward_{}_{}.so", device == HP_DEVICE_CUDA ? "cuda" : "cpu", name_or_path);
    std::vector<std::filesystem::path> candidates;
    if (const char *dir = std::getenv("HOTPASS_PLUGIN_DIR")) candidates.push_back(std::filesystem::path(dir) / file);
    std::error_code code;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", code);
    if (!code) candidates.push_back(exe.parent_path().parent_path() / "lib/hotpass/forward" / file);
    for (const auto &candidate : candidates) {
        if (std::filesystem::exists(candidate)) return candidate;
    }
    std::string searched;
    for (const auto &candidate : candidates) searched += "\n  " + candidate.string();
    return error("forward pass '{}' not found; looked in:{}", name_or_path, searched);
}

}  // namespace hp::engine
