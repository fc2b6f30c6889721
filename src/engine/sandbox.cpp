#include "hotpass/engine/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace hp::engine {
namespace {

std::vector<std::pair<const void *, size_t>> g_read_only;

// Async-signal-safe message: formats into a stack buffer, write(2) only.
void say(const char *text, long number) {
    char buffer[160];
    const int n = std::snprintf(buffer, sizeof buffer, "hotpass-executor: %s %ld\n", text, number);
    if (n > 0) (void)!write(STDERR_FILENO, buffer, size_t(n));
}

void on_fault(int signal_number, siginfo_t *info, void *) {
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    for (const auto &[begin, bytes] : g_read_only) {
        const auto start = reinterpret_cast<uintptr_t>(begin);
        if (address >= start && address < start + bytes) {
            say("wrote_weights at address", long(address));
            _exit(kExitWroteWeights);
        }
    }
    say("crash: signal", signal_number);
    signal(signal_number, SIG_DFL);
    raise(signal_number);
}

void on_sigsys(int, siginfo_t *info, void *) {
    say("forbidden_syscall", long(info->si_syscall));
    _exit(kExitForbiddenSyscall);
}

}  // namespace

void install_fault_handlers(std::vector<std::pair<const void *, size_t>> read_only_ranges) {
    g_read_only = std::move(read_only_ranges);
    static char alternate_stack[1 << 16];
    stack_t stack{};
    stack.ss_sp = alternate_stack;
    stack.ss_size = sizeof alternate_stack;
    sigaltstack(&stack, nullptr);
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
    action.sa_sigaction = on_sigsys;
    sigaction(SIGSYS, &action, nullptr);
}

Status install_seccomp_filter() {
    scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
    if (!filter) return error("seccomp_init failed");
    int rc = 0;
    auto trap = [&](int syscall_number) {
        if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, syscall_number, 0);
    };
    for (int number : {SCMP_SYS(socket), SCMP_SYS(socketpair), SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(listen),
                       SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(creat),
                       SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(rename), SCMP_SYS(renameat), SCMP_SYS(renameat2),
                       SCMP_SYS(mkdir), SCMP_SYS(mkdirat), SCMP_SYS(truncate), SCMP_SYS(ptrace), SCMP_SYS(rmdir),
                       SCMP_SYS(symlink), SCMP_SYS(symlinkat), SCMP_SYS(link), SCMP_SYS(linkat), SCMP_SYS(mknod),
                       SCMP_SYS(mknodat), SCMP_SYS(process_vm_writev)}) {
        trap(number);
    }
    // openat2 and io_uring carry what they do in memory seccomp cannot read (io_uring's operations
    // bypass the filter altogether): not available, as clone3 below.
    for (int number : {SCMP_SYS(openat2), SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register),
                       SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal)}) {
        if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), number, 0);
    }
    // Signals only to this process (abort() and raise() send them to itself): kill(getppid(), ...)
    // or kill(-1, ...) from a candidate would take down the campaign that started the executor.
    const scmp_datum_t self = scmp_datum_t(getpid());
    for (int number : {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo)}) {
        if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, number, 1, SCMP_A0(SCMP_CMP_NE, self));
    }
    // tkill names a thread, not a process: one of this process's threads is not the pid. It is
    // refused (EPERM) rather than trapped; glibc's raise and pthread_kill use tgkill.
    if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tkill), 1, SCMP_A0(SCMP_CMP_NE, self));
    // pidfd_open / pidfd_send_signal (above: ENOSYS) would reach other processes by descriptor.
    // clone: threads (CLONE_THREAD) are fine, new processes are not. clone3 passes its flags in
    // memory seccomp cannot read, so it answers ENOSYS and glibc falls back to clone.
    if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    // Opening for writing or creating.
    for (scmp_datum_t flag : {scmp_datum_t(O_WRONLY), scmp_datum_t(O_RDWR), scmp_datum_t(O_CREAT),
                              scmp_datum_t(O_TRUNC), scmp_datum_t(O_APPEND)}) {
        if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, SCMP_SYS(open), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, flag, flag));
        if (rc == 0) rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, SCMP_SYS(openat), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, flag, flag));
    }
    // TSYNC: the filter applies to threads that already exist (e.g. the incumbent's pool), not only
    // to the calling thread and its future children.
    if (rc == 0) rc = seccomp_attr_set(filter, SCMP_FLTATR_CTL_TSYNC, 1);
    if (rc == 0) rc = seccomp_load(filter);
    seccomp_release(filter);
    if (rc != 0) return error("installing the seccomp filter failed: {}", std::strerror(-rc));
    return Status::success();
}

}  // namespace hp::engine
