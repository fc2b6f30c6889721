// The command agent end to end: `hotpass optimize --agents command:1` runs
// tests/agents/scripted_agent.sh, which edits the real CPU baseline three times and submits each
// edit with `hotpass submit`: a harmless edit, a broken build and scaled logits. The store must hold
// the three verdicts (verified, build_failed, a wrong-result code), and the script must have got
// them back as `hotpass submit` exit codes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "hotpass/core/mapped_file.h"
#include "hotpass/store/store.h"

namespace hp::campaign {
namespace {
namespace fs = std::filesystem;

TEST(CommandCampaign, ScriptedAgentEditsSubmitsAndGetsEachVerdictRecorded) {
    const fs::path root = fs::temp_directory_path() / ("hotpass-command-campaign-" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    const fs::path db = root / "store.db", log = root / "optimize.log";
    const std::string script = fs::path(HOTPASS_SOURCE_DIR) / "tests/agents/scripted_agent.sh";
    const std::string command = fmt::format(
        "'{}' optimize --model preset:tiny-llama --fast-layers 1 --budget 20m --no-final --agents command:1 --agent-command 'sh {}' "
        "--agent-turns 1 --agent-turn-seconds 1500 --store '{}' --out '{}' > '{}' 2>&1",
        HOTPASS_CLI, script, db.string(), (root / "out").string(), log.string());
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << log;

    auto store = store::Store::open(db).value();
    const auto campaigns = store->campaigns().value();
    ASSERT_EQ(campaigns.size(), 1u);
    const int64_t campaign = campaigns[0].id;
    const fs::path workspace = root / "workspaces" / fmt::format("campaign-{}", campaign) / "command-1";
    const auto results = read_text_file(workspace / "results.txt");
    ASSERT_TRUE(results.ok()) << "the script did not finish; see " << (workspace / ".hotpass/turn-1.log");

    // Candidates in submission order: good, build, wrong; each with its first verdict.
    const auto candidates = store->candidates(campaign).value();
    ASSERT_EQ(candidates.size(), 3u) << *results;
    std::vector<std::string> codes;
    for (const auto &candidate : candidates) {
        EXPECT_EQ(candidate.agent, "command-1");
        const auto verdicts = store->verdicts(candidate.id).value();
        ASSERT_FALSE(verdicts.empty()) << candidate.hash;
        codes.push_back(verdicts.front().code);
    }
    EXPECT_TRUE(codes[0] == "faster" || codes[0] == "not_faster") << codes[0] << ": the harmless edit must verify";
    EXPECT_EQ(codes[1], "build_failed");
    EXPECT_TRUE(codes[2] == "wrong_output" || codes[2] == "greedy_divergence") << codes[2];
    EXPECT_EQ(store->verdicts(candidates[1].id).value().front().tier, "build");

    // The script saw the verdicts as `hotpass submit` exit codes: 0/1 verified, 3 build, 4 rejected.
    EXPECT_TRUE(results->find("good 0\n") != std::string::npos || results->find("good 1\n") != std::string::npos) << *results;
    EXPECT_NE(results->find("build 3\n"), std::string::npos) << *results;
    EXPECT_NE(results->find("wrong 4\n"), std::string::npos) << *results;
    EXPECT_NE(read_text_file(workspace / "wrong.verdict").value().find("verdict: " + codes[2]), std::string::npos);

    // The turn is on the board, and the in-tree baseline is untouched (the agent edited copies).
    bool turn_noted = false;
    const auto notes = store->notes(campaign).value();
    for (const auto &note : notes) {
        turn_noted |= note.agent == "command-1" && note.text.find("3 submission(s)") != std::string::npos;
    }
    EXPECT_TRUE(turn_noted);
    EXPECT_EQ(store->campaign(campaign).value().status, "finished");
    fs::remove_all(root);
}

}  // namespace
}  // namespace hp::campaign
