// What a coding agent is told (DESIGN §7): the goal, the rules a candidate must keep, what each
// verdict code means, and the campaign's latest results and board notes as text. The command
// agent writes it into its workspace as TASK.md; the llm agent sends it in its messages. One text,
// so both kinds of agent play by the same rules.
#pragma once

#include <string>

#include "hotpass/agents/agent.h"
#include "hotpass/core/result.h"

namespace hp::agents {

// The goal and the rules of a candidate directory on `device` (cpu | cuda): how it is built, what
// it must export, what the verifier checks, what is forbidden.
std::string task_rules(const std::string &device = "cpu");
// One line per verdict code (include/hotpass/tune/verdict.h), in the order a candidate meets the gates.
std::string verdict_guide();
// The population's measured candidates, best first, then the latest failures with their reasons;
// at most `max_rows` of each. Markdown.
std::string results_text(const AgentContext &context, size_t max_rows = 12);
// "NAME=value NAME=value", in name order; empty for no knobs.
std::string knobs_text(const Knobs &knobs);
// The latest board notes, newest last, at most `max_notes`.
std::string notes_text(const AgentContext &context, size_t max_notes = 15);

// The candidate.json an agent may leave in a candidate folder, as task_rules describes it, read by
// tune::load_candidate: its "knobs" (values as strings) are set in `proposal` over those it has, and
// its "notes", if any, replace proposal.notes. No file: nothing changes. A file load_candidate
// refuses (not a JSON object, a knob name that is not an identifier...): its error, to tell the agent.
Status read_candidate_json(const std::filesystem::path &dir, Proposal &proposal);

}  // namespace hp::agents
