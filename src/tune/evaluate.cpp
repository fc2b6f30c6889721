#include "hotpass/tune/evaluate.h"

#include <fmt/format.h>
#include <seccomp.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "hotpass/core/clock.h"
#include "hotpass/engine/sandbox.h"
#include "hotpass/tune/stats.h"

namespace hp::tune {

using nlohmann::json;

namespace {

std::string syscall_name(const std::string &log_tail) {
    const auto at = log_tail.rfind("forbidden_syscall ");
    if (at == std::string::npos) return "?";
    const int number = std::atoi(log_tail.c_str() + at + 18);
    char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, number);
    std::string resolved = name ? name : std::to_string(number);
    std::free(name);
    return resolved;
}

std::string last_line(const std::string &text) {
    const auto end = text.find_last_not_of("\n");
    if (end == std::string::npos) return "";
    const auto begin = text.rfind('\n', end);
    return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// What a failed RPC means for the candidate.
Verdict failure_verdict(const CallOutcome &outcome, const std::string &stage) {
    switch (outcome.failure) {
        case CallFailure::hung:
            return {"hang", fmt::format("{}; the executor was killed and restarted", outcome.message)};
        case CallFailure::crashed:
        case CallFailure::exited:
            if (outcome.exit_code == engine::kExitWroteWeights) {
                return {"wrote_weights", fmt::format("it wrote into the read-only weights or the model description during {}: {}", stage,
                                                     last_line(outcome.log_tail))};
            }
            if (outcome.exit_code == engine::kExitDeviceFault) {
                return {"device_fault", fmt::format("it faulted the GPU during {} (an illegal address, a device-side assert or another "
                                                    "sticky CUDA error); the executor was restarted: {}",
                                                    stage, last_line(outcome.log_tail))};
            }
            if (outcome.exit_code == engine::kExitForbiddenSyscall) {
                return {"forbidden_syscall", fmt::format("it called {}() during {}, which the executor forbids "
                                                         "(sockets, new processes, exec, writing or linking files, signals to other processes)",
                                                         syscall_name(outcome.log_tail), stage)};
            }
            if (outcome.signal) return {"crash", fmt::format("the executor died with {} during {}", strsignal(outcome.signal), stage)};
            return {"crash", fmt::format("the executor exited with code {} during {}", outcome.exit_code, stage)};
        case CallFailure::error_reply:
            if (stage == "load") {
                const bool abi = outcome.message.find("ABI version") != std::string::npos;
                return {abi ? "abi_mismatch" : "load_failed", outcome.message};
            }
            return {"infrastructure", fmt::format("{} failed: {}", stage, outcome.message)};
        case CallFailure::start_failed:
            return {"infrastructure", outcome.message};
        case CallFailure::none:
            break;
    }
    return {"infrastructure", "unexpected"};
}

// Checks the timing results: correctness after the timing loop, leaks, speed limits.
Verdict judge_measurement(const Measurement &measurement, const json &raw, const EvaluateOptions &options) {
    for (const auto &shape : raw.value("shapes", json::array())) {
        if (shape.contains("plugin_error")) return {"plugin_error", fmt::format("forward() failed while timing {}: {}", shape.value("name", ""), shape["plugin_error"].get<std::string>())};
        // CUDA: the events on the engine's stream against the host clock to a whole-device
        // synchronize. Work left running on another stream is invisible to the events.
        if (shape.contains("candidate_host_ms")) {
            const double events = median(shape.value("candidate_ms", std::vector<double>{}));
            const double host = median(shape.value("candidate_host_ms", std::vector<double>{}));
            if (host > 1.5 * events + options.escaped_work_ms) {
                return {"escaped_stream", fmt::format("{}: {:.3f} ms by the host clock to a device synchronize but {:.3f} ms by the "
                                                      "stream's events: its work runs on another stream, outside what is timed",
                                                      shape.value("name", ""), host, events)};
            }
        }
    }
    const Verdict after = judge_verification(raw.value("post_check", json::object()), {options.tolerance});
    if (after.code == "infrastructure") return after;  // the executor's or the reference's failure, not the candidate's
    if (after.code != "ok") return {"wrong_after_timing", fmt::format("after the timing loop: {}", after.reason)};
    const int64_t growth = std::max(raw.value("resident_growth_bytes", int64_t(0)), raw.value("private_growth_bytes", int64_t(0)));
    if (growth > options.max_memory_growth_bytes) {
        return {"leaks_memory", fmt::format("memory grew by {:.1f} MB during the timing loop", double(growth) / 1e6)};
    }
    const double bandwidth = raw.value("read_bandwidth_gbs", 0.0);
    const double bytes = raw.value("bytes_per_decode_step", 0.0);
    for (const ShapeMeasurement &shape : measurement.shapes) {
        if (shape.n_sample == 0) continue;
        if (shape.candidate_ms > options.max_slowdown * shape.incumbent_ms) {
            return {"too_slow", fmt::format("{}: {:.3f} ms vs the incumbent's {:.3f} ms (more than {:g}x slower)", shape.name,
                                            shape.candidate_ms, shape.incumbent_ms, options.max_slowdown)};
        }
        // Roofline: every step streams the served weights at least once; only meaningful when
        // they do not fit in the caches.
        const double floor_ms = bandwidth > 0 ? bytes / (bandwidth * 1e9) * 1e3 : 0;
        if (bytes > 64e6 && shape.candidate_ms < 0.7 * floor_ms) {
            return {"impossible", fmt::format("{}: {:.3f} ms is below the memory-bandwidth floor of {:.3f} ms ({:.0f} MB at {:.1f} GB/s)",
                                              shape.name, shape.candidate_ms, floor_ms, bytes / 1e6, bandwidth)};
        }
    }
    return {"ok", ""};
}

}  // namespace

double measure_deadline(const EvaluateOptions &options) {
    // The timing loop's length grows with the shapes and their time budgets (a fixed deadline
    // called a correct candidate under a long --seconds-per-shape hung), plus the re-verification
    // after the loop.
    const double per_shape = 2 * std::max(options.runner.target_seconds, options.runner.max_seconds) + 30;
    return std::max(options.measure_deadline_seconds, double(options.shapes.size()) * per_shape + options.verify_deadline_seconds);
}

namespace {

Evaluation evaluate_unchecked(Supervisor &supervisor, const Candidate &candidate, const EvaluateOptions &options) {
    Evaluation evaluation;
    evaluation.candidate = candidate;
    const int starts_before = supervisor.n_start();
    auto finish = [&](Verdict verdict) {
        // A candidate that left something behind in the executor (a thread whose code is about
        // to be unmapped, leaked memory, writes outside its outputs) has corrupted it: start a
        // fresh executor rather than trusting it with the next candidate.
        static const std::set<std::string> corrupting = {"leaked_thread", "leaks_memory", "wrote_outside_outputs", "wrote_inputs",
                                                         "wrong_after_timing"};
        if (corrupting.count(verdict.code)) supervisor.stop();
        evaluation.verdict = std::move(verdict);
        evaluation.executor_starts = supervisor.n_start() - starts_before;
        return evaluation;
    };

    evaluation.build = build_candidate(candidate, options.build);
    if (!evaluation.build.ok) {
        const bool exports = evaluation.build.failure == "bad exports";
        return finish({exports ? "bad_exports" : "build_failed",
                       fmt::format("{}: {}", evaluation.build.failure, evaluation.build.diagnostics.substr(0, 4000))});
    }
    if (Status started = supervisor.ensure_started(); !started.ok()) return finish({"infrastructure", started.error()});

    const double swap_start = now_seconds();
    CallOutcome load = supervisor.call("load", {{"path", evaluation.build.artifact.path.string()}}, options.load_deadline_seconds);
    if (!load.ok()) return finish(failure_verdict(load, "load"));
    evaluation.load_seconds = load.result.value("load_seconds", 0.0);
    auto unload = [&]() -> std::optional<Verdict> {
        CallOutcome unloaded = supervisor.call("unload", json::object(), options.load_deadline_seconds);
        if (!unloaded.ok()) return failure_verdict(unloaded, "unload");
        if (unloaded.result.value("threads_after_unload", 0) > unloaded.result.value("threads_before_load", 0)) {
            return Verdict{"leaked_thread", fmt::format("{} thread(s) still running after destroy()",
                                                        unloaded.result.value("threads_after_unload", 0) -
                                                            unloaded.result.value("threads_before_load", 0))};
        }
        return std::nullopt;
    };

    const uint64_t seed = options.verify_seed ? options.verify_seed : (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
    json verify_params = shapes_to_json(options.shapes);
    verify_params["seed"] = seed;
    verify_params["n_case"] = options.n_case;
    verify_params["greedy_steps"] = options.greedy_steps;
    verify_params["greedy_prompts"] = json::array();
    for (const GreedyPrompt &prompt : options.greedy_prompts) {
        json item = {{"length", prompt.length}};
        if (!prompt.tokens.empty()) item["tokens"] = prompt.tokens;
        verify_params["greedy_prompts"].push_back(std::move(item));
    }
    verify_params["max_seq"] = options.max_seq;
    verify_params["max_history"] = options.max_history;
    verify_params["max_chunk"] = options.max_chunk;
    verify_params["reference_tokens"] = options.reference_tokens;
    CallOutcome verify = supervisor.call("verify", verify_params, options.verify_deadline_seconds);
    if (!verify.ok()) return finish(failure_verdict(verify, "verification"));
    evaluation.hot_swap_seconds = now_seconds() - swap_start;
    evaluation.verification = verify.result;
    const Verdict verified = judge_verification(verify.result, options.tolerance);
    if (verified.code != "ok") {
        // The verification failure is the more useful reason; but a candidate that also left a
        // thread running after destroy() (or could not be unloaded) has corrupted the executor all
        // the same, and the next candidate must not inherit it.
        if (unload()) supervisor.stop();
        return finish(verified);
    }
    if (!options.measure) {
        if (auto failed = unload()) return finish(*failed);
        return finish({"not_faster", verified.reason + " (not timed)"});
    }
    RunnerOptions runner = options.runner;
    json params = shapes_to_json(options.shapes);
    params["seed"] = seed ^ 0x9e3779b97f4a7c15ull;
    params["warmup"] = runner.warmup;
    params["min_rep"] = runner.min_rep;
    params["max_rep"] = runner.max_rep;
    params["target_seconds"] = runner.target_seconds;
    params["max_seconds"] = runner.max_seconds;
    params["min_rep_capped"] = kMinRepCapped;
    params["reference_tokens"] = options.reference_tokens;
    CallOutcome measured = supervisor.call("measure", params, measure_deadline(options));
    if (!measured.ok()) return finish(failure_verdict(measured, "timing"));
    evaluation.measurement = summarize(measured.result, options.shapes, runner);
    const Verdict timing = judge_measurement(*evaluation.measurement, measured.result, options);
    if (auto failed = unload()) return finish(*failed);
    if (timing.code != "ok") return finish(timing);
    const Measurement &m = *evaluation.measurement;
    if (m.significant && m.speedup > 1) {
        return finish({"faster", fmt::format("verified; {:.3f}x the incumbent (95% CI {:.3f}-{:.3f}), weighted over {} shapes",
                                             m.speedup, m.speedup_ci.low, m.speedup_ci.high, m.shapes.size())});
    }
    const bool interval_excludes_1 = m.speedup_ci.low > 1 || m.speedup_ci.high < 1;
    const std::string why = m.significant ? ", significantly slower"
                            : interval_excludes_1 ? fmt::format(", within the {:.1f}% minimum effect", 100 * runner.min_effect)
                                                  : ", not significant";
    return finish({"not_faster", fmt::format("verified; {:.3f}x the incumbent (95% CI {:.3f}-{:.3f}){}", m.speedup, m.speedup_ci.low,
                                             m.speedup_ci.high, why)});
}

}  // namespace

Evaluation evaluate_candidate(Supervisor &supervisor, const Candidate &candidate, const EvaluateOptions &options) {
    const int starts_before = supervisor.n_start();
    try {
        return evaluate_unchecked(supervisor, candidate, options);
    } catch (const std::exception &e) {
        // A reply that could not be read (a field of the wrong type): the executor is not trusted
        // with the next candidate, and the campaign goes on.
        supervisor.stop();
        Evaluation evaluation;
        evaluation.candidate = candidate;
        evaluation.verdict = {"infrastructure", fmt::format("the evaluation failed: {}", e.what())};
        evaluation.executor_starts = supervisor.n_start() - starts_before;
        return evaluation;
    }
}

json evaluation_to_json(const Evaluation &evaluation) {
    json out = {{"candidate", evaluation.candidate.dir.string()},
                {"verdict", evaluation.verdict.code},
                {"reason", evaluation.verdict.reason},
                {"build", {{"ok", evaluation.build.ok}, {"key", evaluation.build.artifact.key},
                           {"artifact", evaluation.build.artifact.path.string()}, {"cached", evaluation.build.artifact.cached},
                           {"seconds", evaluation.build.artifact.build_seconds}}},
                {"load_seconds", evaluation.load_seconds},
                {"hot_swap_seconds", evaluation.hot_swap_seconds},
                {"executor_starts", evaluation.executor_starts}};
    if (!evaluation.build.ok) out["build"]["diagnostics"] = evaluation.build.diagnostics;
    if (!evaluation.verification.is_null()) out["verification"] = evaluation.verification;
    if (evaluation.measurement) {
        out["measurement"] = measurement_to_json(*evaluation.measurement);
        for (const char *key : {"resident_growth_bytes", "private_growth_bytes", "bytes_per_decode_step", "read_bandwidth_gbs"}) {
            out["measurement"][key] = evaluation.measurement->raw.value(key, json());
        }
    }
    return out;
}

}  // namespace hp::tune
