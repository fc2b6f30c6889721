// The knob manifest of forward/cpu/baseline: well-formed, its defaults are legal and equal the
// fallbacks in knobs.h, every constraint is also a static_assert in knobs.h, and the constraint
// evaluator accepts and rejects what it should.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "knob_manifest.h"

namespace hp::test {
namespace {

const std::string kBaselineDir = std::string(HOTPASS_SOURCE_DIR) + "/forward/cpu/baseline";

std::string read_text(const std::string &path) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
}

TEST(KnobManifest, IsWellFormed) {
    const KnobManifest manifest = load_knob_manifest(kBaselineDir + "/knobs.json");
    ASSERT_GE(manifest.knobs.size(), 10u);
    std::set<std::string> names, defines;
    for (const Knob &knob : manifest.knobs) {
        EXPECT_TRUE(names.insert(knob.name).second) << "duplicate knob " << knob.name;
        EXPECT_TRUE(defines.insert(knob.define).second) << "duplicate define " << knob.define;
        EXPECT_TRUE(knob.define.starts_with("HP_")) << knob.define;
        EXPECT_FALSE(knob.domain.empty()) << knob.name;
        EXPECT_FALSE(knob.changes.empty()) << knob.name << " does not say what it changes";
        EXPECT_NE(std::find(knob.domain.begin(), knob.domain.end(), knob.default_value), knob.domain.end())
            << knob.name << "'s default is outside its domain";
    }
    EXPECT_EQ(violated_constraint(manifest, default_knob_values(manifest)), std::nullopt);
}

TEST(KnobManifest, DefaultsMatchKnobsHeader) {
    const KnobManifest manifest = load_knob_manifest(kBaselineDir + "/knobs.json");
    const std::string header = read_text(kBaselineDir + "/knobs.h");
    for (const Knob &knob : manifest.knobs) {
        std::smatch match;
        const std::regex define("#define " + knob.define + " (-?[0-9]+)");
        ASSERT_TRUE(std::regex_search(header, match, define)) << knob.define << " has no fallback in knobs.h";
        EXPECT_EQ(std::stoll(match[1]), knob.default_value) << knob.define;
    }
    for (const auto &constraint : manifest.constraints) {
        EXPECT_NE(header.find("static_assert(" + constraint.expr + ","), std::string::npos)
            << "knobs.h lacks static_assert(" << constraint.expr << ", ...)";
    }
}

TEST(KnobManifest, EvaluatorFollowsCPrecedence) {
    const KnobValues values{{"A", 6}, {"B", 4}, {"C", 0}};
    auto eval = [&](const std::string &text) { return agents::evaluate_constraint(text, values); };
    auto value = [&](const std::string &text) {
        auto result = eval(text);
        return result.ok() ? *result : int64_t(-999);
    };
    EXPECT_EQ(value("A * B / 8"), 3);
    EXPECT_EQ(value("A + B * 2"), 14);
    EXPECT_EQ(value("(A + B) * 2"), 20);
    EXPECT_EQ(value("A % B == 2"), 1);
    EXPECT_EQ(value("A <= B || B < A && !C"), 1);
    EXPECT_EQ(value("A != 6"), 0);
    EXPECT_EQ(value("-A + 10 >= B"), 1);
    EXPECT_FALSE(eval("A / C").ok());
    EXPECT_FALSE(eval("A = B").ok());
    EXPECT_FALSE(eval("UNKNOWN > 1").ok());
}

TEST(KnobManifest, RejectsIllegalCombinations) {
    const KnobManifest manifest = load_knob_manifest(kBaselineDir + "/knobs.json");
    KnobValues values = default_knob_values(manifest);
    values["HP_GEMV_ROWS"] = 8;
    values["HP_GEMV_TOKENS"] = 4;
    EXPECT_NE(violated_constraint(manifest, values), std::nullopt);
    values["HP_GEMV_TOKENS"] = 2;
    EXPECT_EQ(violated_constraint(manifest, values), std::nullopt);
    values["HP_GEMM_MR"] = 12;
    values["HP_GEMM_NR"] = 48;
    EXPECT_NE(violated_constraint(manifest, values), std::nullopt);
    values = default_knob_values(manifest);
    values["HP_GEMV_ROWS"] = 3;  // outside the domain
    EXPECT_NE(violated_constraint(manifest, values), std::nullopt);
}

}  // namespace
}  // namespace hp::test
