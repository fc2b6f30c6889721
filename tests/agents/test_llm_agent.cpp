// The llm agent against a local OpenAI-compatible server (httplib on 127.0.0.1, an ephemeral port)
// that replays recorded replies: a valid edit, garbage, a path escaping the directory, a 429 with
// Retry-After, a reply slower than the timeout; and an unreachable endpoint. Every exchange must
// land in the store, and the verdict of one turn must be in the next turn's request.
#include "hotpass/agents/llm_agent.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "fake_submissions.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/store/store.h"

namespace hp::agents {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string completion(const std::string &content) {
    return json{{"id", "chatcmpl-1"},
                {"object", "chat.completion"},
                {"choices", json::array({{{"index", 0}, {"message", {{"role", "assistant"}, {"content", content}}}, {"finish_reason", "stop"}}})},
                {"usage", {{"prompt_tokens", 1200}, {"completion_tokens", 80}}}}
        .dump();
}

struct Reply {
    int status = 200;
    std::string body;
    std::string retry_after;
    int delay_ms = 0;
    int dribble_ms = 0;  // > 0: the body one byte at a time, this long apart (chunked)
};

// Serves POST /v1/chat/completions from a queue of recorded replies and keeps what it was sent.
class ReplayServer {
public:
    ReplayServer() {
        server_.Post("/v1/chat/completions", [this](const httplib::Request &request, httplib::Response &response) {
            Reply reply;
            {
                std::lock_guard lock(mutex_);
                requests.push_back(request.body);
                authorizations.push_back(request.get_header_value("Authorization"));
                if (!replies.empty()) {
                    reply = replies.front();
                    replies.pop_front();
                }
            }
            if (reply.delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(reply.delay_ms));
            response.status = reply.status;
            if (!reply.retry_after.empty()) response.set_header("Retry-After", reply.retry_after);
            if (reply.dribble_ms > 0) {
                response.set_chunked_content_provider("application/json", [reply](size_t offset, httplib::DataSink &sink) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(reply.dribble_ms));
                    if (offset >= reply.body.size()) {
                        sink.done();
                        return true;
                    }
                    return sink.write(reply.body.data() + offset, 1);
                });
                return;
            }
            response.set_content(reply.body, "application/json");
        });
        port_ = server_.bind_to_any_port("127.0.0.1");
        thread_ = std::thread([this] { server_.listen_after_bind(); });
        while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ~ReplayServer() {
        server_.stop();
        thread_.join();
    }
    std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

    std::deque<Reply> replies;
    std::vector<std::string> requests, authorizations;

private:
    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
    std::mutex mutex_;
};

class LlmAgentTest : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("hotpass-llm-agent-" + std::to_string(getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_ / "base");
        std::ofstream(root_ / "base" / "forward.cpp") << "int forward() { return 1; }\n";
        std::ofstream(root_ / "base" / "knobs.h") << "#define HP_TILE 4\n";
        store_ = store::Store::open(root_ / "store.db").value();
        store::CampaignRecord campaign;
        campaign.model = "preset:tiny-llama";
        campaign.tiers = "fast,slow";
        campaign.budget = json::object();
        campaign.options = json::object();
        campaign.incumbent = "baseline";
        campaign.incumbent_artifact = "baseline";
        campaign_id_ = store_->add_campaign(campaign).value();
    }
    void TearDown() override {
        store_.reset();
        fs::remove_all(root_);
    }
    LlmAgent make(const std::string &base_url, int max_failures = 10) {
        LlmConfig config;
        config.base_url = base_url;
        config.model = "test-model";
        config.api_key = "test-key";
        config.timeout_seconds = 1;
        config.max_failures = max_failures;
        return LlmAgent("llm-1", config, root_ / "base", root_ / "workspace", store_.get(), campaign_id_);
    }

    fs::path root_;
    std::unique_ptr<store::Store> store_;
    int64_t campaign_id_ = 0;
};

