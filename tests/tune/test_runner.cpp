#include <gtest/gtest.h>

#include <random>

#include "hotpass/tune/evaluate.h"
#include "hotpass/tune/runner.h"

namespace hp::tune {
namespace {

using nlohmann::json;

TEST(ParseShapes, ReadsWhatShapesToJsonWrites) {
    const std::vector<Shape> shapes = default_shapes(false);
    auto parsed = parse_shapes(shapes_to_json(shapes));
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    ASSERT_EQ(parsed->size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_EQ((*parsed)[i].name, shapes[i].name);
        EXPECT_EQ((*parsed)[i].weight, shapes[i].weight);
        EXPECT_EQ((*parsed)[i].decode_batch, shapes[i].decode_batch);
        EXPECT_EQ((*parsed)[i].decode_kv, shapes[i].decode_kv);
        EXPECT_EQ((*parsed)[i].prefill, shapes[i].prefill);
    }
}

TEST(ParseShapes, DefaultsNameAndWeight) {
    auto parsed = parse_shapes(
        json::parse(R"({"shapes": [{"decode_batch": 4, "decode_kv": 256, "prefill": [32]}]})"));
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ((*parsed)[0].weight, 1.0);
    EXPECT_EQ((*parsed)[0].name, "decode 4x256 prefill [32]");
}

// A malformed workload is an error naming the field, never an exception (submit used to abort on
// `hotpass traffic workload`'s own files).
TEST(ParseShapes, MalformedWorkloadsAreErrors) {
    const std::pair<const char *, const char *> cases[] = {
        {R"([1, 2])", "expected {\"shapes\""},
        {R"({"shapes": {}})", "expected {\"shapes\""},
        {R"({"shapes": []})", "is empty"},
        {R"({"shapes": [3]})", "shapes[0]: not an object"},
        {R"({"shapes": [{"decode_batch": "4"}]})", "shapes[0].decode_batch: expected an integer"},
        {R"({"shapes": [{"decode_batch": -1}]})", "shapes[0].decode_batch: expected an integer"},
        {R"({"shapes": [{"decode_batch": 2.5}]})", "shapes[0].decode_batch: expected an integer"},
        {R"({"shapes": [{"decode": {"batch": 4, "kv_len": 8}}]})",
         "shapes[0]: neither decode_batch nor prefill"},
        {R"({"shapes": [{"prefill": [{"tokens": 8}]}]})",
         "shapes[0].prefill[0]: expected an integer"},
        {R"({"shapes": [{"prefill": 8}]})", "shapes[0].prefill: expected an array"},
        {R"({"shapes": [{"prefill": [0]}]})", "at least one token"},
        {R"({"shapes": [{"decode_batch": 1, "weight": 0}]})",
         "shapes[0].weight: expected a positive number"},
        {R"({"shapes": [{"decode_batch": 1, "weight": "1"}]})",
         "shapes[0].weight: expected a positive number"},
        {R"({"shapes": [{"decode_batch": 1, "name": 7}]})", "shapes[0].name: expected a string"},
        {R"({"shapes": [{"decode_batch": 1}, {"decode_kv": 8}]})", "shapes[1]: neither"},
    };
    for (const auto &[text, message] : cases) {
        auto parsed = parse_shapes(json::parse(text));
        ASSERT_FALSE(parsed.ok()) << text;
        EXPECT_NE(parsed.error().find(message), std::string::npos)
            << text << ": " << parsed.error();
    }
}

// The measure call's deadline covers the time the shapes ask for: five 130 s shapes are more than
// the 600 s floor (a correct candidate timed that long was called hung).
TEST(MeasureDeadline, GrowsWithTheShapesTimeBudgets) {
    EvaluateOptions options;
    options.shapes = default_shapes(/*fast_tier=*/false);
    EXPECT_EQ(measure_deadline(options), options.measure_deadline_seconds) << "short budgets keep the floor";
    options.shapes.resize(5, options.shapes.front());
    options.runner.target_seconds = 130;
    EXPECT_GT(measure_deadline(options), 5 * 130 + options.verify_deadline_seconds);
}

// Timed pairs under a drifting machine, as the executor returns them: sample i of each side ran
// next to the other. The runner analyses them as pairs, so a 3% win shows through a drift ten times
// its size; the last incumbent sample has no partner (a shape cut between the two halves of a pair).
TEST(Summarize, AnalysesTheTimedPairsAsPairs) {
    std::mt19937_64 rng(11);
    std::lognormal_distribution<double> drift(0.0, 0.3), own(0.0, 0.01);
    std::vector<double> incumbent, candidate;
    for (int i = 0; i < 30; ++i) {
        const double machine = drift(rng);
        incumbent.push_back(1.03 * machine * own(rng));
        candidate.push_back(machine * own(rng));
    }
    incumbent.push_back(100.0);  // unpaired: ignored
    const std::vector<Shape> shapes = {{"decode", 1.0, 1, 128, {}}};
    const json result = {{"shapes", json::array({{{"name", "decode"}, {"incumbent_ms", incumbent}, {"candidate_ms", candidate}}})}};
    RunnerOptions options;
    const Measurement m = summarize(result, shapes, options);
    ASSERT_EQ(m.shapes.size(), 1u);
    EXPECT_EQ(m.shapes[0].n_sample, 30);
    EXPECT_LT(m.shapes[0].p_value, 0.01);
    EXPECT_TRUE(m.shapes[0].significant);
    EXPECT_TRUE(m.significant);
    EXPECT_LT(m.speedup_ci.low, 1.03);
    EXPECT_GT(m.speedup_ci.high, 1.03);
    EXPECT_GT(m.speedup_ci.low, 1.0);
    // The same win under a 5% minimum effect (what --calibrate may set) is not significant.
    options.min_effect = 0.05;
    const Measurement strict = summarize(result, shapes, options);
    EXPECT_FALSE(strict.significant);
    EXPECT_FALSE(strict.shapes[0].significant);
}

}  // namespace
}  // namespace hp::tune
