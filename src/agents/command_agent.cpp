#include "hotpass/agents/command_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "hotpass/agents/task_brief.h"
#include "hotpass/core/clock.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/core/subprocess.h"
#include "hotpass/store/objects.h"

extern char **environ;

namespace hp::agents {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxSubmissionFiles = 1000;
constexpr uintmax_t kMaxSubmissionBytes = 32u << 20;

const char *kSubmitScript = R"sh(#!/bin/sh
# hotpass submit DIR: hands a candidate directory to the campaign and waits for its verdict.
# Prints the verdict. Exit: 0 faster, 1 not_faster, 2 refused, 3 build failed, 4 rejected, 5 infrastructure.
set -u
if [ "$#" -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: hotpass submit DIR   (DIR: a directory of forward-pass sources, e.g. src)" >&2
  exit 2
fi
queue="${HOTPASS_SUBMIT_QUEUE:?hotpass submit: HOTPASS_SUBMIT_QUEUE is not set; run it inside the campaign's workspace}"
id="$(date +%s%N)-$$"
if ! { mkdir "$queue/.incoming-$id" && cp -R "$1"/. "$queue/.incoming-$id/" && mv "$queue/.incoming-$id" "$queue/$id"; }; then
  echo "hotpass submit: cannot copy $1 into the queue $queue" >&2
  exit 2
fi
echo "hotpass submit: $1 queued as $id; waiting for its verdict" >&2
# The campaign touches $queue/.alive while it relays (every 0.1 s): stale for 30 s, it has ended.
# (A file, not a pid: the agent may run in a container with its own pid namespace.)
while [ ! -f "$queue/$id.verdict" ]; do
  if [ -f "$queue/.alive" ] && [ $(( $(date +%s) - $(stat -c %Y "$queue/.alive" 2>/dev/null || date +%s) )) -gt 30 ]; then
    echo "hotpass submit: the campaign has not relayed for 30 s; it has ended, and no verdict will come" >&2
    exit 5
  fi
  sleep 0.2
done
cat "$queue/$id.verdict"
exit "$(cat "$queue/$id.exit" 2>/dev/null || echo 5)"
)sh";

std::string tail_of(const std::string &text, size_t n) { return text.size() > n ? "..." + text.substr(text.size() - n) : text; }

// A turn's output log is cut off past this: the command is stopped and the log truncated.
constexpr uintmax_t kMaxTurnLogBytes = 64u << 20;

// The last `n` bytes of a file (the turn log can be large; only its end is reported).
std::string file_tail(const fs::path &path, size_t n) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return "";
    const std::streamoff size = in.tellg();
    const std::streamoff from = size > std::streamoff(n) ? size - std::streamoff(n) : 0;
    in.seekg(from);
    std::string text(size_t(size - from), '\0');
    in.read(text.data(), std::streamsize(text.size()));
    text.resize(size_t(in.gcount()));
    return text;
}

// Why `dir` cannot be a submission (symlinks, special files, too big), or empty.
std::string submission_problem(const fs::path &dir) {
    size_t n_file = 0;
    uintmax_t n_byte = 0;
    std::error_code code;
    for (auto it = fs::recursive_directory_iterator(dir, code); !code && it != fs::recursive_directory_iterator(); it.increment(code)) {
        const fs::file_status status = it->symlink_status();
        if (fs::is_symlink(status)) return fmt::format("{} is a symbolic link; submit plain files", fs::relative(it->path(), dir).string());
        if (fs::is_directory(status)) continue;
        if (!fs::is_regular_file(status)) return fmt::format("{} is not a regular file", fs::relative(it->path(), dir).string());
        n_byte += it->file_size(code);
        if (++n_file > kMaxSubmissionFiles) return fmt::format("more than {} files", kMaxSubmissionFiles);
    }
    if (code) return fmt::format("cannot list it: {}", code.message());
    if (n_byte > kMaxSubmissionBytes) return fmt::format("{} bytes, more than {}", n_byte, kMaxSubmissionBytes);
    if (n_file == 0) return "it holds no files";
    return "";
}

std::string verdict_text(const std::string &hash, const ResultSummary &result) {
    std::string text = fmt::format("candidate: {}\nverdict: {}\ntier: {}\n", hash, result.code, result.tier);
    if (result.speedup > 0) {
        text += fmt::format("speedup: {:.4f}x against the incumbent ({})\n", result.speedup, result.significant ? "significant" : "not significant");
    }
    text += fmt::format("reason: {}\n", result.reason);
    return text;
}

}  // namespace

