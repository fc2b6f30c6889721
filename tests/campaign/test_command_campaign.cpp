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

// Several --agent-command lines: command agent i runs line i mod n (three agents, two lines), each
// in its own workspace; and the lines are checked against the command agents before anything is
// stored (a line without an agent, an agent without a line, a blank line).
TEST(CommandCampaign, EachCommandAgentRunsItsOwnLine) {
    const fs::path root = fs::temp_directory_path() / ("hotpass-command-lines-" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    const fs::path db = root / "store.db", log = root / "optimize.log";
    auto optimize = [&](const std::string &agents) {
        const std::string command = fmt::format(
            "'{}' optimize --model preset:tiny-llama --fast-layers 1 --budget 5m --no-final {} --agent-turns 1 --agent-turn-seconds 60 "
            "--store '{}' --out '{}' > '{}' 2>&1",
            HOTPASS_CLI, agents, db.string(), (root / "out").string(), log.string());
        const int status = std::system(command.c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    };

    EXPECT_NE(optimize("--agents command:1 --agent-command 'echo a' --agent-command 'echo b'"), 0);
    EXPECT_NE(read_text_file(log).value().find("2 --agent-command lines for 1 command agent"), std::string::npos) << read_text_file(log).value();
    EXPECT_NE(optimize("--agents knob-search:1 --agent-command 'echo a'"), 0);
    EXPECT_NE(read_text_file(log).value().find("no command agent runs it"), std::string::npos) << read_text_file(log).value();
    EXPECT_NE(optimize("--agents command:1 --agent-command ' '"), 0);
    EXPECT_NE(read_text_file(log).value().find("empty command line"), std::string::npos) << read_text_file(log).value();
    EXPECT_FALSE(fs::exists(db) && !store::Store::open(db).value()->campaigns().value().empty()) << "a refused campaign was stored";

    ASSERT_EQ(optimize("--agents command:3 --agent-command 'echo first > ran.txt' --agent-command 'echo second > ran.txt'"), 0)
        << read_text_file(log).value();
    auto store = store::Store::open(db).value();
    const auto campaigns = store->campaigns().value();
    ASSERT_EQ(campaigns.size(), 1u);
    // Stored for --resume.
    EXPECT_EQ(campaigns[0].options["command"]["commands"], nlohmann::json::array({"echo first > ran.txt", "echo second > ran.txt"}));
    const fs::path workspaces = root / "workspaces" / fmt::format("campaign-{}", campaigns[0].id);
    const std::map<std::string, std::string> expected = {{"command-1", "first\n"}, {"command-2", "second\n"}, {"command-3", "first\n"}};
    for (const auto &[agent, line] : expected) {
        auto ran = read_text_file(workspaces / agent / "ran.txt");
        ASSERT_TRUE(ran.ok()) << agent << " ran no command; see " << log;
        EXPECT_EQ(*ran, line) << agent;
    }
    fs::remove_all(root);
}

}  // namespace
}  // namespace hp::campaign