TEST_F(LlmAgentTest, AppliesAnEditFeedsTheVerdictBackAndRecordsEveryFailureAsData) {
    ReplayServer server;
    server.replies = {
        {200, completion("Unrolled the loop.\n```cpp\n// file: forward.cpp\nint forward() { return 2; }\n```\n"), "", 0},
        {200, "<html>502 Bad Gateway</html>", "", 0},
        {200, completion("```cpp\n// file: ../escape.cpp\nint x;\n```\n"), "", 0},
        {429, R"({"error": {"message": "rate limited"}})", "7", 0},
        {200, completion("too late"), "", 2500},
    };
    FakeSubmissions submissions;
    submissions.verdicts = {{"build_failed", "compile error: forward.cpp:1:22: error: expected ';' before '}' token", 0}};
    AgentContext context;
    context.submissions = &submissions;
    auto agent = make(server.base_url());

    const ProposeOutcome edit = agent.propose(context);
    EXPECT_EQ(edit.n_submitted, 1) << edit.reason;
    EXPECT_FALSE(edit.exhausted);
    ASSERT_EQ(submissions.proposals.size(), 1u);
    const fs::path candidate = submissions.proposals[0].source_dir;
    EXPECT_EQ(read_text_file(candidate / "forward.cpp").value(), "int forward() { return 2; }\n");
    EXPECT_EQ(read_text_file(candidate / "knobs.h").value(), "#define HP_TILE 4\n") << "files it did not return are kept";
    EXPECT_NE(submissions.proposals[0].notes.find("Unrolled the loop."), std::string::npos);

    const ProposeOutcome garbage = agent.propose(context);
    EXPECT_EQ(garbage.n_submitted, 0);
    EXPECT_FALSE(garbage.exhausted);
    EXPECT_NE(garbage.reason.find("garbage"), std::string::npos) << garbage.reason;

    const ProposeOutcome escape = agent.propose(context);
    EXPECT_NE(escape.reason.find("leaves the directory"), std::string::npos) << escape.reason;
    EXPECT_FALSE(fs::exists(root_ / "escape.cpp"));
    EXPECT_FALSE(fs::exists(root_ / "workspace" / "escape.cpp"));

    const ProposeOutcome limited = agent.propose(context);
    EXPECT_DOUBLE_EQ(limited.retry_after_seconds, 7);
    EXPECT_NE(limited.reason.find("429"), std::string::npos) << limited.reason;

    const ProposeOutcome slow = agent.propose(context);
    EXPECT_NE(slow.reason.find("slow"), std::string::npos) << slow.reason;
    EXPECT_EQ(submissions.proposals.size(), 1u) << "nothing but the valid edit was submitted";

    // The build error of turn 1 is fed back in turn 2; the sources are in every request.
    ASSERT_EQ(server.requests.size(), 5u);
    const json first = json::parse(server.requests[0]);
    EXPECT_EQ(first["model"], "test-model");
    EXPECT_GT(first["max_tokens"].get<int>(), 0);
    EXPECT_NE(first["messages"][1]["content"].get<std::string>().find("int forward() { return 1; }"), std::string::npos);
    const std::string second = json::parse(server.requests[1])["messages"][1]["content"].get<std::string>();
    EXPECT_NE(second.find("expected ';' before '}' token"), std::string::npos);
    EXPECT_NE(second.find("build_failed"), std::string::npos);
    const std::string fourth = json::parse(server.requests[3])["messages"][1]["content"].get<std::string>();
    EXPECT_NE(fourth.find("could not be used: refused file path"), std::string::npos) << "the refused reply's problem is told to the model";
    EXPECT_EQ(server.authorizations[0], "Bearer test-key");

    const auto exchanges = store_->exchanges(campaign_id_).value();
    ASSERT_EQ(exchanges.size(), 5u);
    const std::vector<int> statuses = {200, 200, 200, 429, 0};
    for (size_t i = 0; i < exchanges.size(); ++i) {
        EXPECT_EQ(exchanges[i].http_status, statuses[i]) << "exchange " << i;
        EXPECT_EQ(exchanges[i].turn, int(i) + 1);
        EXPECT_EQ(exchanges[i].agent, "llm-1");
        EXPECT_EQ(exchanges[i].request.find("test-key"), std::string::npos) << "no credentials in the store";
        EXPECT_GE(exchanges[i].latency_s, 0);
    }
    EXPECT_TRUE(exchanges[0].error.empty());
    EXPECT_EQ(exchanges[0].prompt_tokens, 1200);
    EXPECT_EQ(exchanges[0].completion_tokens, 80);
    EXPECT_NE(exchanges[1].error.find("garbage"), std::string::npos);
    EXPECT_NE(exchanges[3].error.find("rate limited"), std::string::npos);
    EXPECT_NE(exchanges[4].error.find("slow"), std::string::npos);
}

