#include "hotpass/core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
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
        if (const pid_t group = slot.load(); group > 0) kill(group, SIGTERM);
    }
}

namespace {

// What follows runs in the forked child of a (possibly multi-threaded) process that never execs:
// async-signal-safe calls only, so no allocation, no stdio, no opendir.

void sleep_ms(long ms) {
    timespec pause{ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&pause, nullptr);
}

// The parent pid in /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold ')' or spaces),
// or -1 when the process has gone or the line does not parse.
pid_t parent_of(const char *pid_text) {
    char path[64] = "/proc/";
    size_t at = 6;
    for (const char *c = pid_text; *c && at + 6 < sizeof path; ++c) path[at++] = *c;
    for (const char *c = "/stat"; *c; ++c) path[at++] = *c;
    path[at] = '\0';
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char line[1024];
    const ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0) return -1;
    line[n] = '\0';
    const char *close_paren = nullptr;
    for (ssize_t i = 0; i < n; ++i) {
        if (line[i] == ')') close_paren = line + i;
    }
    if (!close_paren || close_paren + 4 >= line + n) return -1;
    const char *c = close_paren + 4;  // past ") S "
    pid_t ppid = 0;
    for (; *c >= '0' && *c <= '9'; ++c) ppid = ppid * 10 + (*c - '0');
    return *c == ' ' ? ppid : -1;
}

// SIGKILL to every process whose parent is this one. /proc/<pid>/task/<tid>/children would list
// them directly, but kernels built without CONFIG_PROC_CHILDREN lack it; the scan works on all.
void kill_children() {
    const int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    const pid_t self = getpid();
    alignas(8) char buffer[8192];
    while (true) {
        const long n = syscall(SYS_getdents64, dir, buffer, sizeof buffer);
        if (n <= 0) break;
        for (long at = 0; at < n;) {
            struct Entry {
                uint64_t inode;
                int64_t offset;
                unsigned short length;
                unsigned char type;
                char name[1];
            };
            const auto *entry = reinterpret_cast<const Entry *>(buffer + at);
            at += entry->length;
            pid_t pid = 0;
            const char *c = entry->name;
            for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
            if (*c != '\0' || pid <= 0 || pid == self) continue;
            if (parent_of(entry->name) == self) kill(pid, SIGKILL);
        }
    }
    close(dir);
}

// Kills this process's descendants: a killed child's own children are handed to this subreaper,
// so killing and reaping children until none is left reaches the whole tree. Gives up after 10 s
// (a process stuck in the kernel cannot be killed).
void kill_descendants() {
    for (int round = 0; round < 10000; ++round) {
        int status = 0;
        pid_t done;
        while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
        }
        if (done < 0 && errno == ECHILD) return;
        if (round % 8 == 0) kill_children();
        sleep_ms(1);
    }
}

}  // namespace

pid_t fork_reaper(ReaperFork &held) {
    held.parent = getpid();
    sigset_t hold;
    sigemptyset(&hold);
    sigaddset(&hold, SIGTERM);
    sigaddset(&hold, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &hold, &held.mask);
    const pid_t pid = fork();
    if (pid != 0) pthread_sigmask(SIG_SETMASK, &held.mask, nullptr);
    return pid;
}

