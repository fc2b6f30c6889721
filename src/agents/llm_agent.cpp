#include "hotpass/agents/llm_agent.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "hotpass/agents/task_brief.h"
#include "hotpass/core/clock.h"
#include "hotpass/core/json_text.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/store/objects.h"
#include "hotpass/store/store.h"

namespace hp::agents {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxReplyFiles = 20;
constexpr size_t kMaxReplyFileBytes = 512 << 10;
constexpr size_t kMaxStoredResponse = 256 << 10;
// A chat completion with the files of a forward pass is tens of KB; a reply past this is refused.
constexpr size_t kMaxReplyBytes = size_t(16) << 20;
constexpr size_t kAttemptsFedBack = 4;

std::string env_or(const char *first, const char *second) {
    for (const char *name : {first, second}) {
        if (const char *value = std::getenv(name); value && *value) return value;
    }
    return "";
}

std::string trim(const std::string &text) {
    const size_t begin = text.find_first_not_of(" \t\r");
    if (begin == std::string::npos) return "";
    return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

// Why `path` cannot name a file inside the forward pass's directory, or empty.
std::string path_problem(const std::string &path) {
    if (path.empty()) return "an empty path";
    if (path.size() > 200) return "a path longer than 200 characters";
    for (const char c : path) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != '/') {
            return fmt::format("'{}' has a character other than letters, digits, _ - . /", path);
        }
    }
    const fs::path p(path);
    if (p.is_absolute()) return fmt::format("'{}' is absolute", path);
    for (const fs::path &part : p) {
        if (part == ".." ) return fmt::format("'{}' leaves the directory", path);
    }
    if (p.lexically_normal().string().rfind("..", 0) == 0 || p.filename().empty()) return fmt::format("'{}' is not a file inside the directory", path);
    return "";
}

// Splits "http://host:port/v1" into the origin httplib connects to and the path prefix.
Result<std::pair<std::string, std::string>> split_url(const std::string &url) {
    const size_t scheme = url.find("://");
    if (scheme == std::string::npos) return error("base URL '{}' has no scheme (http:// or https://)", url);
    const std::string name = url.substr(0, scheme);
    if (name != "http" && name != "https") return error("base URL '{}': only http and https are supported", url);
    const size_t slash = url.find('/', scheme + 3);
    std::string origin = url.substr(0, slash), prefix = slash == std::string::npos ? "" : url.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (origin.size() <= scheme + 3) return error("base URL '{}' has no host", url);
    return std::pair{origin, prefix};
}

// Retry-After in seconds (the delta-seconds form; an HTTP date or nothing: 30 s).
double retry_after_seconds(const std::string &header) {
    char *end = nullptr;
    const double seconds = std::strtod(header.c_str(), &end);
    if (header.empty() || end == header.c_str() || seconds < 0) return 30;
    return std::min(seconds, 600.0);
}

std::string describe(httplib::Error error, double timeout_seconds) {
    switch (error) {
    case httplib::Error::Connection: return "unreachable: cannot connect to the endpoint";
    case httplib::Error::ConnectionTimeout: return fmt::format("unreachable: no connection within {:.0f} s", timeout_seconds);
    case httplib::Error::Read: return fmt::format("slow or dropped: nothing received for {:.0f} s, or the connection closed", timeout_seconds);
    case httplib::Error::Write: return "the request could not be sent (write failed)";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLServerVerification: return "TLS connection failed";
    default: return fmt::format("request failed: {}", httplib::to_string(error));
    }
}

}  // namespace

LlmConfig llm_config_from_env() {
    LlmConfig config;
    config.base_url = env_or("HOTPASS_LLM_BASE_URL", "OPENAI_BASE_URL");
    config.model = env_or("HOTPASS_LLM_MODEL", "OPENAI_MODEL");
    config.api_key = env_or("HOTPASS_LLM_API_KEY", "OPENAI_API_KEY");
    return config;
}

Status validate_llm_config(const LlmConfig &config) {
    if (config.base_url.empty()) {
        return error("llm agents need a chat endpoint: set HOTPASS_LLM_BASE_URL (or OPENAI_BASE_URL), e.g. http://127.0.0.1:8000/v1, or pass --llm-url");
    }
    if (auto url = split_url(config.base_url); !url.ok()) return Error{url.error()};
    if (config.model.empty()) return error("llm agents need a model name: set HOTPASS_LLM_MODEL (or OPENAI_MODEL) or pass --llm-model");
    if (config.max_tokens < 1 || config.max_turns < 1 || config.timeout_seconds <= 0) {
        return error("llm agents: max tokens, turns and the request timeout must be positive");
    }
    return {};
}

