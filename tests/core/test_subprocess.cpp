#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "../process_gone.h"
#include "hotpass/core/subprocess.h"

namespace hp {
namespace {

TEST(Subprocess, RunsAndCapturesOutput) {
    auto result = run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_EQ(result->exit_code, 3);
    EXPECT_NE(result->output.find("out"), std::string::npos);
    EXPECT_NE(result->output.find("err"), std::string::npos);
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
    ProcessOptions options;
    options.timeout_seconds = 0.5;
    auto result = run_process({"sh", "-c", "sleep 30 & sleep 30"}, options);
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_TRUE(result->timed_out);
    EXPECT_FALSE(result->ok());
}

TEST(Subprocess, TheCommandsSignalIsReported) {
    // SIGTERM is the reaper's own request to end; the command's SIGTERM must still come through as it.
    for (const int sig : {SIGTERM, SIGSEGV}) {
        auto result = run_process({"sh", "-c", "kill -" + std::to_string(sig) + " $$"});
        ASSERT_TRUE(result.ok()) << result.error();
        EXPECT_EQ(result->signal, sig) << result->output;
        EXPECT_FALSE(result->timed_out);
    }
    // SIGTERM to its own process group (the reaper's too) ends the command, not the reaper's
    // watch: the reaper takes SIGTERM only from the process that started it.
    auto group = run_process({"sh", "-c", "kill -TERM 0"});
    ASSERT_TRUE(group.ok()) << group.error();
    EXPECT_EQ(group->signal, SIGTERM) << group->output;
}

TEST(Subprocess, AMissingProgramIsExit127) {
    auto result = run_process({"hotpass-no-such-program"});
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_EQ(result->exit_code, 127);
    EXPECT_NE(result->output.find("exec failed"), std::string::npos);
}

class Escapes : public ::testing::Test {
protected:
    void SetUp() override {
        pid_file_ = std::filesystem::temp_directory_path() /
                    ("hotpass-subprocess-" + std::to_string(getpid()) + "-" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::remove(pid_file_);
    }
    void TearDown() override { std::filesystem::remove(pid_file_); }

    // Shell text that starts a process outside the command's process group (setsid) that keeps the
    // command's output open, and waits until it has written its pid.
    std::string escape() const {
        const std::string file = pid_file_.string();
        return "setsid sh -c 'echo $$ > " + file + "; exec sleep 300' & while [ ! -s " + file + " ]; do sleep 0.05; done; ";
    }
    // Until the command has written the pid (up to 30 s on a loaded machine).
    void wait_for_pid_file() const {
        std::error_code code;
        for (int i = 0; i < 3000 && !(std::filesystem::exists(pid_file_, code) && std::filesystem::file_size(pid_file_, code) > 0); ++i) {
            usleep(10 * 1000);
        }
        usleep(50 * 1000);  // the whole line written
    }
    void expect_escaped_one_ended() const {
        std::ifstream in(pid_file_);
        pid_t pid = 0;
        ASSERT_TRUE(in >> pid) << "no pid in " << pid_file_;
        const bool gone = test_support::process_gone_within(pid, 10);
        EXPECT_TRUE(gone) << "the setsid'd process " << pid << " outlived the command";
        if (!gone) kill(pid, SIGKILL);
    }

    std::filesystem::path pid_file_;
};

// Before the reaper, the escaped process held the output pipe open: run_process waited for the
// whole timeout, then killed a group that no longer held it, and it lived on.
TEST_F(Escapes, ACommandThatExitsTakesItsSetsidChildrenWithIt) {
    ProcessOptions options;
    options.timeout_seconds = 60;
    auto result = run_process({"sh", "-c", escape() + "echo done; exit 4"}, options);
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_FALSE(result->timed_out) << "the escaped process kept run_process waiting";
    EXPECT_EQ(result->exit_code, 4);
    EXPECT_NE(result->output.find("done"), std::string::npos);
    expect_escaped_one_ended();
}

TEST_F(Escapes, ATimeoutEndsSetsidChildrenToo) {
    ProcessOptions options;
    options.timeout_seconds = 2;
    auto result = run_process({"sh", "-c", escape() + "sleep 300"}, options);
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_TRUE(result->timed_out);
    expect_escaped_one_ended();
}

// What a second Ctrl-C does: the handler signals the tracked reapers and exits; each reaper ends
// its command and descendants by itself.
TEST_F(Escapes, KillTrackedProcessGroupsReachesSetsidChildren) {
    ProcessOptions options;
    options.timeout_seconds = 120;
    Result<ProcessResult> result = error("not run");
    std::thread runner([&] { result = run_process({"sh", "-c", escape() + "sleep 300"}, options); });
    wait_for_pid_file();
    kill_tracked_process_groups();
    runner.join();
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_FALSE(result->timed_out);
    EXPECT_EQ(result->signal, SIGKILL);  // how a reaper that was asked to end goes
    expect_escaped_one_ended();
}

// The reaper's own cleanup needs /proc. Without it (or should the reaper die), what is left of its
// process group still goes once the reaper has exited: here the reaper is killed from outside while
// a background child of the command holds the output pipe open.
TEST_F(Escapes, AGroupOutlivingItsReaperIsKilledWhenTheReaperExits) {
    ProcessOptions options;
    options.timeout_seconds = 120;
    Result<ProcessResult> result = error("not run");
    const std::string file = pid_file_.string();
    std::thread runner([&] { result = run_process({"sh", "-c", "sleep 300 & echo $! > " + file + "; wait"}, options); });
    wait_for_pid_file();
    pid_t sleeper_pid = 0;
    ASSERT_TRUE(std::ifstream(pid_file_) >> sleeper_pid);
    const pid_t reaper = getpgid(sleeper_pid);  // the group's leader
    ASSERT_GT(reaper, 0);
    kill(reaper, SIGKILL);
    runner.join();
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_FALSE(result->timed_out) << "the orphaned group kept the pipe open until the timeout";
    EXPECT_EQ(result->signal, SIGKILL);
    const bool gone = test_support::process_gone_within(sleeper_pid, 10);
    EXPECT_TRUE(gone) << "the command's background child outlived its reaper";
    if (!gone) kill(sleeper_pid, SIGKILL);
}

// A child in a group of its own, sleeping until killed.
pid_t sleeper() {
    const pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        pause();
        _exit(0);
    }
    setpgid(pid, pid);
    return pid;
}

// What a second Ctrl-C relies on: tracked groups are killed, untracked ones are not.
TEST(Subprocess, KillTrackedProcessGroupsKillsOnlyTrackedOnes) {
    const pid_t tracked = sleeper(), untracked = sleeper();
    ASSERT_GT(tracked, 0);
    ASSERT_GT(untracked, 0);
    track_process_group(tracked);
    track_process_group(untracked);
    untrack_process_group(untracked);
    kill_tracked_process_groups();
    int status = 0;
    ASSERT_EQ(waitpid(tracked, &status, 0), tracked);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    EXPECT_EQ(waitpid(untracked, &status, WNOHANG), 0) << "an untracked group was killed";
    untrack_process_group(tracked);
    kill(untracked, SIGKILL);
    waitpid(untracked, &status, 0);
}

}  // namespace
}  // namespace hp
