// LD_PRELOAD diagnostic for GPU runs on machines without a debugger: on SIGUSR1 the receiving thread
// writes its backtrace (module + offset per frame) to stderr and the process goes on. tools/gpu-check.sh
// preloads it into the GPU tests and sends SIGUSR1 (to the main thread: the kernel delivers a process
// signal there first) to a test that is about to time out, so a hang says where it spins instead of
// only that it stopped. Symbolize the frames on the build machine: addr2line -f -C -i -e
// build/<preset>/<the module> <offset>. (2026-12-05: this is how a hang in libcudart's __cudaGetKernel
// after a plugin reload was found; bench/RESULTS.md.)
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace {

void write_backtrace(int) {
    void *frames[64];
    const int n = backtrace(frames, 64);
    static const char head[] = "=== stall_backtrace: the thread that took SIGUSR1\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, head, sizeof head - 1);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);  // async-signal-safe: no malloc
}

// Installed when the library is loaded; backtrace() loads libgcc_s here, not inside the handler.
[[gnu::constructor]] void install() {
    void *warm[1];
    backtrace(warm, 1);
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = write_backtrace;
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
}

}  // namespace