Result<ReplyFiles> parse_reply_files(const std::string &content) {
    ReplyFiles reply;
    std::vector<std::string> lines;
    for (size_t start = 0; start <= content.size();) {
        const size_t end = std::min(content.find('\n', start), content.size());
        lines.push_back(content.substr(start, end - start));
        start = end + 1;
    }
    for (size_t i = 0; i < lines.size(); ++i) {
        if (trim(lines[i]).rfind("```", 0) != 0) {
            reply.notes += lines[i] + "\n";
            continue;
        }
        const size_t header = i + 1;
        std::string first = header < lines.size() ? trim(lines[header]) : "";
        size_t close = header;
        while (close < lines.size() && trim(lines[close]) != "```") ++close;
        if (first.rfind("// file:", 0) != 0) {
            i = close;  // a code block that is not a file: part of the explanation
            continue;
        }
        const std::string path = trim(first.substr(8));
        if (close >= lines.size()) return error("the block for {} is not terminated (the reply may have hit max_tokens)", path);
        if (const std::string problem = path_problem(path); !problem.empty()) return error("refused file path: {}", problem);
        std::string body;
        for (size_t line = header + 1; line < close; ++line) body += lines[line] + "\n";
        if (body.size() > kMaxReplyFileBytes) return error("{} is larger than {} bytes", path, kMaxReplyFileBytes);
        reply.files[fs::path(path).lexically_normal().string()] = std::move(body);
        if (reply.files.size() > kMaxReplyFiles) return error("more than {} files in one reply", kMaxReplyFiles);
        i = close;
    }
    if (reply.files.empty()) return error("no file block (a fenced code block whose first line is `// file: PATH`)");
    reply.notes = trim(reply.notes);
    return reply;
}

LlmAgent::LlmAgent(std::string name, LlmConfig config, fs::path base_source, fs::path workspace, store::Store *store, int64_t campaign_id)
    : name_(std::move(name)),
      config_(std::move(config)),
      current_(std::move(base_source)),
      workspace_(std::move(workspace)),
      store_(store),
      campaign_id_(campaign_id) {}

json LlmAgent::messages(const AgentContext &context) const {
    const std::string system =
        fmt::format("You are a performance engineer optimising the forward pass of an LLM inference engine ({}).\n\n",
                    config_.device == "cuda" ? "CUDA C++ on an NVIDIA GPU" : "C++ on the CPU") +
        task_rules(config_.device) +
        "\n" + verdict_guide() +
        "\n## Reply format\n\nReply with the complete new contents of every file you change, each in a fenced code block whose "
        "first line is `// file: PATH` (PATH relative to the sources' directory, e.g. `// file: gemv.cpp`). Files you leave out stay "
        "as they are. Change little per reply so a failure is easy to trace. Text outside the blocks is kept as your notes.\n";
    std::string feedback;
    const size_t first = attempts_.size() > kAttemptsFedBack ? attempts_.size() - kAttemptsFedBack : 0;
    for (size_t i = first; i < attempts_.size(); ++i) {
        const Attempt &a = attempts_[i];
        feedback += fmt::format("- turn {}: changed {}{} -> candidate `{}`: `{}`\n{}\n", a.turn, fmt::join(a.files, ", "),
                                a.knobs.empty() ? "" : " (knobs " + knobs_text(a.knobs) + ")", a.hash.substr(0, 12),
                                a.code.empty() ? "no verdict yet" : a.code, a.reason.empty() ? "" : "```\n" + a.reason.substr(0, 3000) + "\n```");
    }
    if (!last_problem_.empty()) feedback += fmt::format("- your previous reply could not be used: {}\n", last_problem_);
    std::string results = results_text(context) + "\n" + notes_text(context, 10) + "\n";
    if (!feedback.empty()) results += "## Your previous attempts\n\n" + feedback + "\n";

    // The sources, whole files in name order, within the byte budget.
    std::vector<fs::path> files;
    std::error_code code;
    for (auto it = fs::recursive_directory_iterator(current_, code); !code && it != fs::recursive_directory_iterator(); it.increment(code)) {
        if (it->is_regular_file() && it->path().filename() != "candidate.json") files.push_back(fs::relative(it->path(), current_));
    }
    std::sort(files.begin(), files.end());
    const size_t fixed = system.size() + results.size() + 400;
    size_t budget = config_.max_prompt_bytes > fixed ? config_.max_prompt_bytes - fixed : 0;
    std::string sources, omitted;
    for (const fs::path &file : files) {
        auto text = read_text_file(current_ / file);
        if (!text.ok()) continue;
        if (text->size() + 64 > budget) {
            omitted += fmt::format(" {} ({} bytes)", file.string(), text->size());
            continue;
        }
        budget -= text->size() + 64;
        sources += fmt::format("```\n// file: {}\n{}{}```\n\n", file.string(), *text, text->empty() || text->back() == '\n' ? "" : "\n");
    }
    if (!omitted.empty()) sources += fmt::format("Not shown (prompt budget):{}\n\n", omitted);
    if (!current_knobs_.empty()) {
        sources += fmt::format("These sources are built with the knobs {}. They stay unless your candidate.json sets another value.\n\n",
                               knobs_text(current_knobs_));
    }
    const std::string user = "## The sources of the forward pass\n\n" + sources + results +
                             "Propose one change that makes the forward pass faster on this traffic while staying correct.";
    return json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}});
}

