// Running a child process with a time limit, capturing its combined output.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hotpass/core/result.h"

namespace hp {

struct ProcessResult {
    int exit_code = -1;  // valid when !signaled and !timed_out
    int signal = 0;      // the signal that ended it, if any
    bool timed_out = false;
    std::string output;  // stdout and stderr interleaved (truncated to max_output_bytes)
    double seconds = 0;

    bool ok() const { return !timed_out && signal == 0 && exit_code == 0; }
};

struct ProcessOptions {
    double timeout_seconds = 60;
    std::filesystem::path cwd;  // empty: inherit
    size_t max_output_bytes = 1 << 20;
};

// Runs argv[0] (looked up in PATH) with argv under a reaper (below), in a process group of its
// own. On timeout the reaper ends the command and everything it started. An error only when the
// process cannot be started. The group is tracked (below) while it runs.
Result<ProcessResult> run_process(const std::vector<std::string> &argv, const ProcessOptions &options = {});

// A reaper keeps what a command starts from outliving it. The forked child becomes a child
// subreaper (prctl), forks the command and waits for it; when it ends, every descendant still alive
// is killed, including those that left the process group with setsid (which a group kill misses
// and which would otherwise be handed to init), and the reaper exits with the command's status.
// SIGTERM to the reaper, or the end of the thread that forked it, ends the command and its
// descendants the same way, after which the reaper dies of SIGKILL.
//
//   ReaperFork held;
//   const pid_t pid = fork_reaper(held);
//   if (pid == 0) { /* redirect, chdir: async-signal-safe calls only */ exec_reaped(held, ...); }
//   ... waitpid(pid, ...) or end_reaper(pid) ...
struct ReaperFork {
    pid_t parent = 0;
    sigset_t mask{};  // the forking thread's signal mask, restored for the command
};
// fork() with SIGTERM and SIGCHLD held in the child from its first instruction, so a request to end
// that comes before the reaper is ready is kept, not lost. 0 in the child, -1 when fork fails.
pid_t fork_reaper(ReaperFork &held);
// In the child of fork_reaper, instead of exec: runs `file` (execvp when envp is null, else
// execve with envp) as the reaped command. Never returns.
[[noreturn]] void exec_reaped(const ReaperFork &held, const char *file, char *const argv[], char *const envp[]);
// Whether the reaper has exited, without reaping it (its pid and group id stay reserved).
bool reaper_exited(pid_t reaper);
// Reaps an exited reaper (or kills it): SIGKILL to what is left of its process group first (a
// reaper that could not read /proc leaves its group's processes behind), untracks the group, and
// returns the wait status.
int reap_reaper(pid_t reaper);
// Asks a reaper to end its command and descendants and waits for it: SIGTERM, then reap_reaper,
// whose group SIGKILL also ends a reaper that has not gone after grace_seconds. Returns its wait status.
int end_reaper(pid_t reaper, double grace_seconds = 5);

// Process groups of children that live in groups of their own (out of reach of the terminal's
// Ctrl-C) and must not outlive this process: builds, agent turns, each led by a reaper. A signal
// handler that ends the process at once calls kill_tracked_process_groups first, which sends each
// group's leader SIGTERM (async-signal-safe: atomics and kill); a reaper then ends its command and
// descendants by itself, after this process has gone. At most kMaxTrackedGroups at a time; beyond
// that a group is not tracked.
inline constexpr int kMaxTrackedGroups = 256;
void track_process_group(pid_t group);
void untrack_process_group(pid_t group);
void kill_tracked_process_groups();

}  // namespace hp
