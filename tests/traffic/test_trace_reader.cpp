#include <gtest/gtest.h>

#include <fstream>

#include "azure_writer.h"
#include "hotpass/traffic/trace_reader.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

struct ReadAll {
    std::vector<Request> requests;
    ReadStats stats;
    TraceFormat format{};
};

ReadAll read_all(const std::filesystem::path &path,
                 std::optional<TraceFormat> format = std::nullopt) {
    Result<std::unique_ptr<TraceReader>> reader = open_trace(path, format);
    EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error());
    ReadAll result;
    if (!reader.ok()) return result;
    Request request;
    for (;;) {
        Result<bool> got = (*reader)->next(request);
        EXPECT_TRUE(got.ok()) << (got.ok() ? "" : got.error());
        if (!got.ok() || !*got) break;
        result.requests.push_back(request);
    }
    result.stats = (*reader)->stats();
    result.format = (*reader)->format();
    return result;
}

// Row counts from the issue; `wc -l` agrees (Azure: header + rows, no final newline).
TEST(TrafficTraceReader, SharedTracesReadCompletelyWithoutBadRows) {
    const struct {
        const char *file;
        TraceFormat format;
        uint64_t rows;
    } cases[] = {{"azure_llm_2023_code.csv", TraceFormat::azure, 8819},
                 {"azure_llm_2023_conv.csv", TraceFormat::azure, 19366},
                 {"mooncake_conversation.jsonl", TraceFormat::mooncake, 12031},
                 {"mooncake_synthetic.jsonl", TraceFormat::mooncake, 3993}};
    for (const auto &c : cases) {
        const ReadAll all = read_all(testing::traces_dir() / c.file);
        EXPECT_EQ(all.format, c.format) << c.file;
        EXPECT_EQ(all.stats.rows_ok, c.rows) << c.file;
        EXPECT_EQ(all.stats.rows_bad, 0u) << c.file;
        ASSERT_FALSE(all.requests.empty());
        EXPECT_EQ(all.requests.front().arrival_s, 0.0);
    }
}

TEST(TrafficTraceReader, AzureFieldsAndSevenDigitTimestamps) {
    const ReadAll all = read_all(testing::traces_dir() / "azure_llm_2023_code.csv");
    ASSERT_GE(all.requests.size(), 2u);
    // 2023-11-16 18:17:03.9799600,4808,10 then 18:17:04.0319600,3180,8
    EXPECT_EQ(all.requests[0].input_tokens, 4808u);
    EXPECT_EQ(all.requests[0].output_tokens, 10u);
    EXPECT_NEAR(all.requests[1].arrival_s, 0.052, 1e-6);
    // The last row has no final newline: 2023-11-16 19:14:19.9280160,549,173
    EXPECT_EQ(all.requests.back().input_tokens, 549u);
    EXPECT_EQ(all.requests.back().output_tokens, 173u);
}

TEST(TrafficTraceReader, MooncakeHashesAndMilliseconds) {
    const ReadAll all = read_all(testing::traces_dir() / "mooncake_conversation.jsonl");
    ASSERT_FALSE(all.requests.empty());
    EXPECT_EQ(all.requests[0].input_tokens, 6758u);
    EXPECT_EQ(all.requests[0].prefix_hashes.size(), 14u);
    EXPECT_NEAR(all.requests.back().arrival_s, 3536.999, 1e-9);
}

TEST(TrafficTraceReader, AzureBadRowsAreCountedWithLineNumbers) {
    testing::TempDir dir;
    const auto file = dir.write("bad.csv",
                                "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                "2023-11-16 18:00:00.0000000,100,10\r\n"  // 2 ok
                                "2023-11-16 18:00:01.0000000,100\r\n"     // 3 missing field
                                "2023-11-16 18:00:02.0000000,-5,10\r\n"   // 4 negative length
                                "garbage\r\n"                             // 5 garbage
                                "2023-11-16 17:59:00.0000000,100,10\r\n"  // 6 backwards
                                "2023-13-16 18:00:03.0000000,100,10\r\n"  // 7 bad month
                                "2023-11-16 18:00:04.0000000,abc,10\r\n"  // 8 not a number
                                "\r\n"                                    // 9 blank
                                "2023-11-16 18:00:05.5000000,200,20");    // 10 ok
    const ReadAll all = read_all(file);
    EXPECT_EQ(all.stats.rows_ok, 2u);
    EXPECT_EQ(all.stats.rows_bad, 6u);
    EXPECT_EQ(all.stats.blank_lines, 1u);
    ASSERT_EQ(all.stats.first_bad.size(), 6u);
    const uint64_t lines[] = {3, 4, 5, 6, 7, 8};
    const char *reasons[] = {"expected 3 fields", "negative",  "expected 3 fields",
                             "backwards",         "timestamp", "not an integer"};
    for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(all.stats.first_bad[i].line, lines[i]);
        EXPECT_NE(all.stats.first_bad[i].reason.find(reasons[i]), std::string::npos)
            << all.stats.first_bad[i].reason;
    }
    EXPECT_NEAR(all.requests[1].arrival_s, 5.5, 1e-9);
}

