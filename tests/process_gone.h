// Whether a process has ended, for tests that check nothing outlives what started it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace hp::test_support {

// Gone, or a zombie (ended, and its parent has not reaped it yet).
inline bool process_gone(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');  // the name may hold spaces and ')'
    if (paren == std::string::npos || paren + 2 >= line.size()) return true;
    const char state = line[paren + 2];
    return state == 'Z' || state == 'X';
}

// Polls for up to `seconds`: a killed process takes a moment to go.
inline bool process_gone_within(pid_t pid, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!process_gone(pid)) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

}  // namespace hp::test_support
