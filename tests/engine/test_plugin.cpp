#include "hotpass/engine/plugin.h"

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
