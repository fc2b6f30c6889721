// Supervisor: starts an executor process, talks to it over its socket with a deadline per call,
// and when the executor crashes, hangs or exits, reaps it and starts a new one on the next call.
// A candidate's crash costs one executor restart, never the caller.
#pragma once

#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <thread>

#include "hotpass/core/result.h"
#include "hotpass/engine/rpc.h"

namespace hp::tune {

struct ExecutorLaunch {
    std::filesystem::path hotpass_binary;  // default: this process's executable
    std::string model;
    uint64_t seed = 0;
    int n_layer = 0;
    std::string incumbent = "baseline";
    int n_thread = 1;
    int max_loads = 32;
    bool sandbox = true;
    std::string device = "cpu";  // cpu | cuda
    int device_index = 0;
    std::filesystem::path work_dir;  // socket and executor.log live here (empty: a temporary folder of its own, removed with it)
    double start_timeout_seconds = 300;
};

enum class CallFailure { none, error_reply, crashed, hung, exited, start_failed };

struct CallOutcome {
    CallFailure failure = CallFailure::none;
    nlohmann::json result;   // on success
    std::string message;     // error reply, or what happened to the executor
    int signal = 0;          // crashed: the signal; exited: see exit_code
    int exit_code = -1;
    std::string log_tail;    // last lines the executor wrote to stderr

    bool ok() const { return failure == CallFailure::none; }
};

class Supervisor {
public:
    explicit Supervisor(ExecutorLaunch launch);
    ~Supervisor();
    Supervisor(const Supervisor &) = delete;
    Supervisor &operator=(const Supervisor &) = delete;

    // Sends one RPC; starts the executor first if none is running. On a crash or a missed
    // deadline the executor is killed and reaped; the next call starts a fresh one.
    CallOutcome call(const std::string &method, const nlohmann::json &params, double deadline_seconds);

    Status ensure_started();
    void stop();  // asks for shutdown, then kills if needed
    int n_start() const { return n_start_; }
    double last_start_seconds() const { return last_start_seconds_; }
    bool running() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }  // the running executor's, -1 when none
    const ExecutorLaunch &launch() const { return launch_; }

private:
    void reap(CallOutcome &outcome, bool kill_first);
    std::string read_log_tail() const;

    ExecutorLaunch launch_;
    pid_t pid_ = -1;
    bool owns_work_dir_ = false;
    std::thread::id owner_ = std::this_thread::get_id();  // the thread that starts its executors
    engine::LineChannel channel_;
    int next_id_ = 1;
    int n_start_ = 0;
    double last_start_seconds_ = 0;
};

}  // namespace hp::tune
