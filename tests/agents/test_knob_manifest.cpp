#include "hotpass/agents/knob_manifest.h"

#include <gtest/gtest.h>

namespace hp::agents {
namespace {

const char *kManifest = R"({
  "schema": "hotpass-knobs/1", "plugin": "test",
  "knobs": [
    {"name": "rows", "define": "HP_ROWS", "type": "int", "domain": [1, 2, 4, 8], "default": 1, "changes": ""},
    {"name": "tokens", "define": "HP_TOKENS", "type": "int", "domain": [1, 2, 4, 8], "default": 4, "changes": ""},
    {"name": "nr", "define": "HP_NR", "type": "int", "domain": [16, 24, 32], "default": 32, "changes": ""}
  ],
  "constraints": [
    {"expr": "HP_ROWS * HP_TOKENS <= 16", "why": "registers"},
    {"expr": "HP_NR % 16 == 0", "why": "whole vectors"}
  ]})";

TEST(KnobManifest, ParsesAndRejectsIllegalCombinations) {
    auto manifest = parse_knob_manifest(kManifest);
    ASSERT_TRUE(manifest.ok()) << manifest.error();
    EXPECT_EQ(manifest->knobs.size(), 3u);
    EXPECT_FALSE(knob_violation(*manifest, {}).has_value()) << "the defaults are legal";
    EXPECT_FALSE(knob_violation(*manifest, {{"HP_ROWS", 4}, {"HP_TOKENS", 4}}).has_value());
    auto registers = knob_violation(*manifest, {{"HP_ROWS", 8}, {"HP_TOKENS", 4}});
    ASSERT_TRUE(registers.has_value());
    EXPECT_NE(registers->find("registers"), std::string::npos) << *registers;
    EXPECT_TRUE(knob_violation(*manifest, {{"HP_NR", 24}}).has_value());
    EXPECT_TRUE(knob_violation(*manifest, {{"HP_ROWS", 3}}).has_value()) << "outside the domain";
    EXPECT_TRUE(knob_violation(*manifest, {{"HP_UNKNOWN", 1}}).has_value());
}

TEST(KnobManifest, ConstraintExpressionsFollowC) {
    const KnobValues v = {{"A", 7}, {"B", 2}, {"Z", 0}};
    EXPECT_EQ(evaluate_constraint("A / B", v).value(), 3);  // truncating
    EXPECT_EQ(evaluate_constraint("-A / B", v).value(), -3);
    EXPECT_EQ(evaluate_constraint("A % B + 1 * 2", v).value(), 3);
    EXPECT_EQ(evaluate_constraint("A > B && B >= 2 || Z", v).value(), 1);
    EXPECT_EQ(evaluate_constraint("!(A == 7) || Z != 0", v).value(), 0);
    EXPECT_EQ(evaluate_constraint("(A + B) * 2 <= 18", v).value(), 1);
    EXPECT_FALSE(evaluate_constraint("A / Z", v).ok()) << "division by zero";
    EXPECT_FALSE(evaluate_constraint("A +", v).ok());
    EXPECT_FALSE(evaluate_constraint("Q < 1", v).ok()) << "unknown name";
    EXPECT_FALSE(evaluate_constraint("(A", v).ok());
    // && and || short-circuit as in C: the side not evaluated may divide by zero.
    EXPECT_EQ(evaluate_constraint("Z == 0 || A % Z == 0", v).value(), 1);
    EXPECT_EQ(evaluate_constraint("Z != 0 && A / Z > 1", v).value(), 0);
    EXPECT_FALSE(evaluate_constraint("Z != 0 && Q", v).ok()) << "an unknown name is an error on either side";
    // Overflow is an error, never a trap or undefined behaviour.
    EXPECT_FALSE(evaluate_constraint("(0 - 9223372036854775807 - 1) / -1 != 0", v).ok());
    EXPECT_FALSE(evaluate_constraint("(0 - 9223372036854775807 - 1) % -1 == 0", v).ok());
    EXPECT_FALSE(evaluate_constraint("-(0 - 9223372036854775807 - 1)", v).ok());
    EXPECT_FALSE(evaluate_constraint("9223372036854775807 + 1", v).ok());
    EXPECT_FALSE(evaluate_constraint("4294967296 * 4294967296", v).ok());
    EXPECT_EQ(evaluate_constraint("9223372036854775807 - 1 > 0", v).value(), 1);
    const auto huge = evaluate_constraint("A < 99999999999999999999", v);
    ASSERT_FALSE(huge.ok());
    EXPECT_NE(huge.error().find("64 bits"), std::string::npos) << huge.error();
    // Nesting is bounded (a deep expression is refused, not a stack overflow).
    EXPECT_FALSE(evaluate_constraint(std::string(100000, '(') + "1" + std::string(100000, ')'), v).ok());
    EXPECT_FALSE(evaluate_constraint(std::string(100000, '-') + "1", v).ok());
    EXPECT_EQ(evaluate_constraint(std::string(50, '(') + "1" + std::string(50, ')'), v).value(), 1);
}

