#include "hotpass/campaign/workload_shapes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>

#include "hotpass/core/mapped_file.h"
#include "hotpass/traffic/workload_json.h"

namespace hp::campaign {
namespace {

int kv_tokens(const tune::Shape &shape) {
    return shape.decode_batch * (shape.decode_kv + 1) + std::accumulate(shape.prefill.begin(), shape.prefill.end(), 0);
}

TEST(WorkloadShapes, ScalesTrafficShapesToTheExecutorsKvCache) {
    traffic::Workload workload;
    traffic::WorkloadShape big;
    big.weight = 0.6;
    big.shape.decode_kv_len.assign(200, 3000);  // 200 sequences of 3000 tokens: far past 8192
    traffic::WorkloadShape mixed;
    mixed.weight = 0.3;
    mixed.shape.decode_kv_len = {100, 300};
    mixed.shape.prefill = {{2000, 0}};
    traffic::WorkloadShape small;
    small.weight = 0.1;
    small.shape.decode_kv_len = {64};
    workload.shapes = {big, mixed, small};
    const ShapeLimits limits;
    const auto shapes = shapes_from_workload(workload, limits);
    ASSERT_EQ(shapes.size(), 3u);
    double total = 0;
    for (const auto &shape : shapes) {
        EXPECT_LE(kv_tokens(shape), limits.max_kv_tokens) << shape.name;
        EXPECT_LE(shape.decode_batch, limits.max_decode_batch);
        total += shape.weight;
    }
    EXPECT_NEAR(total, 1.0, 1e-9);
    EXPECT_EQ(shapes[0].decode_batch, limits.max_decode_batch);
    EXPECT_EQ(shapes[1].decode_kv, 200) << "decode_kv is the mean KV length";
    EXPECT_EQ(shapes[1].prefill, std::vector<int>{limits.max_prefill_tokens});
    EXPECT_EQ(shapes[2].decode_batch, 1);
    EXPECT_EQ(shapes[2].decode_kv, 64);
}

TEST(WorkloadShapes, MergesShapesThatScaleToTheSameOne) {
    traffic::Workload workload;
    for (int i = 0; i < 2; ++i) {
        traffic::WorkloadShape shape;
        shape.weight = 0.5;
        shape.shape.decode_kv_len.assign(100 + i, 5000);  // both become 32 sequences at the KV cap
        workload.shapes.push_back(shape);
    }
    const auto shapes = shapes_from_workload(workload);
    ASSERT_EQ(shapes.size(), 1u);
    EXPECT_DOUBLE_EQ(shapes[0].weight, 1.0);
}

TEST(WorkloadShapes, TheDefaultChatTrafficGivesATwoTierWorkload) {
    auto traffic = load_campaign_traffic("chat");
    ASSERT_TRUE(traffic.ok()) << traffic.error();
    EXPECT_GE(traffic->fast_shapes.size(), 1u);
    EXPECT_LE(traffic->fast_shapes.size(), 4u);
    EXPECT_GE(traffic->slow_shapes.size(), traffic->fast_shapes.size());
    for (const auto &shape : traffic->slow_shapes) EXPECT_LE(kv_tokens(shape), ShapeLimits{}.max_kv_tokens) << shape.name;
    EXPECT_FALSE(load_campaign_traffic("no-such-preset").ok());
}

// `hotpass submit --workload` takes the executor's own shapes and the traffic command's files
// alike (it used to abort on a `hotpass traffic workload` file).
struct SubmitShapes : testing::Test {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("hotpass-shapes-" + std::to_string(getpid()));
    void SetUp() override { std::filesystem::create_directories(dir); }
    void TearDown() override { std::filesystem::remove_all(dir); }
};

TEST_F(SubmitShapes, TakesExecutorShapesAndTrafficWorkloads) {
    auto chat = load_campaign_traffic("chat");
    ASSERT_TRUE(chat.ok()) << chat.error();

    ASSERT_TRUE(write_file_atomic(dir / "workload.json", traffic::workload_to_json(chat->slow)).ok());
    auto fast = load_executor_shapes((dir / "workload.json").string(), true);
    auto slow = load_executor_shapes((dir / "workload.json").string(), false);
    ASSERT_TRUE(fast.ok()) << fast.error();
    ASSERT_TRUE(slow.ok()) << slow.error();
    EXPECT_EQ(slow->size(), chat->slow_shapes.size());
    EXPECT_LE(fast->size(), size_t(traffic::kMaxShapesFast));

    ASSERT_TRUE(write_file_atomic(dir / "shapes.json", tune::shapes_to_json(chat->fast_shapes).dump()).ok());
    auto own = load_executor_shapes((dir / "shapes.json").string(), true);
    ASSERT_TRUE(own.ok()) << own.error();
    ASSERT_EQ(own->size(), chat->fast_shapes.size());
    EXPECT_EQ((*own)[0].name, chat->fast_shapes[0].name);

    ASSERT_TRUE(write_file_atomic(dir / "bad.json", R"({"shapes": [{"decode_batch": "4"}]})").ok());
    auto bad = load_executor_shapes((dir / "bad.json").string(), true);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("decode_batch"), std::string::npos) << bad.error();
    EXPECT_FALSE(load_executor_shapes((dir / "missing.json").string(), true).ok());
}

}  // namespace
}  // namespace hp::campaign