// Knobs passed in a candidate.json of the reply, as the rules sent to the model allow, reach the
// proposal (they were dropped, so the campaign timed an unchanged copy of the baseline).
TEST_F(LlmAgentTest, KnobsInTheRepliesCandidateJsonAreProposed) {
    ReplayServer server;
    server.replies = {
        {200, completion("Bigger tiles.\n```json\n// file: candidate.json\n{\"knobs\": {\"HP_TILE\": 8}, \"notes\": \"tile 8\"}\n```\n"), "", 0},
        {200, completion("```json\n// file: candidate.json\n[1, 2]\n```\n"), "", 0},
    };
    FakeSubmissions submissions;
    AgentContext context;
    context.submissions = &submissions;
    auto agent = make(server.base_url());
    const ProposeOutcome tuned = agent.propose(context);
    ASSERT_EQ(submissions.proposals.size(), 1u) << tuned.reason;
    EXPECT_EQ(submissions.proposals[0].knobs, (Knobs{{"HP_TILE", "8"}}));
    EXPECT_EQ(submissions.proposals[0].notes, "tile 8");
    const ProposeOutcome broken = agent.propose(context);
    EXPECT_NE(broken.reason.find("candidate.json: expected an object"), std::string::npos) << broken.reason;
    EXPECT_EQ(submissions.proposals.size(), 1u);
}

// A candidate.json is not carried into the next turn's copy of the sources, so the knobs of a correct
// candidate used to be dropped by the next reply that did not repeat them: the agent then built on
// sources whose timing it had never seen. They carry over now, and a reply can still change them.
TEST_F(LlmAgentTest, TheKnobsOfItsCurrentSourcesCarryOver) {
    ReplayServer server;
    server.replies = {
        {200, completion("```json\n// file: candidate.json\n{\"knobs\": {\"HP_TILE\": 8, \"HP_UNROLL\": 2}}\n```\n"), "", 0},
        {200, completion("```cpp\n// file: forward.cpp\nint forward() { return 2; }\n```\n"), "", 0},
        {200, completion("```json\n// file: candidate.json\n{\"knobs\": {\"HP_TILE\": 4}}\n```\n"), "", 0},
        {200, completion("```cpp\n// file: forward.cpp\nint forward() { return 3; }\n```\n"), "", 0},
    };
    FakeSubmissions submissions;
    submissions.verdicts = {{"faster", "1.05x", 1.05}, {"not_faster", "correct; 1.00x", 1.0}, {"rejected", "wrong logits", 0}};
    AgentContext context;
    context.submissions = &submissions;
    auto agent = make(server.base_url());
    agent.propose(context);
    const std::string user = agent.messages(context)[1]["content"].get<std::string>();
    EXPECT_NE(user.find("built with the knobs HP_TILE=8 HP_UNROLL=2"), std::string::npos) << user;
    agent.propose(context);
    agent.propose(context);
    agent.propose(context);
    ASSERT_EQ(submissions.proposals.size(), 4u);
    EXPECT_EQ(submissions.proposals[1].knobs, (Knobs{{"HP_TILE", "8"}, {"HP_UNROLL", "2"}}));
    EXPECT_EQ(submissions.proposals[2].knobs, (Knobs{{"HP_TILE", "4"}, {"HP_UNROLL", "2"}}));
    // The third was rejected: the fourth builds on the second's sources and knobs.
    EXPECT_EQ(submissions.proposals[3].knobs, (Knobs{{"HP_TILE", "8"}, {"HP_UNROLL", "2"}}));
}

// The timeout bounds the whole reply, not each read: an endpoint that sends a byte every 200 ms
// (each read well within the 1 s timeout) is cut off; so is a reply past the size cap.
TEST_F(LlmAgentTest, ADribblingOrHugeReplyIsCutOff) {
    ReplayServer server;
    server.replies = {
        {200, completion("slow and steady"), "", 0, 200},
        {200, std::string(17 << 20, ' '), "", 0},
    };
    FakeSubmissions submissions;
    AgentContext context;
    context.submissions = &submissions;
    auto agent = make(server.base_url());
    const ProposeOutcome dribbled = agent.propose(context);
    EXPECT_NE(dribbled.reason.find("no complete reply within 1 s"), std::string::npos) << dribbled.reason;
    const ProposeOutcome huge = agent.propose(context);
    EXPECT_NE(huge.reason.find("longer than 16 MB"), std::string::npos) << huge.reason;
    EXPECT_TRUE(submissions.proposals.empty());
    const auto exchanges = store_->exchanges(campaign_id_).value();
    ASSERT_EQ(exchanges.size(), 2u);
    EXPECT_NE(exchanges[0].error.find("no complete reply"), std::string::npos);
}

