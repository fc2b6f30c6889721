// The executor's RPC: JSON lines over a unix stream socket. A request is
//   {"id": 7, "method": "verify", "params": {...}}
// and its reply {"id": 7, "ok": true, "result": {...}} or {"id": 7, "ok": false, "error": "..."}.
// Methods: status, load {path}, unload, verify {seed, n_case, greedy_steps, shapes, max_seq,
// max_history, max_chunk},
// measure {shapes, seed, warmup, min_rep, max_rep, target_seconds}, shutdown.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "hotpass/core/result.h"

namespace hp::engine {

// A connected stream socket with line framing.
class LineChannel {
public:
    explicit LineChannel(int fd = -1) : fd_(fd) {}
    ~LineChannel();
    LineChannel(LineChannel &&other) noexcept : fd_(other.fd_), pending_(std::move(other.pending_)) { other.fd_ = -1; }
    LineChannel &operator=(LineChannel &&other) noexcept;

    bool is_open() const { return fd_ >= 0; }
    int fd() const { return fd_; }
    // Reads one line (without '\n'). timeout_seconds < 0: wait forever. Errors on EOF/timeout.
    Result<std::string> read_line(double timeout_seconds);
    Status write_line(const std::string &line);
    void close();

private:
    int fd_ = -1;
    std::string pending_;
};

// Creates a listening unix socket at `path` (mode 0600; a stale file is replaced).
Result<int> listen_unix(const std::filesystem::path &path);
// Connects to `path`, retrying until timeout_seconds (the executor may still be starting).
Result<LineChannel> connect_unix(const std::filesystem::path &path, double timeout_seconds);

}  // namespace hp::engine
