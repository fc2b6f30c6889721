#include "hotpass/engine/plugin.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace hp::engine {
namespace {

TEST(Plugin, ReferenceResolvesAndLoads) {
    auto path = resolve_forward("reference");
    ASSERT_TRUE(path.ok()) << path.error();
    auto plugin = ForwardPlugin::open(*path);
    ASSERT_TRUE(plugin.ok()) << plugin.error();
    EXPECT_EQ((*plugin)->name(), "cpu-reference");
}

TEST(Plugin, BadPluginsAreClearErrors) {
    auto missing = resolve_forward("no-such-pass");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().find("forward pass 'no-such-pass' not found"), std::string::npos);

    auto absent = ForwardPlugin::open("/nonexistent/libx.so");
    ASSERT_FALSE(absent.ok());
    EXPECT_NE(absent.error().find("does not exist"), std::string::npos);

    const auto garbage = std::filesystem::temp_directory_path() / "hotpass-test-garbage.so";
    std::ofstream(garbage) << "not an ELF file";
    auto not_elf = ForwardPlugin::open(garbage);
    ASSERT_FALSE(not_elf.ok());
    EXPECT_NE(not_elf.error().find("cannot load forward plugin"), std::string::npos);

    // A real shared object without the entry symbol: libm.
    auto no_symbol = ForwardPlugin::open("/lib/x86_64-linux-gnu/libm.so.6");
    ASSERT_FALSE(no_symbol.ok());
    EXPECT_NE(no_symbol.error().find("does not export hp_forward_entry"), std::string::npos);
}

// Whether the library at `path` is mapped in this process (RTLD_NOLOAD loads nothing).
bool library_loaded(const std::filesystem::path &path) {
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle) dlclose(handle);
    return handle != nullptr;
}

// A destroyed plugin is unloaded, unless keep_loaded() pinned it (what create() does on a CUDA
// backend, where a plugin unloaded and loaded again can hang the CUDA runtime: plugin.cpp). Two
// different plugins, since a pinned library stays for the rest of the process.
TEST(Plugin, KeepLoadedOutlivesThePlugin) {
    auto unpinned = resolve_forward("reference");
    auto pinned = resolve_forward("baseline");
    ASSERT_TRUE(unpinned.ok()) << unpinned.error();
    ASSERT_TRUE(pinned.ok()) << pinned.error();
    {
        auto plugin = ForwardPlugin::open(*unpinned);
        ASSERT_TRUE(plugin.ok()) << plugin.error();
        EXPECT_TRUE(library_loaded(*unpinned));
    }
    EXPECT_FALSE(library_loaded(*unpinned));
    {
        auto plugin = ForwardPlugin::open(*pinned);
        ASSERT_TRUE(plugin.ok()) << plugin.error();
        ASSERT_TRUE((*plugin)->keep_loaded().ok());
        ASSERT_TRUE((*plugin)->keep_loaded().ok());  // idempotent
    }
    EXPECT_TRUE(library_loaded(*pinned));
    auto again = ForwardPlugin::open(*pinned);  // the same mapping, usable again
    ASSERT_TRUE(again.ok()) << again.error();
    EXPECT_EQ((*again)->name(), "cpu-baseline");
}

TEST(Plugin, AllocatorTracksAndReleases) {
    PluginAllocator allocator;
    void *a = allocator.alloc(1000, 64);
    void *b = allocator.alloc(24, 128);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 128, 0u);
    EXPECT_EQ(allocator.live_bytes(), 1024u);
    allocator.free(a);
    EXPECT_EQ(allocator.live_bytes(), 24u);
    allocator.release_all();
    EXPECT_EQ(allocator.live_bytes(), 0u);
}

}  // namespace
}  // namespace hp::engine
