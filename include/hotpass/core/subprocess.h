// Running a child process with a time limit, capturing its combined output.
#pragma once

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

// Runs argv[0] (looked up in PATH) with argv. The child gets its own process group; on timeout
// the whole group is killed with SIGKILL. An error only when the process cannot be started.
// The group is tracked (below) while it runs.
Result<ProcessResult> run_process(const std::vector<std::string> &argv, const ProcessOptions &options = {});

// Process groups of children that live in groups of their own (out of reach of the terminal's
// Ctrl-C) and must not outlive this process: builds, agent turns. A signal handler that ends the
// process at once calls kill_tracked_process_groups first (async-signal-safe: atomics and kill).
// At most kMaxTrackedGroups at a time; beyond that a group is not tracked.
inline constexpr int kMaxTrackedGroups = 256;
void track_process_group(pid_t group);
void untrack_process_group(pid_t group);
void kill_tracked_process_groups();

}  // namespace hp
