// What the executor forbids and how it reports a candidate's faults.
//
// Forbidden (seccomp, after start-up; a violation ends the process with exit code
// kExitForbiddenSyscall and the syscall number on stderr): creating sockets or connecting,
// fork/vfork/clone of a process (threads are allowed), exec, opening files for writing or
// creating/removing/renaming/linking files and folders, writing another process's memory, and
// signals to any process but this one (kill, tgkill, rt_(tg)sigqueueinfo; tkill to another thread
// answers EPERM). openat2, clone3, io_uring and pidfd_open/pidfd_send_signal answer ENOSYS (their
// arguments are out of seccomp's sight, or they would reach other processes by descriptor). The model description plugins are handed (hp_model and what it
// points to) is fingerprinted and checked after every request (a change exits with
// kExitWroteWeights). What this does not stop: a candidate runs in the executor's address space, so
// one written to subvert hotpass on purpose can reach the executor's own state (its socket to the
// supervisor, its memory); the checks are made to catch mistakes and shortcuts, not a deliberate
// attack, which needs a candidate in its own process or machine. Weights are read-only mappings: a write faults, and the fault
// handler exits with kExitWroteWeights when the address is inside a weight. Other crashes keep
// their signal. On CUDA the weights live in device memory: the executor checksums them on the
// device after every candidate call that could have written them and exits with
// kExitWroteWeights on a change. Everything else (wrong results, unwritten outputs, nondeterminism, leaked
// threads/memory, writes into inputs or other sequences' KV) is detected by the verifier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::engine {

constexpr int kExitForbiddenSyscall = 86;
constexpr int kExitWroteWeights = 87;
// CUDA: an illegal address, a device-side assert or any other sticky error poisons the context;
// the executor cannot go on, says why on stderr and exits with this code.
constexpr int kExitDeviceFault = 88;

// Installs SIGSEGV/SIGBUS handlers (on an alternate stack) that classify faults inside any of
// `read_only_ranges` as weight writes.
void install_fault_handlers(std::vector<std::pair<const void *, size_t>> read_only_ranges);

// Installs the seccomp filter described above for the whole process (all threads).
Status install_seccomp_filter();

}  // namespace hp::engine
