#include "hotpass/tune/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

#include "hotpass/core/clock.h"
#include "hotpass/core/json_text.h"

namespace hp::tune {
namespace fs = std::filesystem;

Supervisor::Supervisor(ExecutorLaunch launch) : launch_(std::move(launch)) {
    if (launch_.hotpass_binary.empty()) {
        std::error_code code;
        launch_.hotpass_binary = fs::read_symlink("/proc/self/exe", code);
    }
    if (launch_.work_dir.empty()) {  // its own folder, removed with it
        static std::atomic<int> n_default{0};
        launch_.work_dir = fs::temp_directory_path() / fmt::format("hotpass-{}-{}", getpid(), n_default++);
        owns_work_dir_ = true;
    }
    std::error_code code;
    fs::create_directories(launch_.work_dir, code);
}

Supervisor::~Supervisor() {
    stop();
    std::error_code code;
    if (owns_work_dir_) fs::remove_all(launch_.work_dir, code);
}

Status Supervisor::ensure_started() {
    if (pid_ > 0) return Status::success();
    // The executor's death signal follows the thread that forks it: a thread that ends would take
    // the executor with it mid-candidate. One supervisor, one thread.
    HP_CHECK(std::this_thread::get_id() == owner_, "a Supervisor starts executors from the thread that created it");
    std::error_code code;
    fs::create_directories(launch_.work_dir, code);  // a caller may share the folder and have removed it
    if (code) return error("cannot create {}: {}", launch_.work_dir.string(), code.message());
    const double start = now_seconds();
    const fs::path socket = launch_.work_dir / fmt::format("executor-{}.sock", n_start_);
    const fs::path log = launch_.work_dir / "executor.log";
    std::vector<std::string> args = {launch_.hotpass_binary.string(), "executor",
                                     "--model", launch_.model,
                                     "--seed", std::to_string(launch_.seed),
                                     "--layers", std::to_string(launch_.n_layer),
                                     "--socket", socket.string(),
                                     "--incumbent", launch_.incumbent,
                                     "--threads", std::to_string(launch_.n_thread),
                                     "--max-loads", std::to_string(launch_.max_loads)};
    if (!launch_.sandbox) args.push_back("--no-sandbox");
    if (launch_.device != "cpu") {
        args.insert(args.end(), {"--device", launch_.device, "--device-index", std::to_string(launch_.device_index)});
    }
    std::vector<char *> argv;
    for (auto &arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return error("fork: {}", std::strerror(errno));
    if (pid == 0) {
        // Its own process group: a terminal's Ctrl-C reaches hotpass, which decides, not the
        // executor mid-candidate (that would be recorded as the candidate's crash). It still dies
        // with hotpass (a hanging candidate would otherwise spin on with no deadline to stop it).
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) dup2(fd, STDERR_FILENO);
        const int null_fd = ::open("/dev/null", O_RDWR);
        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
            dup2(null_fd, STDOUT_FILENO);
        }
        execv(argv[0], argv.data());
        _exit(127);
    }
    pid_ = pid;
    ++n_start_;
    // Connect, but notice an executor that dies during start-up instead of waiting it out.
    while (true) {
        auto channel = engine::connect_unix(socket, 0.2);
        if (channel.ok()) {
            channel_ = std::move(channel).value();
            break;
        }
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return error("the executor exited during start-up ({}): {}",
                         WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status)) : fmt::format("exit {}", WEXITSTATUS(status)),
                         read_log_tail());
        }
        if (now_seconds() - start > launch_.start_timeout_seconds) {
            CallOutcome ignored;
            reap(ignored, true);
            return error("the executor did not start within {:.0f} s", launch_.start_timeout_seconds);
        }
    }
    last_start_seconds_ = now_seconds() - start;
    spdlog::info("executor {} started in {:.2f} s (pid {})", n_start_, last_start_seconds_, pid_);
    return Status::success();
}

std::string Supervisor::read_log_tail() const {
    std::ifstream in(launch_.work_dir / "executor.log");
    std::deque<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
        lines.push_back(line);
        if (lines.size() > 8) lines.pop_front();
    }
    std::string tail;
    for (const auto &kept : lines) tail += kept + "\n";
    return tail;
}

void Supervisor::reap(CallOutcome &outcome, bool kill_first) {
    channel_.close();
    if (pid_ <= 0) return;
    if (kill_first) kill(pid_, SIGKILL);
    int status = 0;
    // An executor whose connection dropped may still be on its way out: give it a moment.
    for (int i = 0; i < 200; ++i) {
        if (waitpid(pid_, &status, WNOHANG) == pid_) break;
        if (i == 199) {
            kill(pid_, SIGKILL);
            waitpid(pid_, &status, 0);
        }
        usleep(5000);
    }
    if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
    if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
    outcome.log_tail = read_log_tail();
    pid_ = -1;
}

CallOutcome Supervisor::call(const std::string &method, const nlohmann::json &params, double deadline_seconds) {
    CallOutcome outcome;
    if (Status started = ensure_started(); !started.ok()) {
        outcome.failure = CallFailure::start_failed;
        outcome.message = started.error();
        return outcome;
    }
    const int id = next_id_++;
    const nlohmann::json request = {{"id", id}, {"method", method}, {"params", params}};
    if (!channel_.write_line(json_text(request)).ok()) {
        reap(outcome, false);
        outcome.failure = outcome.signal ? CallFailure::crashed : CallFailure::exited;
        outcome.message = "the executor was gone before the request";
        return outcome;
    }
    auto line = channel_.read_line(deadline_seconds);
    if (!line.ok()) {
        const bool hung = line.error().find("timed out") != std::string::npos;
        reap(outcome, hung);
        outcome.failure = hung ? CallFailure::hung : outcome.signal ? CallFailure::crashed : CallFailure::exited;
        outcome.message = hung ? fmt::format("no reply to '{}' within {:.1f} s", method, deadline_seconds)
                               : fmt::format("the executor died during '{}'", method);
        if (hung) outcome.signal = 0;
        return outcome;
    }
    const auto reply = nlohmann::json::parse(*line, nullptr, false);
    if (reply.is_discarded() || !reply.is_object() || reply.value("id", -1) != id) {
        reap(outcome, true);
        outcome.failure = CallFailure::crashed;
        outcome.message = "the executor sent a malformed reply";
        return outcome;
    }
    if (!reply.value("ok", false)) {
        outcome.failure = CallFailure::error_reply;
        outcome.message = reply.value("error", "unknown error");
        return outcome;
    }
    outcome.result = reply["result"];
    // An executor that recycles itself exits after this reply; reap it now.
    if ((method == "unload" && outcome.result.value("recycle", false)) || method == "shutdown") {
        CallOutcome ignored;
        reap(ignored, false);
    }
    return outcome;
}

void Supervisor::stop() {
    if (pid_ <= 0) return;
    if (channel_.is_open()) {
        (void)channel_.write_line(json_text(nlohmann::json({{"id", next_id_++}, {"method", "shutdown"}})));
        (void)channel_.read_line(5.0);
    }
    CallOutcome ignored;
    reap(ignored, false);
}

}  // namespace hp::tune
