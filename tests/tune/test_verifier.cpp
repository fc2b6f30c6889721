#include "hotpass/tune/verifier.h"

#include <gtest/gtest.h>

namespace hp::tune {
namespace {

using nlohmann::json;

json good_case() {
    return {{"n_seq", 2}, {"n_token", 9}, {"n_prefill_seq", 1}, {"plugin_error", ""}, {"canary_intact", true},
            {"inputs_intact", true}, {"other_kv_intact", true}, {"max_abs_delta", 1e-5}, {"max_abs_ref", 5.0},
            {"nan_rows", 0}, {"unwritten_rows", 0}, {"rows", 3}, {"kv_max_abs_delta", 1e-6}, {"kv_max_abs_ref", 2.0},
            {"deterministic", true}};
}

std::string code_with(const std::string &field, const json &value) {
    json c = good_case();
    c[field] = value;
    return judge_verification({{"cases", {good_case(), c}}}, Tolerance{}).code;
}

TEST(Verifier, EachCheckHasItsOwnCode) {
    EXPECT_EQ(judge_verification({{"cases", {good_case()}}, {"greedy", {{"ok", true}, {"steps", 8}}}}, Tolerance{}).code, "ok");
    EXPECT_EQ(code_with("max_abs_delta", 0.02), "wrong_output");  // 2e-3 x 5.0 = 0.01 allowed
    EXPECT_EQ(code_with("max_abs_delta", 0.009), "ok");
    EXPECT_EQ(code_with("unwritten_rows", 1), "unwritten_output");
    EXPECT_EQ(code_with("nan_rows", 1), "nan_output");
    EXPECT_EQ(code_with("kv_max_abs_delta", 0.1), "kv_mismatch");
    EXPECT_EQ(code_with("deterministic", false), "nondeterministic");
    EXPECT_EQ(code_with("canary_intact", false), "wrote_outside_outputs");
    EXPECT_EQ(code_with("other_kv_intact", false), "wrote_outside_outputs");
    EXPECT_EQ(code_with("inputs_intact", false), "wrote_inputs");
    EXPECT_EQ(code_with("plugin_error", "forward() failed"), "plugin_error");
    const Verdict greedy = judge_verification(
        {{"cases", {good_case()}}, {"greedy", {{"ok", false}, {"first_divergence", 3}, {"reference", {1, 2}}, {"candidate", {1, 3}}}}},
        Tolerance{});
    EXPECT_EQ(greedy.code, "greedy_divergence");
    EXPECT_NE(greedy.reason.find("step 3"), std::string::npos);
}

// A batch checked partly by the reference (a sample) and whole against the incumbent: the
// incumbent comparison allows twice the tolerance, and its failures name the incumbent.
TEST(Verifier, RowsOutsideTheReferenceSampleAreJudgedAgainstTheIncumbent) {
    json sampled = good_case();
    sampled["reference_sample"] = {{"n_seq", 1}, {"n_token", 40}, {"cut", true}, {"rows", 0}};
    sampled["incumbent"] = {{"max_abs_delta", 0.019}, {"max_abs_ref", 5.0}, {"kv_max_abs_delta", 0.007}, {"kv_max_abs_ref", 2.0}};
    EXPECT_EQ(judge_verification({{"cases", {sampled}}}, Tolerance{}).code, "ok");  // 2 x 2e-3 x 5.0 = 0.02 allowed
    json wrong = sampled;
    wrong["incumbent"]["max_abs_delta"] = 0.021;
    const Verdict logits = judge_verification({{"cases", {wrong}}}, Tolerance{});
    EXPECT_EQ(logits.code, "wrong_output");
    EXPECT_NE(logits.reason.find("verified incumbent"), std::string::npos) << logits.reason;
    EXPECT_NE(logits.reason.find("the reference ran 1 of its sequences (40 tokens, one chunk cut short)"), std::string::npos) << logits.reason;
    json kv = sampled;
    kv["incumbent"]["kv_max_abs_delta"] = 0.009;
    EXPECT_EQ(judge_verification({{"cases", {kv}}}, Tolerance{}).code, "kv_mismatch");
    // The reference's own comparison still applies at the plain tolerance.
    json reference = sampled;
    reference["max_abs_delta"] = 0.011;
    EXPECT_EQ(judge_verification({{"cases", {reference}}}, Tolerance{}).code, "wrong_output");
}

}  // namespace
}  // namespace hp::tune