void exec_reaped(const ReaperFork &held, const char *file, char *const argv[], char *const envp[]) {
    // SIGCHLD ignored (inherited from whoever started hotpass) would reap the command behind
    // waitpid's back, and the reaper would wait for it forever.
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(SIGCHLD, &default_action, nullptr);
    prctl(PR_SET_NAME, "hotpass-reaper");  // not "hotpass": `pkill hotpass` is not meant for it
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // held, so it waits in the sigtimedwait below
    if (getppid() != held.parent) _exit(127);  // the parent went before the line above
    const pid_t command = fork();
    if (command < 0) _exit(126);
    if (command == 0) {
        pthread_sigmask(SIG_SETMASK, &held.mask, nullptr);
        if (envp) execve(file, argv, envp);
        else execvp(file, argv);
        const char message[] = "exec failed\n";
        (void)!write(STDERR_FILENO, message, sizeof message - 1);
        _exit(127);
    }
    // The reaper never execs, so it would keep every descriptor of the process that forked it,
    // close-on-exec or not: another thread's pipe would then see no end of file, a socket no hang-up,
    // for as long as this command runs. The command has its own copies.
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        for (int fd = 3; fd < 65536; ++fd) close(fd);
    }
    // Every signal held: the reaper runs no handler of hotpass's (a copy of the campaign's Ctrl-C
    // handler would act on a stale copy of its state) and no default action ends it before its
    // work is done. It takes SIGCHLD, and SIGTERM from the process that started it or from the
    // kernel (the parent-death signal) -- not one the command sends its own group.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    sigset_t wake;
    sigemptyset(&wake);
    sigaddset(&wake, SIGTERM);
    sigaddset(&wake, SIGCHLD);
    int status = 0;
    bool ended = false, asked_to_end = false;
    while (!ended && !asked_to_end) {
        int child_status = 0;
        pid_t done;
        while ((done = waitpid(-1, &child_status, WNOHANG)) > 0) {
            if (done == command) {
                status = child_status;
                ended = true;
            }
        }
        if (ended) break;
        const timespec tick{1, 0};
        siginfo_t info{};
        if (sigtimedwait(&wake, &info, &tick) == SIGTERM) asked_to_end = info.si_pid == held.parent || info.si_pid == 0;
    }
    kill_descendants();
    if (asked_to_end) kill(getpid(), SIGKILL);
    if (WIFSIGNALED(status)) {
        // Die of the command's signal, without a second core file.
        const rlimit no_core{0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        const int sig = WTERMSIG(status);
        sigaction(sig, &default_action, nullptr);
        sigset_t just;
        sigemptyset(&just);
        sigaddset(&just, sig);
        pthread_sigmask(SIG_UNBLOCK, &just, nullptr);
        kill(getpid(), sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

bool reaper_exited(pid_t reaper) {
    siginfo_t info{};
    return waitid(P_PID, id_t(reaper), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == reaper;
}

int reap_reaper(pid_t reaper) {
    // Until it is reaped, the exited reaper keeps its process group's id from being reused, so the
    // group kill reaches only what is left of its own group: the fallback for a reaper that could
    // not read /proc.
    kill(-reaper, SIGKILL);
    untrack_process_group(reaper);  // before the pid can be reused
    int status = 0;
    while (waitpid(reaper, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

int end_reaper(pid_t reaper, double grace_seconds) {
    kill(reaper, SIGTERM);
    const double start = now_seconds();
    while (!reaper_exited(reaper) && now_seconds() - start <= grace_seconds) usleep(2000);
    return reap_reaper(reaper);  // SIGKILL to the group if it has not gone yet
}

Result<ProcessResult> run_process(const std::vector<std::string> &argv, const ProcessOptions &options) {
    HP_CHECK(!argv.empty(), "run_process with no argv");
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return error("pipe: {}", std::strerror(errno));
    std::vector<char *> args;
    for (const std::string &arg : argv) args.push_back(const_cast<char *>(arg.c_str()));
    args.push_back(nullptr);
    const double start = now_seconds();
    ReaperFork held;
    const pid_t pid = fork_reaper(held);
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
        exec_reaped(held, args[0], args.data(), nullptr);
    }
    setpgid(pid, pid);  // also here: the group exists before it is tracked or killed
    track_process_group(pid);
    close(pipe_fds[1]);
    ProcessResult result;
    char buffer[4096];
    bool open = true;
    int status = 0;
    bool reaped = false, group_killed = false;
    while (open) {
        const double left = options.timeout_seconds - (now_seconds() - start);
        if (left <= 0) {
            result.timed_out = true;
            status = end_reaper(pid);
            reaped = true;
            break;
        }
        // A reaper that has exited while the pipe is still open left a writer behind (it could not
        // read /proc): what is left of its group goes, so the pipe closes.
        if (!group_killed && reaper_exited(pid)) {
            kill(-pid, SIGKILL);
            group_killed = true;
        }
        pollfd poll_fd{pipe_fds[0], POLLIN, 0};
        const int ready = poll(&poll_fd, 1, int(std::min(left, 0.1) * 1000) + 1);
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
    // The pipe closed: the reaper has ended, or is ending, the command's descendants. Reap it,
    // but never wait past the deadline.
    while (!reaped) {
        if (reaper_exited(pid)) {
            status = reap_reaper(pid);
            break;
        }
        if (now_seconds() - start > options.timeout_seconds) {
            result.timed_out = true;
            status = end_reaper(pid);
            break;
        }
        usleep(2000);
    }
    result.seconds = now_seconds() - start;
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    else if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (result.timed_out) result.signal = 0;
    return result;
}

}  // namespace hp
