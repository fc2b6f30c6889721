// The command agent without a campaign: a FakeSubmissions answers its submissions. Commands are
// small shell scripts; the end-to-end case with real builds is tests/campaign/test_command_campaign.cpp.
#include "hotpass/agents/command_agent.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../process_gone.h"
#include "fake_submissions.h"
#include "hotpass/core/mapped_file.h"

namespace hp::agents {
namespace {
namespace fs = std::filesystem;

class CommandAgentTest : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("hotpass-command-agent-" + std::to_string(getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_ / "base");
        std::ofstream(root_ / "base" / "forward.cpp") << "int forward() { return 1; }\n";
        std::ofstream(root_ / "base" / "knobs.h") << "#define HP_TILE 4\n";
    }
    void TearDown() override { fs::remove_all(root_); }

    CommandAgent make(const std::string &command, CommandAgentConfig config = {}) {
        config.command = command;
        config.env.push_back("PROTECTED=" + (root_ / "base").string());
        return CommandAgent("command-1", config, root_ / "base", root_ / "workspace", {root_ / "base"});
    }
    std::string read(const fs::path &path) {
        auto text = read_text_file(path);
        return text.ok() ? *text : "";
    }

    fs::path root_;
    FakeSubmissions submissions_;
    AgentContext context_;
};

TEST_F(CommandAgentTest, RunsInItsWorkspaceSubmitsAndGetsTheVerdictBack) {
    submissions_.verdicts = {{"not_faster", "correct; 0.99x the incumbent", 0.99}, {"build_failed", "compile error: forward.cpp:2", 0}};
    context_.submissions = &submissions_;
    CommandAgentConfig config;
    config.max_turns = 1;
    config.env.push_back("MY_SETTING=seven");
    auto agent = make(
        "grep -q 'as fast as possible' TASK.md || exit 9\n"
        "echo \"$MY_SETTING $HOTPASS_AGENT $HOTPASS_TURN\" > env.txt\n"
        "cp -R src good && echo '// edited' >> good/forward.cpp\n"
        "hotpass submit good > good.out; echo \"good=$?\" >> codes.txt\n"
        "cp -R src broken && echo 'not C++' >> broken/forward.cpp\n"
        "hotpass submit broken > broken.out; echo \"broken=$?\" >> codes.txt\n"
        "mkdir linked && ln -s /etc/passwd linked/forward.cpp\n"
        "hotpass submit linked > linked.out; echo \"linked=$?\" >> codes.txt\n"
        "hotpass submit no-such-dir 2> usage.out; echo \"missing=$?\" >> codes.txt\n",
        config);
    const ProposeOutcome outcome = agent.propose(context_);
    EXPECT_FALSE(outcome.proposal);
    EXPECT_EQ(outcome.n_submitted, 2) << outcome.reason;
    EXPECT_NE(outcome.reason.find("turn 1 finished"), std::string::npos) << outcome.reason;
    EXPECT_TRUE(outcome.exhausted) << "max_turns = 1: that was its last turn";

    ASSERT_EQ(submissions_.proposals.size(), 2u);
    EXPECT_EQ(read(submissions_.proposals[0].source_dir / "forward.cpp"), "int forward() { return 1; }\n// edited\n");
    EXPECT_EQ(read(submissions_.proposals[0].source_dir / "knobs.h"), "#define HP_TILE 4\n");
    const fs::path workspace = agent.workspace();
    EXPECT_EQ(read(workspace / "codes.txt"), "good=1\nbroken=3\nlinked=2\nmissing=2\n");
    EXPECT_NE(read(workspace / "good.out").find("verdict: not_faster"), std::string::npos);
    EXPECT_NE(read(workspace / "broken.out").find("compile error: forward.cpp:2"), std::string::npos);
    EXPECT_NE(read(workspace / "linked.out").find("symbolic link"), std::string::npos);
    EXPECT_EQ(read(workspace / "env.txt"), "seven command-1 1\n");
    EXPECT_EQ(read(workspace / "src" / "forward.cpp"), "int forward() { return 1; }\n") << "src/ is a copy of the base sources";

    const ProposeOutcome after = agent.propose(context_);
    EXPECT_TRUE(after.exhausted);
    EXPECT_NE(after.reason.find("turns are used"), std::string::npos);
}

TEST_F(CommandAgentTest, ACrashIsAFailedTurnAndRepeatedCrashesRetireIt) {
    CommandAgentConfig config;
    config.max_failures = 2;
    auto agent = make("echo 'segfault in my-agent'; exit 3", config);
    const ProposeOutcome first = agent.propose(context_);
    EXPECT_FALSE(first.exhausted);
    EXPECT_EQ(first.n_submitted, 0);
    EXPECT_NE(first.reason.find("exit status 3"), std::string::npos) << first.reason;
    EXPECT_NE(first.reason.find("segfault in my-agent"), std::string::npos) << "the reason carries the command's last output";
    const ProposeOutcome second = agent.propose(context_);
    EXPECT_TRUE(second.exhausted);
    EXPECT_EQ(second.reason.rfind("retired", 0), 0u) << second.reason;
}

// A process that leaves the command's process group, writing its pid to FILE first; the command
// waits for the file, so the pid is known before the turn can end.
std::string escape_with_setsid(const std::string &file) {
    return "setsid sh -c 'echo $$ > " + file + "; exec sleep 300' >/dev/null 2>&1 & while [ ! -s " + file +
           " ]; do sleep 0.05; done; ";
}

// pid_file's process (written by the command) has ended; killed if not, so no test leaves it behind.
void expect_ended(const fs::path &pid_file, const std::string &what) {
    std::ifstream in(pid_file);
    pid_t pid = 0;
    ASSERT_TRUE(in >> pid) << "no pid in " << pid_file;
    const bool gone = hp::test_support::process_gone_within(pid, 10);
    EXPECT_TRUE(gone) << what << " (pid " << pid << ") outlived the turn";
    if (!gone) kill(pid, SIGKILL);
}

TEST_F(CommandAgentTest, AHungCommandIsKilledWithEverythingItStarted) {
    CommandAgentConfig config;
    config.turn_seconds = 2;
    auto agent = make(escape_with_setsid("escaped.pid") + "sleep 300 & echo $! > background.pid; sleep 300", config);
    const ProposeOutcome outcome = agent.propose(context_);
    EXPECT_FALSE(outcome.exhausted);
    EXPECT_NE(outcome.reason.find("hung"), std::string::npos) << outcome.reason;
    expect_ended(agent.workspace() / "background.pid", "the background child of the hung command");
    expect_ended(agent.workspace() / "escaped.pid", "a setsid'd child of the hung command");
}

// A process group kill misses a child that called setsid; the reaper under the turn does not, and
// ends it as soon as the command exits, not only when the turn's time is spent.
TEST_F(CommandAgentTest, WhatAFinishedCommandLeftRunningEndsWithTheTurn) {
    CommandAgentConfig config;
    config.turn_seconds = 120;
    auto agent = make(escape_with_setsid("escaped.pid") + "exit 0", config);
    const ProposeOutcome outcome = agent.propose(context_);
    EXPECT_NE(outcome.reason.find("turn 1 finished"), std::string::npos) << outcome.reason;
    expect_ended(agent.workspace() / "escaped.pid", "a setsid'd child of a finished command");
}

TEST_F(CommandAgentTest, EditingFilesOutsideItsWorkspaceRetiresIt) {
    auto agent = make("echo '// sneaky' >> \"$PROTECTED/forward.cpp\"");
    const ProposeOutcome outcome = agent.propose(context_);
    EXPECT_TRUE(outcome.exhausted);
    EXPECT_NE(outcome.reason.find("outside its workspace"), std::string::npos) << outcome.reason;
}

TEST_F(CommandAgentTest, NoCommandRetiresItWithAReason) {
    auto agent = make("");
    const ProposeOutcome outcome = agent.propose(context_);
    EXPECT_TRUE(outcome.exhausted);
    EXPECT_NE(outcome.reason.find("--agent-command"), std::string::npos);
}

// A command that floods its output is stopped past 64 MB and its log cut there (1 GB of output
// stayed on disk and was read into memory twice).
TEST_F(CommandAgentTest, AFloodingCommandIsStoppedAndItsLogCut) {
    CommandAgentConfig config;
    config.turn_seconds = 120;
    auto agent = make("head -c 100000000 /dev/zero; exit 3", config);
    const ProposeOutcome flooded = agent.propose(context_);
    EXPECT_NE(flooded.reason.find("flooded"), std::string::npos) << flooded.reason;
    uintmax_t largest = 0;
    for (const auto &entry : fs::recursive_directory_iterator(root_ / "workspace")) {
        if (entry.is_regular_file() && entry.path().extension() == ".log") largest = std::max(largest, entry.file_size());
    }
    EXPECT_GT(largest, 0u);
    EXPECT_LE(largest, uintmax_t(64) << 20);
}

// `hotpass submit` inside a workspace stops waiting when the campaign is gone (it looped forever
// after hotpass was killed): the campaign's heartbeat file is stale, exit 5, infrastructure.
TEST_F(CommandAgentTest, SubmitGivesUpWhenTheCampaignIsGone) {
    context_.submissions = &submissions_;
    auto agent = make("true");
    (void)agent.propose(context_);  // a turn that submits nothing: the workspace and its bin/ exist after it
    ASSERT_TRUE(fs::exists(root_ / "workspace" / "bin" / "hotpass-submit"));
    const fs::path queue = root_ / "workspace" / ".hotpass" / "queue";
    ASSERT_TRUE(fs::exists(queue / ".alive")) << "the turn's relay writes the heartbeat";
    fs::last_write_time(queue / ".alive", fs::file_time_type::clock::now() - std::chrono::seconds(60));
    const std::string command =
        fmt::format("cd '{}' && HOTPASS_SUBMIT_QUEUE='{}' bin/hotpass submit src 2>/dev/null", (root_ / "workspace").string(), queue.string());
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 5);
}

TEST(SubmitExitCode, FollowsTheStandaloneSubmitCommand) {
    EXPECT_EQ(submit_exit_code("faster"), 0);
    EXPECT_EQ(submit_exit_code("not_faster"), 1);
    EXPECT_EQ(submit_exit_code("build_failed"), 3);
    EXPECT_EQ(submit_exit_code("bad_exports"), 3);
    EXPECT_EQ(submit_exit_code("wrong_output"), 4);
    EXPECT_EQ(submit_exit_code("infrastructure"), 5);
}

}  // namespace
}  // namespace hp::agents
