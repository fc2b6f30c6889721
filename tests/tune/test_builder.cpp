#include "hotpass/tune/builder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace hp::tune {
namespace {

namespace fs = std::filesystem;

struct BuilderTest : testing::Test {
    fs::path root = fs::temp_directory_path() / fmt::format("hotpass-builder-{}", getpid());
    BuildOptions options;
    void SetUp() override {
        fs::remove_all(root);
        options.include_dir = HOTPASS_SOURCE_DIR "/include";
        options.cache_dir = root / "cache";
        options.flags = {"-std=c++20", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-gnu-unique"};
    }
    void TearDown() override { fs::remove_all(root); }
    Candidate write(const std::string &name, const std::string &source, const std::string &metadata = "") {
        const fs::path dir = root / name;
        fs::create_directories(dir);
        std::ofstream(dir / "forward.cpp") << source;
        if (!metadata.empty()) std::ofstream(dir / "candidate.json") << metadata;
        auto candidate = load_candidate(dir);
        HP_CHECK(candidate.ok(), "{}", candidate.error());
        return *candidate;
    }
};

const char *kMinimal = R"(#include <hotpass/forward_abi.h>
static int create(const hp_model *, const hp_services *, void **state) { *state = nullptr; return HP_OK; }
static int forward(void *, const hp_batch *, hp_output *) { return KNOB_RC; }
static void destroy(void *) {}
static const hp_forward_vtable table = {HP_FORWARD_ABI_VERSION, "minimal", create, forward, destroy};
extern "C" HP_EXPORT const hp_forward_vtable *hp_forward_entry(void) { return &table; }
)";

TEST_F(BuilderTest, BuildsCachesAndKeysOnKnobs) {
    const Candidate candidate = write("a", kMinimal, R"({"agent": "test", "knobs": {"KNOB_RC": 0}})");
    EXPECT_EQ(candidate.agent, "test");
    const BuildOutcome first = build_candidate(candidate, options);
    ASSERT_TRUE(first.ok) << first.failure << ": " << first.diagnostics;
    EXPECT_FALSE(first.artifact.cached);
    EXPECT_TRUE(fs::exists(first.artifact.path));
    EXPECT_NE(first.artifact.path.filename().string().find(first.artifact.key.substr(0, 16)), std::string::npos);
    const BuildOutcome second = build_candidate(candidate, options);
    ASSERT_TRUE(second.ok);
    EXPECT_TRUE(second.artifact.cached);
    EXPECT_EQ(second.artifact.path, first.artifact.path);
    auto symbols = exported_symbols(first.artifact.path);
    ASSERT_TRUE(symbols.ok());
    EXPECT_EQ(*symbols, std::vector<std::string>{"hp_forward_entry"});

    const Candidate other = write("b", kMinimal, R"({"knobs": {"KNOB_RC": 1}})");
    const BuildOutcome third = build_candidate(other, options);
    ASSERT_TRUE(third.ok) << third.diagnostics;
    EXPECT_NE(third.artifact.key, first.artifact.key);
}

// A header behind a symbolically linked folder is part of the key: editing it builds anew (the
// cached artifact of the old header was reused before, so a changed candidate kept old code).
TEST_F(BuilderTest, FilesBehindALinkedFolderAreKeyed) {
    fs::create_directories(root / "shared");
    std::ofstream(root / "shared" / "rc.h") << "#define KNOB_RC 0\n";
    std::ofstream(root / "shared" / "selftest.cpp") << "#error not part of the candidate's build\n";  // keyed, not compiled
    const Candidate candidate = write("linked", std::string("#include \"lib/rc.h\"\n") + kMinimal);
    fs::create_directory_symlink(root / "shared", root / "linked" / "lib");
    const BuildOutcome first = build_candidate(candidate, options);
    ASSERT_TRUE(first.ok) << first.failure << ": " << first.diagnostics;
    std::ofstream(root / "shared" / "rc.h") << "#define KNOB_RC 1\n";
    const BuildOutcome second = build_candidate(candidate, options);
    ASSERT_TRUE(second.ok) << second.failure << ": " << second.diagnostics;
    EXPECT_FALSE(second.artifact.cached);
    EXPECT_NE(second.artifact.key, first.artifact.key);
    // A folder that is mostly data is refused before anything is read into the key.
    std::ofstream(root / "linked" / "weights.bin").close();
    fs::resize_file(root / "linked" / "weights.bin", uintmax_t(65) << 20);
    const BuildOutcome large = build_candidate(candidate, options);
    EXPECT_FALSE(large.ok);
    EXPECT_EQ(large.failure, "candidate too large") << large.diagnostics;
    fs::remove(root / "linked" / "weights.bin");
    // A link cycle is an error, not an endless walk.
    fs::create_directory_symlink(root / "linked", root / "shared" / "loop");
    const BuildOutcome looped = build_candidate(candidate, options);
    EXPECT_FALSE(looped.ok);
    EXPECT_EQ(looped.failure, "unreadable source") << looped.diagnostics;
}

TEST_F(BuilderTest, FailuresComeBackAsData) {
    const BuildOutcome broken = build_candidate(write("broken", "int f( {"), options);
    EXPECT_FALSE(broken.ok);
    EXPECT_EQ(broken.failure, "compile error");
    EXPECT_NE(broken.diagnostics.find("error"), std::string::npos);

    const BuildOutcome missing_knob = build_candidate(write("noknob", kMinimal), options);
    EXPECT_FALSE(missing_knob.ok);
    EXPECT_NE(missing_knob.diagnostics.find("KNOB_RC"), std::string::npos);

    std::string extra = std::string(kMinimal) + "extern \"C\" HP_EXPORT int another(void) { return 1; }\n";
    const BuildOutcome exports = build_candidate(write("extra", extra, R"({"knobs": {"KNOB_RC": 0}})"), options);
    EXPECT_FALSE(exports.ok);
    EXPECT_EQ(exports.failure, "bad exports");
    EXPECT_NE(exports.diagnostics.find("another"), std::string::npos);

    options.timeout_seconds = 0.001;
    const BuildOutcome slow = build_candidate(write("slow", kMinimal, R"({"knobs": {"KNOB_RC": 2}})"), options);
    EXPECT_FALSE(slow.ok);
    EXPECT_NE(slow.failure.find("timed out"), std::string::npos);

    auto bad = load_candidate(root / "nonexistent");
    EXPECT_FALSE(bad.ok());
    fs::create_directories(root / "badjson");
    std::ofstream(root / "badjson" / "candidate.json") << R"({"knobs": {"-Dx": 1}})";
    auto bad_knob = load_candidate(root / "badjson");
    ASSERT_FALSE(bad_knob.ok());
    EXPECT_NE(bad_knob.error().find("must be an identifier"), std::string::npos);

    // Wrong types and broken JSON are errors that say so, not exceptions.
    const std::pair<const char *, const char *> malformed[] = {
        {R"({"notes": 5})", "'notes' must be a string"},
        {R"({"parent": {"hash": "x"}})", "'parent' must be a string"},
        {R"({"agent": [1]})", "'agent' must be a string"},
        {R"({"notes": "x",)", "not valid JSON"},
        {R"([1, 2])", "expected an object"},
    };
    for (const auto &[text, message] : malformed) {
        std::ofstream(root / "badjson" / "candidate.json", std::ios::trunc) << text;
        auto loaded = load_candidate(root / "badjson");
        ASSERT_FALSE(loaded.ok()) << text;
        EXPECT_NE(loaded.error().find(message), std::string::npos) << text << ": " << loaded.error();
    }
    std::ofstream(root / "badjson" / "candidate.json", std::ios::trunc) << R"({"notes": null, "parent": "abc"})";
    auto null_notes = load_candidate(root / "badjson");
    ASSERT_TRUE(null_notes.ok()) << null_notes.error();
    EXPECT_EQ(null_notes->parent, "abc");
    EXPECT_EQ(null_notes->notes, "");
}

}  // namespace
}  // namespace hp::tune
