#include "hotpass/agents/task_brief.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "hotpass/tune/candidate.h"

namespace hp::agents {

std::string task_rules(const std::string &device) {
    const std::string build =
        device == "cuda"
            ? R"(- A candidate is a directory of CUDA C++ sources implementing the hotpass forward-pass plugin ABI
  (`#include "hotpass/forward_abi.h"`, already on the include path); it runs on the GPU, on the
  stream the executor gives it. Every `.cu`, `.cpp`, `.cc` and `.c` file in it is compiled together:
  `nvcc -std=c++20 -O3 -shared -cudart=shared -Xcompiler=-fPIC,-fvisibility=hidden,-fno-gnu-unique
  -gencode=arch=compute_XX,code=sm_XX -I<abi include dir> -I<candidate dir> [-DKNOB=value ...] *.cu -lcublas`.
  Work launched outside the timed stream is rejected (`escaped_stream`).
)"
            : R"(- A candidate is a directory of C++ sources implementing the hotpass forward-pass plugin ABI
  (`#include "hotpass/forward_abi.h"`, already on the include path). Every `.cpp`, `.cc` and `.c`
  file in it is compiled together:
  `g++ -std=c++20 -O3 -march=native -fPIC -shared -fvisibility=hidden -fno-gnu-unique -pthread
  -I<abi include dir> -I<candidate dir> [-DKNOB=value ...] *.cpp`.
)";
    return R"(## Goal

Make the forward pass as fast as possible while staying correct. Speed is measured on the
campaign's traffic (its decode and prefill batch shapes, weighted by how often they occur) against
the current incumbent; only a verified, significantly faster candidate can replace it.

## Rules

)" + build + R"(- The plugin must export exactly one symbol, `hp_forward_entry` (keep `HP_EXPORT` on it), and
  compute what the float32 reference computes: logits within tolerance, the KV cache written in
  the ABI's paged layout, deterministic results, no writes outside its outputs.
- The plugin runs in a sandboxed executor: no files, sockets, processes or exec after start-up;
  weights are read-only; allocate through `hp_services`. Leaked threads or memory are rejected.
- Compile-time knobs (`knobs.h`, `knobs.json`) may be changed by editing their defaults, or passed
  in `candidate.json` (`{"knobs": {"HP_NAME": "value"}, "notes": "what you changed"}`) in the
  candidate directory.
- Work only inside your workspace. Changing files outside it retires you.
)";
}

std::string verdict_guide() {
    return R"(## Verdicts

- `build_failed`: the compiler failed (the reason holds its first errors); `bad_exports`: the plugin
  exports something other than `hp_forward_entry`.
- `load_failed`, `abi_mismatch`: dlopen or the ABI version/vtable check failed.
- `crash`, `hang`, `forbidden_syscall`, `wrote_weights`: the executor died (signal, deadline, a
  sandbox violation, a write to the read-only weights); `device_fault`: a CUDA error poisoned the
  executor's context.
- `plugin_error`: forward returned an error; `wrong_output`: logits differ from the reference;
  `unwritten_output`, `nan_output`: logits left unwritten or NaN; `kv_mismatch`: the KV cache
  differs; `wrote_inputs`, `wrote_outside_outputs`: memory it must not write was changed;
  `nondeterministic`: two identical calls differ; `greedy_divergence`: a greedy decode diverged.
- `leaks_memory`, `leaked_thread`: resources not given back on unload; `impossible`: timings that
  cannot be real; `wrong_after_timing`: wrong when re-verified after timing; `too_slow`: far slower
  than the incumbent on some shape; `escaped_stream` (CUDA): work outside the timed stream.
- `not_faster`: correct, but not significantly faster than the incumbent; `faster`: correct and
  significantly faster (bootstrap CI of the weighted speedup above 1 and >= 1% effect, or more
  where the campaign's A/A calibration showed more).
)";
}

std::string knobs_text(const Knobs &knobs) {
    std::string text;
    for (const auto &[name, value] : knobs) text += (text.empty() ? "" : " ") + name + "=" + value;
    return text;
}

std::string results_text(const AgentContext &context, size_t max_rows) {
    std::string text = fmt::format("## Latest results\n\nIncumbent: `{}`", context.incumbent.substr(0, 16));
    if (!context.incumbent_knobs.empty()) text += fmt::format(" (knobs {})", knobs_text(context.incumbent_knobs));
    text += "\n\n";
    std::vector<const ResultSummary *> measured, failed;
    for (const ResultSummary &result : context.results) {
        if (result.speedup > 0) measured.push_back(&result);
        else if (result.code != "faster" && result.code != "not_faster") failed.push_back(&result);
    }
    std::stable_sort(measured.begin(), measured.end(), [](auto *a, auto *b) { return a->speedup > b->speedup; });
    if (measured.empty()) text += "No candidate has been measured yet.\n";
    else text += "| candidate | agent | tier | verdict | speedup vs the incumbent of its time | knobs |\n| --- | --- | --- | --- | --- | --- |\n";
    for (size_t i = 0; i < std::min(max_rows, measured.size()); ++i) {
        const ResultSummary &r = *measured[i];
        text += fmt::format("| {} | {} | {} | {} | {:.3f}x{} | {} |\n", r.hash.substr(0, 12), r.agent, r.tier, r.code, r.speedup,
                            r.significant ? " (significant)" : "", knobs_text(r.knobs));
    }
    if (!failed.empty()) {
        text += "\nLatest failures:\n\n";
        const size_t first = failed.size() > max_rows ? failed.size() - max_rows : 0;
        for (size_t i = first; i < failed.size(); ++i) {
            const ResultSummary &r = *failed[i];
            std::string reason = r.reason.substr(0, 300);
            std::replace(reason.begin(), reason.end(), '\n', ' ');
            text += fmt::format("- `{}` ({}, {} tier): `{}` {}\n", r.hash.substr(0, 12), r.agent, r.tier, r.code, reason);
        }
    }
    return text;
}

std::string notes_text(const AgentContext &context, size_t max_notes) {
    std::string text = "## Board notes\n\n";
    if (context.notes.empty()) return text + "None yet.\n";
    const size_t first = context.notes.size() > max_notes ? context.notes.size() - max_notes : 0;
    for (size_t i = first; i < context.notes.size(); ++i) {
        const store::BoardNote &note = context.notes[i];
        std::string line = note.text.substr(0, 300);
        std::replace(line.begin(), line.end(), '\n', ' ');
        text += fmt::format("- [{:.0f} s] {}: {}\n", note.elapsed_s, note.agent, line);
    }
    return text;
}

Status read_candidate_json(const std::filesystem::path &dir, Proposal &proposal) {
    std::error_code code;
    if (!std::filesystem::exists(dir / "candidate.json", code)) return {};
    // The builder's reader, so an agent's candidate.json is held to the same rules as one built by hand.
    auto candidate = tune::load_candidate(dir);
    if (!candidate.ok()) return Error{candidate.error()};
    if (!candidate->notes.empty()) proposal.notes = candidate->notes;
    for (const auto &[name, value] : candidate->knobs) proposal.knobs[name] = value;
    return {};
}

}  // namespace hp::agents