TEST_F(LlmAgentTest, AnUnreachableEndpointIsRecordedAndRetiresTheAgentAfterMaxFailures) {
    // Port 1 on the loopback: nothing listens there, the connection is refused.
    auto agent = make("http://127.0.0.1:1/v1", 2);
    AgentContext context;
    const ProposeOutcome first = agent.propose(context);
    EXPECT_FALSE(first.exhausted);
    EXPECT_NE(first.reason.find("unreachable"), std::string::npos) << first.reason;
    const ProposeOutcome second = agent.propose(context);
    EXPECT_TRUE(second.exhausted) << second.reason;
    const auto exchanges = store_->exchanges(campaign_id_, "llm-1").value();
    ASSERT_EQ(exchanges.size(), 2u);
    EXPECT_EQ(exchanges[0].http_status, 0);
    EXPECT_NE(exchanges[0].error.find("unreachable"), std::string::npos);
}

TEST_F(LlmAgentTest, WithoutACampaignItReturnsTheProposalAndStopsAtItsTurnLimit) {
    ReplayServer server;
    server.replies = {{200, completion("```\n// file: sub/new.h\n#pragma once\n```\n"), "", 0}};
    LlmConfig config;
    config.base_url = server.base_url();
    config.model = "m";
    config.max_turns = 1;
    LlmAgent agent("llm-2", config, root_ / "base", root_ / "workspace", nullptr, 0);
    AgentContext context;
    const ProposeOutcome outcome = agent.propose(context);
    ASSERT_TRUE(outcome.proposal) << outcome.reason;
    EXPECT_EQ(read_text_file(outcome.proposal->source_dir / "sub" / "new.h").value(), "#pragma once\n");
    EXPECT_TRUE(fs::exists(outcome.proposal->source_dir / "forward.cpp"));
    EXPECT_TRUE(server.authorizations[0].empty()) << "no key configured: no Authorization header";
    EXPECT_TRUE(agent.propose(context).exhausted);
}

TEST(LlmReplyFormat, ParsesFileBlocksAndRefusesWhatCannotBeApplied) {
    auto two = parse_reply_files("Notes first.\n```cpp\n// file: a.cpp\nint a;\n```\nmiddle\n```\n// file: dir/b.h\n```\n");
    ASSERT_TRUE(two.ok()) << two.error();
    EXPECT_EQ(two->files.size(), 2u);
    EXPECT_EQ(two->files.at("a.cpp"), "int a;\n");
    EXPECT_EQ(two->files.at("dir/b.h"), "");
    EXPECT_NE(two->notes.find("Notes first."), std::string::npos);
    EXPECT_NE(two->notes.find("middle"), std::string::npos);
    // A code block that is not a file is explanation, not an edit.
    auto skipped = parse_reply_files("```sh\nmake\n```\n```cpp\n// file: ./x.cpp\nint x;\n```");
    ASSERT_TRUE(skipped.ok()) << skipped.error();
    EXPECT_EQ(skipped->files.count("x.cpp"), 1u);

    EXPECT_FALSE(parse_reply_files("I would unroll the loop.").ok());
    EXPECT_FALSE(parse_reply_files("```cpp\n// file: a.cpp\nint a;\n").ok()) << "unterminated (max_tokens)";
    EXPECT_FALSE(parse_reply_files("```\n// file: /etc/passwd\nx\n```").ok());
    EXPECT_FALSE(parse_reply_files("```\n// file: ../up.cpp\nx\n```").ok());
    EXPECT_FALSE(parse_reply_files("```\n// file: a/../../up.cpp\nx\n```").ok());
    EXPECT_FALSE(parse_reply_files("```\n// file: a b.cpp\nx\n```").ok());
    EXPECT_FALSE(parse_reply_files("```\n// file: \nx\n```").ok());
}

TEST(LlmConfig, NeedsAnEndpointAndAModel) {
    LlmConfig config;
    EXPECT_FALSE(validate_llm_config(config).ok());
    config.base_url = "ftp://host/v1";
    config.model = "m";
    EXPECT_FALSE(validate_llm_config(config).ok());
    config.base_url = "http://127.0.0.1:8000/v1";
    EXPECT_TRUE(validate_llm_config(config).ok());
    config.model.clear();
    EXPECT_FALSE(validate_llm_config(config).ok());
}

}  // namespace
}  // namespace hp::agents
