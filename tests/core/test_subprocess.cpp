#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    EXPECT_EQ(waitpid(untracked, &status, WNOHANG), 0) << "an untracked group was killed";
    untrack_process_group(tracked);
    kill(untracked, SIGKILL);
    waitpid(untracked, &status, 0);
}

}  // namespace
}  // namespace hp
