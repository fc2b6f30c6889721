#include "hotpass/core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "hotpass/core/clock.h"

namespace hp {

namespace {
std::atomic<pid_t> g_tracked_groups[kMaxTrackedGroups];
}  // namespace

void track_process_group(pid_t group) {
    for (std::atomic<pid_t> &slot : g_tracked_groups) {
        pid_t empty = 0;
        if (slot.compare_exchange_strong(empty, group)) return;
    }
}

void untrack_process_group(pid_t group) {
    for (std::atomic<pid_t> &slot : g_tracked_groups) {
        pid_t expected = group;
        if (slot.compare_exchange_strong(expected, 0)) return;
    }
}

void kill_tracked_process_groups() {
    for (std::atomic<pid_t> &slot : g_tracked_groups) {
        if (const pid_t group = slot.load(); group > 0) kill(-group, SIGKILL);
    }
}

Result<ProcessResult> run_process(const std::vector<std::string> &argv, const ProcessOptions &options) {
    HP_CHECK(!argv.empty(), "run_process with no argv");
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return error("pipe: {}", std::strerror(errno));
    std::vector<char *> args;
    for (const std::string &arg : argv) args.push_back(const_cast<char *>(arg.c_str()));
    args.push_back(nullptr);
    const double start = now_seconds();
    const pid_t pid = fork();
    if (pid < 0) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        return error("fork: {}", std::strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(pipe_fds[1], STDOUT_FILENO);
        dup2(pipe_fds[1], STDERR_FILENO);
        if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(126);
        execvp(args[0], args.data());
        const char message[] = "exec failed\n";
        (void)!write(STDERR_FILENO, message, sizeof message - 1);
        _exit(127);
    }
    setpgid(pid, pid);  // also here: the group exists before it is tracked or killed
    track_process_group(pid);
    close(pipe_fds[1]);
    ProcessResult result;
    char buffer[4096];
    bool open = true;
    while (open) {
        const double left = options.timeout_seconds - (now_seconds() - start);
        if (left <= 0) {
            result.timed_out = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            break;
        }
        pollfd poll_fd{pipe_fds[0], POLLIN, 0};
        const int ready = poll(&poll_fd, 1, int(std::min(left, 1.0) * 1000) + 1);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        const ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
        if (n <= 0) {
            open = n < 0 && errno == EINTR;
            continue;
        }
        if (result.output.size() < options.max_output_bytes) result.output.append(buffer, size_t(n));
    }
    close(pipe_fds[0]);
    int status = 0;
    // The pipe closed (or we killed it): reap, but never wait past the deadline for a child that
    // closed its output and kept running.
    while (true) {
        const pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) break;
        if (done < 0 && errno != EINTR) break;
        if (now_seconds() - start > options.timeout_seconds && !result.timed_out) {
            result.timed_out = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
        usleep(2000);
    }
    untrack_process_group(pid);
    result.seconds = now_seconds() - start;
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    else if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (result.timed_out) result.signal = 0;
    return result;
}

}  // namespace hp
