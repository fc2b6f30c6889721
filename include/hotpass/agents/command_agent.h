// command: runs an external coding agent (any CLI; the command line is configuration) in turns,
// in its own workspace:
//   <workspace>/src/             a copy of the forward pass's sources, the agent's to edit (kept across turns)
//   <workspace>/TASK.md          goal, rules, verdict codes, the latest results and board notes (rewritten every turn)
//   <workspace>/bin/hotpass      `hotpass submit DIR` (bin/hotpass-submit): hands DIR to the campaign
//                                and blocks until its verdict, which it prints; exit code by verdict
//   <workspace>/.hotpass/queue/  the submission queue: <id>/ (a copy of DIR), then <id>.exit and <id>.verdict
//   <workspace>/.hotpass/turn-N.log  the command's output
// One turn = one run of `/bin/sh -c COMMAND` with cwd = the workspace, its own process group, bin/
// first on PATH and HOTPASS_* variables set, under a reaper (core/subprocess.h): everything the
// command started is killed when it exits, when the turn's wall time is spent or when the campaign
// ends, setsid'd processes included. While it runs, propose() relays each submission to the campaign
// (Submissions) and writes the verdict back. Failures are data: an exit status other than 0, a
// signal or a timeout is a failed turn (max_failures in a row retire the agent); a change to any
// protected directory (the base sources, the in-tree forward pass) retires it at once.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hotpass/agents/agent.h"

namespace hp::agents {

struct CommandAgentConfig {
    std::string command;                   // a shell command line, e.g. "my-agent --flag"
    double turn_seconds = 600;             // wall time of one turn (submissions wait inside it)
    int max_turns = 10;
    int max_failures = 3;                  // failed turns in a row before the agent retires
    std::vector<std::string> env;          // extra KEY=VALUE for the command
    std::filesystem::path hotpass_binary;  // runs `hotpass` commands other than submit; empty: none
    std::string device = "cpu";            // the campaign's device: the rules TASK.md states
};

class CommandAgent : public Agent {
public:
    // `base_source`: the sources the workspace starts from; `protected_dirs`: directories the
    // command must not change (hashed before and after each turn).
    CommandAgent(std::string name, CommandAgentConfig config, std::filesystem::path base_source, std::filesystem::path workspace,
                 std::vector<std::filesystem::path> protected_dirs);
    const std::string &name() const override { return name_; }
    ProposeOutcome propose(const AgentContext &context) override;
    const std::filesystem::path &workspace() const { return workspace_; }

private:
    Status prepare_workspace();
    Status write_task(const AgentContext &context) const;
    // Hands new queue entries to the campaign and writes back the verdicts that have arrived.
    void relay(const AgentContext &context);
    void answer(const std::string &id, int exit_code, const std::string &text) const;
    std::map<std::filesystem::path, std::string> snapshot() const;

    std::string name_;
    CommandAgentConfig config_;
    std::filesystem::path base_source_, workspace_;
    std::vector<std::filesystem::path> protected_dirs_;
    int turn_ = 0, failures_ = 0, n_submitted_ = 0;
    std::map<std::string, std::string> pending_;  // queue id -> candidate hash, waiting for a verdict
    std::vector<std::string> turn_verdicts_;
};

// Exit code of `hotpass submit` for a verdict code (as the standalone `hotpass submit`): 0 faster,
// 1 not_faster, 3 build_failed/bad_exports, 5 infrastructure, 4 any other rejection; 2 = refused.
int submit_exit_code(const std::string &code);

}  // namespace hp::agents