int submit_exit_code(const std::string &code) {
    if (code == "faster") return 0;
    if (code == "not_faster") return 1;
    if (code == "build_failed" || code == "bad_exports") return 3;
    if (code == "infrastructure") return 5;
    return 4;
}

CommandAgent::CommandAgent(std::string name, CommandAgentConfig config, fs::path base_source, fs::path workspace,
                           std::vector<fs::path> protected_dirs)
    : name_(std::move(name)),
      config_(std::move(config)),
      base_source_(std::move(base_source)),
      workspace_(std::move(workspace)),
      protected_dirs_(std::move(protected_dirs)) {}

Status CommandAgent::prepare_workspace() {
    std::error_code code;
    fs::create_directories(workspace_ / ".hotpass" / "queue", code);
    if (!code) fs::create_directories(workspace_ / "bin", code);
    if (code) return error("cannot create the workspace {}: {}", workspace_.string(), code.message());
    if (!fs::exists(workspace_ / "src")) {
        // A resumed campaign keeps the agent's edits; a new workspace starts from the base sources.
        const fs::path staging = workspace_ / ".hotpass" / "src.incoming";
        fs::remove_all(staging, code);
        fs::copy(base_source_, staging, fs::copy_options::recursive, code);
        if (!code) fs::rename(staging, workspace_ / "src", code);
        if (code) return error("cannot copy {} into the workspace: {}", base_source_.string(), code.message());
    }
    HP_TRY(write_file_atomic(workspace_ / "bin" / "hotpass-submit", kSubmitScript));
    std::string wrapper = "#!/bin/sh\n# `hotpass submit DIR` goes to this campaign; other commands to the real hotpass.\n"
                          "if [ \"${1:-}\" = submit ]; then shift; exec \"$(dirname \"$0\")/hotpass-submit\" \"$@\"; fi\n";
    if (config_.hotpass_binary.empty()) wrapper += "echo 'only `hotpass submit DIR` is available in this workspace' >&2\nexit 2\n";
    else wrapper += fmt::format("exec '{}' \"$@\"\n", config_.hotpass_binary.string());
    HP_TRY(write_file_atomic(workspace_ / "bin" / "hotpass", wrapper));
    for (const char *script : {"hotpass", "hotpass-submit"}) {
        fs::permissions(workspace_ / "bin" / script, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec, code);
        if (code) return error("cannot make bin/{} executable: {}", script, code.message());
    }
    return {};
}

Status CommandAgent::write_task(const AgentContext &context) const {
    std::string task = fmt::format(
        "# Task for {} (turn {} of at most {})\n\n"
        "`src/` holds the forward pass's sources; edit them (or copies of them) in this workspace.\n"
        "Submit a candidate with `hotpass submit DIR` (e.g. `hotpass submit src`): it blocks until the\n"
        "campaign has built, verified and timed it, prints the verdict and exits 0 faster, 1 not_faster,\n"
        "2 refused, 3 build failed, 4 rejected, 5 infrastructure. Submit as often as you like; this turn\n"
        "ends after {:.0f} s of wall time (waiting for verdicts included); then everything it started is\n"
        "killed, background and setsid'd processes included (they are also killed when your command exits).\n\n",
        name_, turn_, config_.max_turns, config_.turn_seconds);
    task += task_rules(config_.device) + "\n" + verdict_guide() + "\n" + results_text(context) + "\n" + notes_text(context);
    return write_file_atomic(workspace_ / "TASK.md", task);
}

std::map<fs::path, std::string> CommandAgent::snapshot() const {
    std::map<fs::path, std::string> hashes;
    for (const fs::path &dir : protected_dirs_) {
        auto hash = store::hash_source_dir(dir);
        hashes[dir] = hash.ok() ? *hash : "unreadable: " + hash.error();
    }
    return hashes;
}

void CommandAgent::answer(const std::string &id, int exit_code, const std::string &text) const {
    const fs::path queue = workspace_ / ".hotpass" / "queue";
    (void)write_file_atomic(queue / (id + ".exit"), std::to_string(exit_code) + "\n");
    (void)write_file_atomic(queue / (id + ".verdict"), text);
}

