#include "hotpass/store/objects.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace hp::store {
namespace {
namespace fs = std::filesystem;

void write(const fs::path &path, const std::string &text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
}

TEST(ObjectStore, SourcesAreContentAddressed) {
    const fs::path root = fs::temp_directory_path() / ("hotpass-objects-" + std::to_string(getpid()));
    fs::remove_all(root);
    write(root / "a/forward.cpp", "int x;");
    write(root / "a/sub/k.h", "#define K 1");
    write(root / "a/candidate.json", "{\"notes\": \"metadata, not source\"}");
    write(root / "b/forward.cpp", "int x;");
    write(root / "b/sub/k.h", "#define K 1");
    ObjectStore objects(root / "store");
    auto a = objects.put_sources(root / "a");
    auto b = objects.put_sources(root / "b");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << "candidate.json is not part of a candidate's sources";
    EXPECT_TRUE(fs::exists(objects.sources(*a) / "sub/k.h"));
    EXPECT_FALSE(fs::exists(objects.sources(*a) / "candidate.json"));
    write(root / "b/sub/k.h", "#define K 2");
    EXPECT_NE(hash_source_dir(root / "b").value(), *a);
    EXPECT_NE(candidate_hash(*a, {{"HP_X", "1"}}), candidate_hash(*a, {{"HP_X", "2"}}));
    EXPECT_EQ(candidate_hash(*a, {{"HP_X", "1"}, {"HP_Y", "2"}}), candidate_hash(*a, {{"HP_Y", "2"}, {"HP_X", "1"}}));
    EXPECT_FALSE(hash_source_dir(root / "missing").ok());
    fs::remove_all(root);
}

}  // namespace
}  // namespace hp::store