TEST(TrafficTraceReader, StrictStopsAtTheFirstBadRowNamingIt) {
    testing::TempDir dir;
    const auto file = dir.write("bad.jsonl",
                                "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n"
                                "{\"timestamp\": 5, \"input_length\": 10}\n");
    ReaderOptions options;
    options.strict = true;
    Result<std::unique_ptr<TraceReader>> reader = open_trace(file, std::nullopt, options);
    ASSERT_TRUE(reader.ok());
    Request request;
    EXPECT_TRUE((*reader)->next(request).ok());
    Result<bool> second = (*reader)->next(request);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.error().find(":2: output_length is missing"), std::string::npos)
        << second.error();
}

TEST(TrafficTraceReader, MooncakeBadRows) {
    testing::TempDir dir;
    const auto file = dir.write(
        "bad.jsonl",
        "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": -1, \"hash_ids\": [1, "
        "2]}\n"
        "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 1000, \"input_length\": \"x\", \"output_length\": 5}\n"
        "{not json\n"
        "{\"timestamp\": 999, \"input_length\": 6, \"output_length\": 5}\n"
        "{\"timestamp\": 2500, \"input_length\": 6, \"output_length\": 5}\n");
    const ReadAll all = read_all(file);
    EXPECT_EQ(all.stats.rows_ok, 2u);
    EXPECT_EQ(all.stats.rows_bad, 5u);
    ASSERT_EQ(all.requests.size(), 2u);
    EXPECT_NEAR(all.requests[1].arrival_s, 1.5, 1e-12);
}

TEST(TrafficTraceReader, BurstGptRowsAndTotals) {
    testing::TempDir dir;
    const auto file =
        dir.write("burst.csv",
                  "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,18,490,Conversation log\n"
                  "45,ChatGPT,1087,0,1087,Conversation log\n"
                  "46,GPT-4,10,10,25,API log\n");
    const ReadAll all = read_all(file);
    EXPECT_EQ(all.format, TraceFormat::burstgpt);
    ASSERT_EQ(all.requests.size(), 2u);
    EXPECT_EQ(all.requests[1].arrival_s, 40.0);
    EXPECT_EQ(all.requests[1].output_tokens, 0u);
    ASSERT_EQ(all.stats.first_bad.size(), 1u);
    EXPECT_EQ(all.stats.first_bad[0].line, 4u);
}

TEST(TrafficTraceReader, RequestLogRoundTrip) {
    Request request;
    request.arrival_s = 1.25;
    request.input_tokens = 1000;
    request.output_tokens = 7;
    request.prefix_hashes = {1, 18446744073709551615ull};
    request.ttft_ms = 31.5;
    request.itl_ms = {9.5, 10};
    request.expert_tokens = {{1, 2, 3}, {4, 5, 6}};
    Result<Request> back = request_from_jsonl(request_to_jsonl(request));
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back->arrival_s, 1.25);
    EXPECT_EQ(back->input_tokens, 1000u);
    EXPECT_EQ(back->prefix_hashes, request.prefix_hashes);
    EXPECT_EQ(back->ttft_ms, 31.5);
    EXPECT_EQ(back->itl_ms, request.itl_ms);
    EXPECT_EQ(back->expert_tokens, request.expert_tokens);
    EXPECT_FALSE(request_from_jsonl(R"({"arrival_s": 1, "input_tokens": 10, "output_tokens": 1,
                                        "token_ids": [1, 2]})")
                     .ok());  // 2 ids for 10 tokens
    EXPECT_FALSE(request_from_jsonl(R"({"input_tokens": 10, "output_tokens": 1})").ok());
}

TEST(TrafficTraceReader, DetectionRejectsUnknownContent) {
    testing::TempDir dir;
    EXPECT_FALSE(detect_format(dir.write("x.csv", "a,b,c\n1,2,3\n")).ok());
    EXPECT_FALSE(detect_format(dir.write("y.jsonl", "{\"foo\": 1}\n")).ok());
    EXPECT_FALSE(detect_format(dir.write("z", "")).ok());
    EXPECT_EQ(*detect_format(dir.write(
                  "h.jsonl", "\n{\"arrival_s\":0,\"input_tokens\":1,\"output_tokens\":1}\n")),
              TraceFormat::request_log);
    // A given format overrides detection; a wrong one is an error, not a crash.
    Result<std::unique_ptr<TraceReader>> wrong =
        open_trace(testing::traces_dir() / "azure_llm_2023_code.csv", TraceFormat::burstgpt);
    ASSERT_TRUE(wrong.ok());
    Request request;
    EXPECT_FALSE((*wrong)->next(request).ok());
}

// Memory stays bounded: the reader's own accounting is the same for 20k and 200k rows.
TEST(TrafficTraceReader, MemoryDoesNotGrowWithRows) {
    testing::TempDir dir;
    size_t peak[2] = {0, 0};
    const uint64_t rows[2] = {20000, 200000};
    for (int run = 0; run < 2; ++run) {
        const auto file = dir.path() / "big.csv";
        testing::write_azure_trace(file, rows[run]);
        const ReadAll all = read_all(file);
        EXPECT_EQ(all.stats.rows_ok, rows[run]);
        peak[run] = all.stats.peak_buffer_bytes;
    }
    EXPECT_EQ(peak[0], peak[1]);
    EXPECT_LE(peak[1], 2 * LineReader::kBufferBytes);
}

}  // namespace
}  // namespace hp::traffic