void CommandAgent::relay(const AgentContext &context) {
    const fs::path queue = workspace_ / ".hotpass" / "queue";
    std::error_code code;
    // The heartbeat `hotpass submit` watches (kSubmitScript).
    if (!fs::exists(queue / ".alive", code)) std::ofstream(queue / ".alive").close();
    fs::last_write_time(queue / ".alive", fs::file_time_type::clock::now(), code);
    code.clear();
    for (auto it = fs::directory_iterator(queue, code); !code && it != fs::directory_iterator(); it.increment(code)) {
        const std::string id = it->path().filename().string();
        if (!it->is_directory() || id.empty() || id[0] == '.' || pending_.count(id) || fs::exists(queue / (id + ".verdict"))) continue;
        if (const std::string problem = submission_problem(it->path()); !problem.empty()) {
            answer(id, 2, fmt::format("verdict: refused\nreason: the submission cannot be a candidate: {}\n", problem));
            continue;
        }
        Proposal proposal;
        proposal.source_dir = it->path();
        proposal.parent = context.incumbent;
        proposal.notes = fmt::format("submitted by {} in turn {}", name_, turn_);
        if (Status meta = read_candidate_json(it->path(), proposal); !meta.ok()) {
            answer(id, 2, fmt::format("verdict: refused\nreason: {}\n", meta.error()));
            continue;
        }
        if (!context.submissions) {
            answer(id, 2, "verdict: refused\nreason: this agent is not running inside a campaign\n");
            continue;
        }
        auto hash = context.submissions->submit(name_, proposal);
        if (!hash.ok()) {
            answer(id, 2, fmt::format("verdict: refused\nreason: {}\n", hash.error()));
            continue;
        }
        pending_[id] = *hash;
        ++n_submitted_;
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
        std::optional<ResultSummary> result;
        if (context.submissions) result = context.submissions->result(it->second);
        if (!result) {
            ++it;
            continue;
        }
        answer(it->first, submit_exit_code(result->code), verdict_text(it->second, *result));
        turn_verdicts_.push_back(fmt::format("{} {}", it->second.substr(0, 12), result->code));
        it = pending_.erase(it);
    }
}

