// llm: talks to an OpenAI-compatible chat endpoint itself (POST <base_url>/chat/completions). One
// turn = one request: the rules and verdict codes (task_brief), the forward pass's sources (whole
// files, the prompt bounded by max_prompt_bytes), the campaign's latest results and notes, and the
// verdicts and build errors of this agent's own last attempts. The reply names the files it changes
// (parse_reply_files); they are applied to a copy of the agent's current sources and submitted, and
// the verdict is awaited so the next turn can feed it back. A correct candidate becomes the agent's
// current sources. Every exchange is recorded in the store (llm_exchanges). Failures are data: an
// unreachable or slow endpoint, a non-200 status, a 429 (the next turn waits for Retry-After), a
// reply with no usable file; max_failures failed turns in a row, or max_turns turns, retire it.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hotpass/agents/agent.h"
#include "hotpass/core/result.h"

namespace hp::store {
class Store;
}

namespace hp::agents {

struct LlmConfig {
    std::string base_url;  // e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1
    std::string model;
    std::string api_key;   // sent as a bearer token; never written to the store
    int max_tokens = 8192;            // completion tokens per request
    int max_turns = 10;               // requests per agent, then it retires
    int max_failures = 3;             // failed turns in a row before it retires
    double timeout_seconds = 300;     // connect, write and read timeouts of one request
    size_t max_prompt_bytes = 120000; // sources beyond this are listed, not sent
    std::string device = "cpu";       // the campaign's device: the rules the prompt states
};

// HOTPASS_LLM_BASE_URL (else OPENAI_BASE_URL), HOTPASS_LLM_MODEL (else OPENAI_MODEL),
// HOTPASS_LLM_API_KEY (else OPENAI_API_KEY); unset ones stay empty.
LlmConfig llm_config_from_env();
// Checks a config before a campaign starts: a base URL (http:// or https://) and a model.
Status validate_llm_config(const LlmConfig &config);

struct ReplyFiles {
    std::map<std::string, std::string> files;  // relative path -> new contents
    std::string notes;                         // the text outside the file blocks
};

// The reply format: every changed file as a fenced code block whose first line is
// `// file: PATH`, PATH relative to the forward pass's directory. Refuses a reply with no such
// block, an unterminated block, a path that is absolute or leaves the directory, or too many or
// too large files.
Result<ReplyFiles> parse_reply_files(const std::string &content);

class LlmAgent : public Agent {
public:
    // `base_source`: the sources it starts from; `workspace`: where its candidates' directories go;
    // `store` (may be null): where exchanges are recorded, under `campaign_id`.
    LlmAgent(std::string name, LlmConfig config, std::filesystem::path base_source, std::filesystem::path workspace,
             store::Store *store, int64_t campaign_id);
    const std::string &name() const override { return name_; }
    ProposeOutcome propose(const AgentContext &context) override;
    void observe(const ResultSummary &result) override;

    // The messages of the next request (exposed for tests).
    nlohmann::json messages(const AgentContext &context) const;

private:
    struct Attempt {
        int turn = 0;
        std::string hash;
        std::vector<std::string> files;
        Knobs knobs;
        std::string code, reason;  // empty until the verdict arrives
    };
    ProposeOutcome fail(const std::string &reason, double retry_after_seconds = 0);
    void record_verdict(const ResultSummary &result);

    std::string name_;
    LlmConfig config_;
    std::filesystem::path current_, workspace_;  // current_: the sources the next edit applies to
    Knobs current_knobs_;                         // and the knobs they were proposed with, kept for the next one
    store::Store *store_;
    int64_t campaign_id_;
    int turn_ = 0, failures_ = 0;
    std::vector<Attempt> attempts_;
    std::string last_problem_;  // the previous reply's problem, told to the model in the next turn
};

}  // namespace hp::agents