ProposeOutcome LlmAgent::fail(const std::string &reason, double retry_after) {
    ++failures_;
    const bool retire = failures_ >= config_.max_failures || turn_ >= config_.max_turns;
    ProposeOutcome outcome{std::nullopt, fmt::format("{}turn {}: {} ({} failed turn(s) in a row)", retire ? "retired: " : "", turn_, reason, failures_),
                           retire};
    outcome.retry_after_seconds = retry_after;
    return outcome;
}

void LlmAgent::record_verdict(const ResultSummary &result) {
    for (Attempt &attempt : attempts_) {
        if (attempt.hash != result.hash || !attempt.code.empty()) continue;
        attempt.code = result.code;
        attempt.reason = result.reason;
        if (result.code == "faster" || result.code == "not_faster") {
            current_ = workspace_ / fmt::format("turn-{}", attempt.turn);
            current_knobs_ = attempt.knobs;
        }
    }
}

void LlmAgent::observe(const ResultSummary &result) {
    if (result.agent == name_) record_verdict(result);
}

ProposeOutcome LlmAgent::propose(const AgentContext &context) {
    if (turn_ >= config_.max_turns) return {std::nullopt, fmt::format("retired: its {} turns are used", config_.max_turns), true};
    if (Status valid = validate_llm_config(config_); !valid.ok()) return {std::nullopt, "retired: " + valid.error(), true};
    ++turn_;
    const auto url = split_url(config_.base_url).value();
    const std::string path = url.second + "/chat/completions";
    const json request = {{"model", config_.model}, {"messages", messages(context)}, {"max_tokens", config_.max_tokens}};
    const std::string body = json_text(request);

    httplib::Client client(url.first);
    const auto timeout = std::chrono::duration<double>(config_.timeout_seconds);
    client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    client.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    // One deadline for the whole reply: httplib's read timeout is per recv, so an endpoint that
    // sends a byte now and then could hold the turn, and the campaign's end, without limit. The
    // reply is also capped in size, and a stopping campaign abandons it.
    const double start = now_seconds();
    httplib::Request http;
    http.method = "POST";
    http.path = path;
    http.body = body;
    http.set_header("Content-Type", "application/json");
    if (!config_.api_key.empty()) http.set_header("Authorization", "Bearer " + config_.api_key);
    std::string reply_body;
    std::string abandoned;  // why the reply was cut off, if it was
    http.content_receiver = [&](const char *data, size_t length, uint64_t, uint64_t) {
        if (reply_body.size() + length > kMaxReplyBytes) abandoned = fmt::format("garbage reply: longer than {} MB", kMaxReplyBytes >> 20);
        else if (now_seconds() - start > config_.timeout_seconds) abandoned = fmt::format("slow: no complete reply within {:.0f} s", config_.timeout_seconds);
        else if (context.submissions && context.submissions->stopping()) abandoned = "the campaign is stopping";
        if (!abandoned.empty()) return false;
        reply_body.append(data, length);
        return true;
    };
    httplib::Response reply;
    httplib::Error http_error = httplib::Error::Success;
    const bool replied = client.send(http, reply, http_error);

    store::ExchangeRecord exchange;
    exchange.campaign_id = campaign_id_;
    exchange.agent = name_;
    exchange.turn = turn_;
    exchange.url = config_.base_url + "/chat/completions";
    exchange.model = config_.model;
    exchange.request = body;
    exchange.latency_s = now_seconds() - start;
    exchange.elapsed_s = context.submissions ? context.submissions->elapsed_seconds() : 0;
    auto record = [&](const std::string &problem) {
        exchange.error = problem;
        if (store_) (void)store_->add_exchange(exchange);
    };
    if (!replied || !abandoned.empty()) {
        const std::string problem = !abandoned.empty() ? abandoned : describe(http_error, config_.timeout_seconds);
        record(problem);
        return fail(problem);
    }
    exchange.http_status = reply.status;
    exchange.response = reply_body.substr(0, kMaxStoredResponse);
    if (reply.status == 429) {
        const double wait = retry_after_seconds(reply.get_header_value("Retry-After"));
        const std::string problem = fmt::format("rate limited (HTTP 429); retrying after {:.0f} s", wait);
        record(problem);
        return fail(problem, wait);
    }
    if (reply.status != 200) {
        const std::string problem = fmt::format("HTTP status {}: {}", reply.status, reply_body.substr(0, 300));
        record(problem);
        return fail(problem, reply.status >= 500 ? 5.0 : 0.0);
    }
    const json parsed = json::parse(reply_body, nullptr, false);
    if (parsed.is_object() && parsed.contains("usage") && parsed["usage"].is_object()) {
        exchange.prompt_tokens = parsed["usage"].value("prompt_tokens", int64_t(0));
        exchange.completion_tokens = parsed["usage"].value("completion_tokens", int64_t(0));
    }
    const json *content = nullptr;
    if (parsed.is_object() && parsed.contains("choices") && parsed["choices"].is_array() && !parsed["choices"].empty()) {
        const json &choice = parsed["choices"][0];
        if (choice.is_object() && choice.contains("message") && choice["message"].is_object() && choice["message"].contains("content") &&
            choice["message"]["content"].is_string()) {
            content = &choice["message"]["content"];
        }
    }
    if (!content) {
        const std::string problem = fmt::format("garbage reply: not a chat completion ({})", reply_body.substr(0, 200));
        record(problem);
        return fail(problem);
    }
    auto files = parse_reply_files(content->get<std::string>());
    if (!files.ok()) {
        const std::string problem = "garbage reply: " + files.error();
        record(problem);
        last_problem_ = files.error();
        return fail(problem);
    }
    record("");
    last_problem_.clear();

    // The candidate: a copy of the current sources with the reply's files written over it.
    const fs::path dir = workspace_ / fmt::format("turn-{}", turn_);
    std::error_code code;
    fs::remove_all(dir, code);
    fs::create_directories(dir.parent_path(), code);
    fs::copy(current_, dir, fs::copy_options::recursive, code);
    if (code) return fail(fmt::format("cannot copy the sources to {}: {}", dir.string(), code.message()));
    fs::remove(dir / "candidate.json", code);
    Attempt attempt;
    attempt.turn = turn_;
    for (const auto &[file, text] : files->files) {
        fs::create_directories((dir / file).parent_path(), code);
        if (Status written = write_file_atomic(dir / file, text); !written.ok()) return fail(written.error());
        attempt.files.push_back(file);
    }
    Proposal proposal;
    proposal.source_dir = dir;
    proposal.parent = context.incumbent;
    proposal.notes = fmt::format("{} turn {}: {}", name_, turn_, files->notes.substr(0, 500));
    // The current sources' knobs carry over (they are not in the sources: a candidate.json is never
    // copied forward); the reply's candidate.json sets values over them.
    proposal.knobs = current_knobs_;
    if (Status meta = read_candidate_json(dir, proposal); !meta.ok()) {
        last_problem_ = meta.error();
        return fail("garbage reply: " + meta.error());
    }
    attempt.knobs = proposal.knobs;
    failures_ = 0;
    if (!context.submissions) {
        auto hash = store::hash_source_dir(dir);
        attempt.hash = hash.ok() ? store::candidate_hash(*hash, proposal.knobs) : "";
        attempts_.push_back(attempt);
        return {std::move(proposal), "", turn_ >= config_.max_turns};
    }
    auto hash = context.submissions->submit(name_, proposal);
    if (!hash.ok()) return fail("the campaign refused the candidate: " + hash.error());
    attempt.hash = *hash;
    attempts_.push_back(attempt);
    // Wait for the verdict, so the next turn can feed it back.
    std::optional<ResultSummary> result;
    while (!(result = context.submissions->result(*hash)) && !context.submissions->stopping()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (result) record_verdict(*result);
    ProposeOutcome outcome{std::nullopt,
                           fmt::format("turn {}: changed {} -> {} {}", turn_, fmt::join(attempts_.back().files, ", "), hash->substr(0, 12),
                                       result ? result->code : "(campaign ended before the verdict)"),
                           turn_ >= config_.max_turns};
    outcome.n_submitted = 1;
    return outcome;
}

}  // namespace hp::agents