ProposeOutcome CommandAgent::propose(const AgentContext &context) {
    if (turn_ >= config_.max_turns) return {std::nullopt, fmt::format("retired: its {} turns are used", config_.max_turns), true};
    if (config_.command.empty()) return {std::nullopt, "retired: no command configured (--agent-command)", true};
    ++turn_;
    if (Status ready = prepare_workspace(); !ready.ok()) return {std::nullopt, ready.error(), ++failures_ >= config_.max_failures};
    if (Status task = write_task(context); !task.ok()) return {std::nullopt, task.error(), ++failures_ >= config_.max_failures};
    const auto before = snapshot();
    n_submitted_ = 0;
    turn_verdicts_.clear();

    // Everything the child needs is prepared before fork (the campaign is multithreaded).
    const fs::path log = workspace_ / ".hotpass" / fmt::format("turn-{}.log", turn_);
    std::map<std::string, std::string> env;
    for (char **entry = environ; *entry; ++entry) {
        const std::string item = *entry;
        const size_t eq = item.find('=');
        if (eq != std::string::npos) env[item.substr(0, eq)] = item.substr(eq + 1);
    }
    const std::string path = env.count("PATH") ? env["PATH"] : "/usr/local/bin:/usr/bin:/bin";
    env["PATH"] = (workspace_ / "bin").string() + ":" + path;
    env["HOTPASS_WORKSPACE"] = workspace_.string();
    env["HOTPASS_SUBMIT_QUEUE"] = (workspace_ / ".hotpass" / "queue").string();
    env["HOTPASS_AGENT"] = name_;
    env["HOTPASS_TURN"] = std::to_string(turn_);
    env["HOTPASS_TURN_SECONDS"] = fmt::format("{:.0f}", config_.turn_seconds);
    for (const std::string &item : config_.env) {
        const size_t eq = item.find('=');
        if (eq != std::string::npos && eq > 0) env[item.substr(0, eq)] = item.substr(eq + 1);
    }
    std::vector<std::string> env_items;
    for (const auto &[key, value] : env) env_items.push_back(key + "=" + value);
    std::vector<char *> envp;
    for (std::string &item : env_items) envp.push_back(item.data());
    envp.push_back(nullptr);
    std::string shell = "/bin/sh", dash_c = "-c", command = config_.command;
    char *argv[] = {shell.data(), dash_c.data(), command.data(), nullptr};
    const std::string cwd = workspace_.string(), log_path = log.string();

    const double start = now_seconds();
    ReaperFork held;
    const pid_t pid = fork_reaper(held);
    if (pid < 0) return {std::nullopt, fmt::format("cannot fork: {}", std::strerror(errno)), ++failures_ >= config_.max_failures};
    if (pid == 0) {
        setpgid(0, 0);
        const int out = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (out < 0 || null < 0 || chdir(cwd.c_str()) != 0) _exit(126);
        dup2(null, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(out, STDERR_FILENO);
        exec_reaped(held, argv[0], argv, envp.data());
    }
    setpgid(pid, pid);
    track_process_group(pid);  // killed if hotpass quits at once (a second Ctrl-C)
    int status = 0;
    bool exited = false, timed_out = false, stopped = false, flooded = false;
    while (true) {
        if (reaper_exited(pid)) {
            exited = true;
            break;
        }
        if (now_seconds() - start > config_.turn_seconds) {
            timed_out = true;
            break;
        }
        if (context.submissions && context.submissions->stopping()) {
            stopped = true;
            break;
        }
        if (std::error_code size_code; fs::file_size(log, size_code) > kMaxTurnLogBytes && !size_code) {
            flooded = true;
            break;
        }
        relay(context);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Nothing the command started outlives the turn: its reaper has already ended what a finished
    // command left behind (setsid'd daemons included), and ends everything on a timeout or a stop.
    status = exited ? reap_reaper(pid) : end_reaper(pid);
    relay(context);  // submissions queued just before the end get refused or answered now
    for (const auto &[id, hash] : pending_) answer(id, 5, fmt::format("candidate: {}\nverdict: unknown\nreason: the turn ended before the verdict\n", hash));
    pending_.clear();
    const double seconds = now_seconds() - start;
    if (std::error_code size_code; fs::file_size(log, size_code) > kMaxTurnLogBytes && !size_code) {  // also a command that ended in time
        flooded = true;
        fs::resize_file(log, kMaxTurnLogBytes, size_code);
    }
    const std::string output = file_tail(log, 4096);
    const std::string submitted = fmt::format("{} submission(s){}{}", n_submitted_, turn_verdicts_.empty() ? "" : ": ",
                                              fmt::join(turn_verdicts_, ", "));

    // Edits outside the workspace retire the agent whatever else happened.
    const auto after = snapshot();
    for (const auto &[dir, hash] : before) {
        if (after.at(dir) != hash) {
            return {std::nullopt,
                    fmt::format("retired: turn {} changed {} outside its workspace ({}); {}", turn_, dir.string(), submitted,
                                log.string()),
                    true, n_submitted_};
        }
    }
    std::string failure;
    if (flooded) failure = fmt::format("flooded: its output passed {} MB; killed with everything it started", kMaxTurnLogBytes >> 20);
    else if (timed_out) failure = fmt::format("hung: killed with everything it started after {:.0f} s", config_.turn_seconds);
    else if (WIFSIGNALED(status) && !stopped) failure = fmt::format("crashed: killed by signal {}", WTERMSIG(status));
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && output.find("not found") != std::string::npos) failure = "crashed: command not found (exit 127)";
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) failure = fmt::format("crashed: exit status {}", WEXITSTATUS(status));
    if (stopped) return {std::nullopt, fmt::format("turn {} stopped: the campaign is ending ({})", turn_, submitted), true, n_submitted_};
    if (!failure.empty()) {
        ++failures_;
        const bool retire = failures_ >= config_.max_failures;
        std::string last = tail_of(output, 400);
        std::replace(last.begin(), last.end(), '\n', ' ');
        return {std::nullopt,
                fmt::format("{}turn {} {} after {:.1f} s ({}; {} failed turn(s) in a row); output: {}", retire ? "retired: " : "", turn_,
                            failure, seconds, submitted, failures_, last),
                retire, n_submitted_};
    }
    failures_ = 0;
    const bool last_turn = turn_ >= config_.max_turns;
    return {std::nullopt, fmt::format("turn {} finished after {:.1f} s, {}{}", turn_, seconds, submitted, last_turn ? "; its last turn" : ""),
            last_turn, n_submitted_};
}

}  // namespace hp::agents