TEST(KnobManifest, TheInTreeBaselineManifestsLoadAndTheirDefaultsAreLegal) {
    for (const char *plugin : {"cpu", "cuda"}) {
        SCOPED_TRACE(plugin);
        auto manifest = load_knob_manifest(std::string(HOTPASS_SOURCE_DIR) + "/forward/" + plugin + "/baseline/knobs.json");
        ASSERT_TRUE(manifest.ok()) << manifest.error();
        EXPECT_GE(manifest->knobs.size(), 5u);
        EXPECT_FALSE(knob_violation(*manifest, default_knob_values(*manifest)).has_value());
    }
}

// A knob search over the CUDA baseline must not propose a persistent-step ring that cannot fit beside
// the attention scratch (knobs.h static_asserts the same bound).
TEST(KnobManifest, TheCudaManifestRejectsAnOversizedPersistentRing) {
    auto manifest = load_knob_manifest(std::string(HOTPASS_SOURCE_DIR) + "/forward/cuda/baseline/knobs.json");
    ASSERT_TRUE(manifest.ok()) << manifest.error();
    KnobValues values = default_knob_values(*manifest);
    values["HP_CUDA_PERSISTENT_STAGES"] = 12;
    values["HP_CUDA_PERSISTENT_STAGE_KB"] = 32;
    const auto violation = knob_violation(*manifest, values);
    ASSERT_TRUE(violation.has_value());
    EXPECT_NE(violation->find("persistent step"), std::string::npos) << *violation;
    values["HP_CUDA_PERSISTENT_STAGE_KB"] = 16;
    EXPECT_FALSE(knob_violation(*manifest, values).has_value());
}

// Nor a skinny-GEMM ring over the 227 KB a block may have (gemm_skinny.cuh static_asserts the
// block's shared memory; the ring decides it, the partial sums never exceed 128 KB): stages x
// (warps x 16 x max(tiles, 2) + 64 rows) x (64 x unroll, + 64 if unroll is even) bytes + 256.
TEST(KnobManifest, TheCudaManifestRejectsAnOversizedSkinnyRing) {
    auto manifest = load_knob_manifest(std::string(HOTPASS_SOURCE_DIR) + "/forward/cuda/baseline/knobs.json");
    ASSERT_TRUE(manifest.ok()) << manifest.error();
    KnobValues values = default_knob_values(*manifest);
    values["HP_CUDA_SKINNY_WARPS"] = 8;
    values["HP_CUDA_SKINNY_TILES"] = 2;
    values["HP_CUDA_SKINNY_UNROLL"] = 2;
    values["HP_CUDA_SKINNY_STAGES"] = 4;  // 4 x 320 x 192 + 256 = 246016 bytes
    const auto violation = knob_violation(*manifest, values);
    ASSERT_TRUE(violation.has_value());
    EXPECT_NE(violation->find("skinny GEMM"), std::string::npos) << *violation;
    values["HP_CUDA_SKINNY_STAGES"] = 2;  // 123136 bytes
    EXPECT_FALSE(knob_violation(*manifest, values).has_value());
    values["HP_CUDA_SKINNY_TILES"] = 1;  // SwiGLU still holds two tiles a warp: the same size
    values["HP_CUDA_SKINNY_STAGES"] = 6;  // 368896 bytes
    EXPECT_TRUE(knob_violation(*manifest, values).has_value());
}

TEST(KnobManifest, RejectsMalformedManifests) {
    EXPECT_FALSE(parse_knob_manifest("[]").ok());
    EXPECT_FALSE(parse_knob_manifest(R"({"schema": "other/1", "knobs": []})").ok());
    EXPECT_FALSE(parse_knob_manifest(R"({"schema": "hotpass-knobs/1", "knobs": [{"name": "x"}]})").ok());
    // Wrong types are errors, not exceptions.
    EXPECT_FALSE(parse_knob_manifest(R"({"schema": 1, "knobs": []})").ok());
    EXPECT_FALSE(parse_knob_manifest(R"({"schema": "hotpass-knobs/1", "plugin": 3, "knobs": []})").ok());
    // Checked at load: unique defines, defaults in their domains, constraints that parse and hold.
    const std::string knob_a = R"({"name": "a", "define": "A", "domain": [1, 2], "default": 1})";
    const auto manifest = [&](const std::string &knobs, const std::string &constraints) {
        return parse_knob_manifest(R"({"schema": "hotpass-knobs/1", "knobs": [)" + knobs + R"(], "constraints": [)" + constraints + "]}");
    };
    EXPECT_TRUE(manifest(knob_a, R"({"expr": "A < 2"})").ok());
    EXPECT_FALSE(manifest(knob_a + ", " + knob_a, "").ok()) << "A defined twice";
    EXPECT_FALSE(manifest(R"({"name": "a", "define": "A", "domain": [1, 2], "default": 3})", "").ok()) << "default outside the domain";
    EXPECT_FALSE(manifest(knob_a, R"({"expr": "A < B"})").ok()) << "unknown name";
    EXPECT_FALSE(manifest(knob_a, R"({"expr": "A > 1"})").ok()) << "false at the defaults";
    EXPECT_FALSE(manifest(knob_a, R"({"expr": "A < 99999999999999999999"})").ok());
}

}  // namespace
}  // namespace hp::agents
