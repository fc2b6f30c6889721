// Running a child process with a time limit, capturing its combined output.
#pragma once

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
Result<ProcessResult> run_process(const std::vector<std::string> &argv, const ProcessOptions &options = {});

}  // namespace hp
