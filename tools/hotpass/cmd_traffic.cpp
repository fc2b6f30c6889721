// `hotpass traffic ...`: profile traces, compare them for drift, watch a trace roll, synthesize
// traffic and derive measurement workloads. Thin: the work is in hotpass_traffic (docs/traffic.md).
// Exit codes: 0 ok (no drift), 1 drift found / re-tune points, 2 bad usage or unreadable input.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>

#include "commands.h"
#include "validators.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/traffic/drift.h"
#include "hotpass/traffic/line_reader.h"
#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/profile_json.h"
#include "hotpass/traffic/profile_report.h"
#include "hotpass/traffic/synth.h"
#include "hotpass/traffic/watch.h"
#include "hotpass/traffic/workload.h"
#include "hotpass/traffic/workload_json.h"

namespace hp::cli {
namespace {

using namespace hp::traffic;

constexpr int kOk = 0, kFound = 1, kBadInput = 2;

// "600", "600s", "10m", "1.5h", "2d" -> seconds: finite and > 0.
Result<double> parse_duration_s(std::string_view text) {
    double value = 0;
    const auto [end, code] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (code != std::errc() || !(value > 0) || !std::isfinite(value))
        return error("bad duration `{}` (a finite number > 0 with a unit, e.g. 90s, 10m, 1h)",
                     text);
    const std::string_view unit(end, size_t(text.data() + text.size() - end));
    double seconds_per_unit = 0;
    if (unit.empty() || unit == "s") seconds_per_unit = 1;
    if (unit == "m" || unit == "min") seconds_per_unit = 60;
    if (unit == "h") seconds_per_unit = 3600;
    if (unit == "d") seconds_per_unit = 86400;
    if (seconds_per_unit == 0)
        return error("bad duration unit `{}` in `{}` (s, m, h, d)", unit, text);
    if (!std::isfinite(value * seconds_per_unit))
        return error("bad duration `{}`: too long to count in seconds", text);
    return value * seconds_per_unit;
}

struct TraceArgs {
    std::string format = "auto";
    bool strict = false;
};

void add_trace_options(CLI::App *command, TraceArgs &args) {
    command->add_option("--format", args.format, "auto|azure|mooncake|burstgpt|hotpass")
        ->capture_default_str();
    command->add_flag("--strict", args.strict, "fail on the first bad row instead of counting it");
}

Result<std::optional<TraceFormat>> trace_format(const TraceArgs &args) {
    if (args.format == "auto") return std::optional<TraceFormat>();
    std::optional<TraceFormat> format = format_from_name(args.format);
    if (!format)
        return error("unknown --format `{}` (auto|azure|mooncake|burstgpt|hotpass)", args.format);
    return format;
}

// The options of the batching simulation, with the ranges check_engine_limits and
// check_cost_model accept (batch_shape.h).
void add_engine_options(CLI::App *command, ProfileOptions &o) {
    constexpr uint32_t kMaxCount = std::numeric_limits<uint32_t>::max();
    command->add_option("--max-batch", o.limits.max_batch, "engine limit: sequences per step")
        ->check(whole_number(1, kMaxCount, "sequences"))
        ->capture_default_str();
    command
        ->add_option("--max-batched-tokens", o.limits.max_batched_tokens,
                     "engine limit: tokens computed per step (chunked prefill)")
        ->check(whole_number(1, kMaxCount, "tokens"))
        ->capture_default_str();
    command
        ->add_option("--step-base-ms", o.cost.base_ms,
                     "cost model: step_ms = base + per_token*tokens + per_kv_token*kv_tokens")
        ->check(finite_number(0, true, kMaxStepCostMs, "ms", "every engine step takes some time"))
        ->capture_default_str();
    command
        ->add_option("--step-per-token-ms", o.cost.per_token_ms, "cost model: ms per batched token")
        ->check(finite_number(0, false, kMaxStepCostMs, "ms", ""))
        ->capture_default_str();
    command
        ->add_option("--step-per-kv-token-ms", o.cost.per_kv_token_ms,
                     "cost model: ms per KV entry read")
        ->check(finite_number(0, false, kMaxStepCostMs, "ms", ""))
        ->capture_default_str();
    command->add_option("--samples", o.sample_requests, "requests kept in the replay sample")
        ->check(whole_number(0, kMaxCount, "requests"))
        ->capture_default_str();
}

// Options that only change how a trace is read and simulated. A Profile JSON was read and
// simulated when it was made, so on one they do nothing: say so instead of ignoring them.
void warn_unused_on_profile(const CLI::App &command, const std::string &path) {
    static constexpr const char *kTraceOnly[] = {"--format",
                                                 "--strict",
                                                 "--max-batch",
                                                 "--max-batched-tokens",
                                                 "--step-base-ms",
                                                 "--step-per-token-ms",
                                                 "--step-per-kv-token-ms",
                                                 "--samples"};
    for (const char *name : kTraceOnly) {
        const CLI::Option *option = command.get_option_no_throw(name);
        if (option != nullptr && option->count() > 0)
            std::cerr << fmt::format(
                "warning: {} has no effect on {}: it is a Profile JSON, read and simulated when it "
                "was made; pass the trace to apply {}\n",
                name, path, name);
    }
}

// Thresholds are finite and >= 0 (a statistic above its threshold is drift); KS's alpha is a
// probability.
void add_threshold_options(CLI::App *command, DriftThresholds &t) {
    constexpr double kAny = std::numeric_limits<double>::max();
    command->add_option("--ks", t.ks, "KS D on input/output lengths")
        ->check(finite_number(0, false, 1, "KS D"))
        ->capture_default_str();
    command->add_option("--ks-alpha", t.ks_alpha, "KS must also have p below this")
        ->check(finite_number(0, true, 1, "probability"))
        ->capture_default_str();
    command->add_option("--psi", t.psi, "PSI on input/output lengths")
        ->check(finite_number(0, false, kAny, "PSI"))
        ->capture_default_str();
    command->add_option("--p90-change", t.p90_change, "relative P90 change")
        ->check(finite_number(0, false, kAny, "relative change"))
        ->capture_default_str();
    command
        ->add_option("--prefix-reuse-change", t.prefix_reuse_change, "absolute prefix-reuse change")
        ->check(finite_number(0, false, 1, "reuse fraction"))
        ->capture_default_str();
    command->add_option("--rate-change", t.rate_change, "max(r/r0, r0/r) - 1")
        ->check(finite_number(0, false, kAny, "relative change"))
        ->capture_default_str();
    command
        ->add_option("--expert-imbalance-change", t.expert_imbalance_change,
                     "relative change of MoE max/mean expert load")
        ->check(finite_number(0, false, kAny, "relative change"))
        ->capture_default_str();
    command
        ->add_option("--expert-load-distance", t.expert_load_distance,
                     "total-variation distance of expert shares")
        ->check(finite_number(0, false, 1, "distance"))
        ->capture_default_str();
    command->add_option("--min-requests", t.min_requests, "fewer on a side: no decision")
        ->check(whole_number(0, std::numeric_limits<uint32_t>::max(), "requests"))
        ->capture_default_str();
}

// A path is a Profile JSON when its first line is `{` alone or an object with "schema".
bool looks_like_profile(const std::string &path) {
    Result<LineReader> lines = LineReader::open(path);
    std::string_view line;
    if (!lines.ok()) return false;
    Result<bool> got = lines->next(line);
    if (!got.ok() || !*got) return false;
    return line == "{" || line.find("\"schema\"") != std::string_view::npos;
}

Result<Profile> profile_of(const CLI::App &command, const std::string &path, const TraceArgs &trace,
                           const ProfileOptions &options) {
    if (looks_like_profile(path)) {
        warn_unused_on_profile(command, path);
        return load_profile(path);
    }
    Result<std::optional<TraceFormat>> format = trace_format(trace);
    HP_TRY(format);
    ReaderOptions reader_options;
    reader_options.strict = trace.strict;
    Result<TraceProfile> traced = profile_trace(path, *format, reader_options, options);
    HP_TRY(traced);
    std::cerr << format_read_stats(traced->stats);
    return std::move(traced->profile);
}

int fail(const std::string &message) {
    std::cerr << "error: " << message << "\n";
    return kBadInput;
}

void add_profile(CLI::App &traffic, int &exit_code) {
    struct Args {
        std::string file, out;
        bool json = false, no_sim = false;
        TraceArgs trace;
        ProfileOptions options;
    };
    auto args = std::make_shared<Args>();
    CLI::App *command = traffic.add_subcommand(
        "profile",
        "Summarise a trace: arrivals, input/output lengths, prefix reuse and the batches a "
        "continuous-batching engine would run (a small simulation). Prints a summary with "
        "text histograms; --json prints the Profile JSON, --out writes it.");
    command
        ->add_option("file", args->file,
                     "trace: Azure CSV, Mooncake JSONL, BurstGPT CSV or hotpass request log")
        ->required();
    command->add_option("--out", args->out, "write the Profile JSON here");
    command->add_flag("--json", args->json, "print the Profile JSON instead of the summary");
    add_trace_options(command, args->trace);
    add_engine_options(command, args->options);
    command->add_flag("--no-sim", args->no_sim,
                      "skip the batching simulation (no Workload possible)");
    command->footer(
        "Example: hotpass traffic profile ../shared/data/traces/azure_llm_2023_conv.csv --out "
        "conv.profile.json");
    command->callback([args, &exit_code] {
        ProfileOptions options = args->options;
        options.simulate = !args->no_sim;
        Result<std::optional<TraceFormat>> format = trace_format(args->trace);
        if (!format.ok()) return void(exit_code = fail(format.error()));
        ReaderOptions reader_options;
        reader_options.strict = args->trace.strict;
        Result<TraceProfile> traced = profile_trace(args->file, *format, reader_options, options);
        if (!traced.ok()) return void(exit_code = fail(traced.error()));
        std::cerr << format_read_stats(traced->stats);
        const std::string json = profile_to_json(traced->profile);
        if (!args->out.empty()) {
            Status written = write_file_atomic(args->out, json + "\n");
            if (!written.ok()) return void(exit_code = fail(written.error()));
        }
        std::cout << (args->json ? json + "\n" : format_profile(traced->profile));
        exit_code = kOk;
    });
}

void add_drift(CLI::App &traffic, int &exit_code) {
    struct Args {
        std::string a, b;
        bool split = false, json = false;
        TraceArgs trace;
        DriftThresholds thresholds;
    };
    auto args = std::make_shared<Args>();
    CLI::App *command = traffic.add_subcommand(
        "drift",
        "Compare two profiles or traces (or the two halves of one trace with --split): KS and "
        "PSI on input/output lengths, P90 changes, prefix reuse, rate, MoE expert load. Prints "
        "each statistic, a score (largest ratio to its threshold) and the decision with its "
        "reason. Exit code 0: no drift, 1: drift, 2: bad input.");
    command->add_option("reference", args->a, "the traffic tuned for: Profile JSON or trace")
        ->required();
    command->add_option("recent", args->b, "the recent traffic: Profile JSON or trace");
    command->add_flag("--split", args->split,
                      "compare the first and second half (by time) of `reference`");
    command->add_flag("--json", args->json, "print the report as JSON");
    add_trace_options(command, args->trace);
    add_threshold_options(command, args->thresholds);
    command->footer(
        "Examples:\n  hotpass traffic drift ../shared/data/traces/azure_llm_2023_code.csv "
        "../shared/data/traces/azure_llm_2023_conv.csv\n  hotpass traffic drift trace.jsonl "
        "--split");
    command->callback([args, command, &exit_code] {
        ProfileOptions options;
        options.simulate = false;
        options.sample_requests = 0;
        Profile reference, recent;
        if (args->split) {
            if (!args->b.empty()) return void(exit_code = fail("--split takes one trace"));
            Result<std::optional<TraceFormat>> format = trace_format(args->trace);
            if (!format.ok()) return void(exit_code = fail(format.error()));
            ReaderOptions reader_options;
            reader_options.strict = args->trace.strict;
            Result<TraceProfile> whole = profile_trace(args->a, *format, reader_options, options);
            if (!whole.ok()) return void(exit_code = fail(whole.error()));
            const double middle_s =
                (whole->profile.arrivals.start_s + whole->profile.arrivals.end_s) / 2;
            Result<std::unique_ptr<TraceReader>> reader =
                open_trace(args->a, *format, reader_options);
            if (!reader.ok()) return void(exit_code = fail(reader.error()));
            ProfileBuilder first(options), second(options);
            Request request;
            for (;;) {
                Result<bool> got = (*reader)->next(request);
                if (!got.ok()) return void(exit_code = fail(got.error()));
                if (!*got) break;
                (request.arrival_s < middle_s ? first : second).add(request);
            }
            reference = first.finish(args->a + " (first half)", "split");
            recent = second.finish(args->a + " (second half)", "split");
        } else {
            if (args->b.empty())
                return void(exit_code = fail("drift needs two inputs, or one with --split"));
            Result<Profile> a = profile_of(*command, args->a, args->trace, options);
            if (!a.ok()) return void(exit_code = fail(a.error()));
            Result<Profile> b = profile_of(*command, args->b, args->trace, options);
            if (!b.ok()) return void(exit_code = fail(b.error()));
            reference = std::move(*a);
            recent = std::move(*b);
        }
        const DriftReport report = compare_profiles(reference, recent, args->thresholds);
        std::cout << (args->json ? drift_report_to_json(report) + "\n"
                                 : format_drift_report(report));
        exit_code = report.drift ? kFound : kOk;
    });
}

void add_watch(CLI::App &traffic, int &exit_code) {
    struct Args {
        std::string file, window = "10m";
        bool json = false;
        TraceArgs trace;
        WatchOptions watch;
    };
    auto args = std::make_shared<Args>();
    CLI::App *command = traffic.add_subcommand(
        "watch",
        "Roll over a trace in windows and print where a deployment would have re-tuned: each "
        "window is compared with the window last tuned for; a drifting window is a re-tune "
        "point and the new reference. Exit code 0: no re-tune point, 1: some, 2: bad input.");
    command->add_option("file", args->file, "trace (any supported format)")->required();
    command->add_option("--window", args->window, "window length: 90s, 10m, 1h")
        ->capture_default_str();
    command->add_flag("--json", args->json, "print one JSON object per window");
    add_trace_options(command, args->trace);
    add_threshold_options(command, args->watch.thresholds);
    command->footer(
        "Example: hotpass traffic synth --preset chat --duration 1h --drift 2 --out t.jsonl && "
        "hotpass traffic watch t.jsonl --window 10m");
    command->callback([args, &exit_code] {
        Result<double> window_s = parse_duration_s(args->window);
        if (!window_s.ok()) return void(exit_code = fail(window_s.error()));
        Result<std::optional<TraceFormat>> format = trace_format(args->trace);
        if (!format.ok()) return void(exit_code = fail(format.error()));
        WatchOptions options = args->watch;
        options.window_s = *window_s;
        ReaderOptions reader_options;
        reader_options.strict = args->trace.strict;
        Result<WatchResult> result = watch_trace(args->file, *format, reader_options, options);
        if (!result.ok()) return void(exit_code = fail(result.error()));
        std::cerr << format_read_stats(result->stats);
        for (const WatchWindow &window : result->windows) {
            if (args->json) {
                std::cout
                    << fmt::format(
                           R"({{"start_s":{:.3f},"end_s":{:.3f},"requests":{},"retune":{},"report":{}}})",
                           window.start_s, window.end_s, window.requests, window.retune,
                           drift_report_to_json(window.report, -1))
                    << "\n";
            } else {
                std::cout << fmt::format("{:>8.0f}-{:<8.0f} s {:>6} req  {}{}\n", window.start_s,
                                         window.end_s, window.requests,
                                         window.retune ? "RE-TUNE: " : "", window.report.reason);
            }
        }
        if (!args->json)
            std::cout << fmt::format("{} windows, {} re-tune points\n", result->windows.size(),
                                     result->retunes);
        exit_code = result->retunes > 0 ? kFound : kOk;
    });
}

void add_synth(CLI::App &traffic, int &exit_code) {
    struct Args {
        SynthOptions synth;
        std::string duration = "10m", drift, drift_at, out;
    };
    auto args = std::make_shared<Args>();
    CLI::App *command = traffic.add_subcommand(
        "synth",
        "Write a synthetic request log (hotpass JSONL) whose lengths, rate, burstiness and "
        "prefix reuse are fitted from the published traces: chat (Azure conversation), code "
        "(Azure code), long-context (Mooncake synthetic), agentic (Mooncake conversation).");
    command->add_option("--preset", args->synth.preset, "chat|code|long-context|agentic")
        ->capture_default_str();
    command
        ->add_option("--rate", args->synth.rate_rps,
                     "mean requests per second (default: the preset's fitted rate)")
        ->check(
            finite_number(0, true, std::numeric_limits<double>::max(), "requests per second", ""));
    command->add_option("--duration", args->duration, "length of the log: 90s, 10m, 1h")
        ->capture_default_str();
    command
        ->add_option("--seed", args->synth.seed, "random seed; the log depends only on the options")
        ->capture_default_str();
    command->add_option(
        "--drift", args->drift,
        "change the traffic halfway: a number scales prompt lengths (2 = prompts double), "
        "a preset name switches to that preset");
    command->add_option("--drift-at", args->drift_at,
                        "when the drift happens (default: half the duration)");
    command->add_option("--out", args->out, "output file (default: stdout)");
    command->footer(
        "Example: hotpass traffic synth --preset chat --rate 5 --duration 1h --drift 2 --out "
        "chat.jsonl");
    command->callback([args, &exit_code] {
        SynthOptions options = args->synth;
        Result<double> duration_s = parse_duration_s(args->duration);
        if (!duration_s.ok()) return void(exit_code = fail(duration_s.error()));
        options.duration_s = *duration_s;
        if (!args->drift.empty()) {
            Result<SynthDrift> drift = parse_synth_drift(args->drift);
            if (!drift.ok()) return void(exit_code = fail(drift.error()));
            options.drift = *drift;
        }
        if (!args->drift_at.empty()) {
            Result<double> at_s = parse_duration_s(args->drift_at);
            if (!at_s.ok()) return void(exit_code = fail(at_s.error()));
            options.drift_at_s = *at_s;
        }
        // synthesize checks its options before the first request; with --out, a failure leaves
        // an existing file as it was (write_file_atomic).
        uint64_t written = 0;
        const auto write_log = [&](std::ostream &out) -> Status {
            HP_TRY(synthesize(options, [&](const Request &request) {
                out << request_to_jsonl(request) << '\n';
                ++written;
            }));
            out.flush();
            if (!out) return error("cannot write the request log");
            return Status::success();
        };
        Status done =
            args->out.empty() ? write_log(std::cout) : write_file_atomic(args->out, write_log);
        if (!done.ok()) return void(exit_code = fail(done.error()));
        std::cerr << fmt::format("{} requests written\n", written);
        exit_code = kOk;
    });
}

void add_workload(CLI::App &traffic, int &exit_code) {
    struct Args {
        std::string file, tier = "slow", out;
        size_t max_shapes = 0, requests = 32;
        bool json = false;
        TraceArgs trace;
        ProfileOptions options;
    };
    auto args = std::make_shared<Args>();
    CLI::App *command = traffic.add_subcommand(
        "workload",
        "Derive the Workload (weighted engine-step shapes + replay requests) that stands for a "
        "profile: the cells of the batching simulation with the most step time, at most 16 "
        "(slow tier) or 4 (fast tier); weights are shares of step time. Prints a table; --json "
        "prints the Workload JSON, --out writes it.");
    command
        ->add_option("profile", args->file,
                     "Profile JSON (from `traffic profile --out`) or a trace")
        ->required();
    command->add_option("--tier", args->tier, "slow (<= 16 shapes) or fast (<= 4)")
        ->capture_default_str();
    command->add_option("--max-shapes", args->max_shapes,
                        "number of shapes (default: 16 slow, 4 fast)");
    command->add_option("--requests", args->requests, "sampled requests to include for replay")
        ->capture_default_str();
    command->add_option("--out", args->out, "write the Workload JSON here");
    command->add_flag("--json", args->json, "print the Workload JSON instead of the table");
    add_trace_options(command, args->trace);
    add_engine_options(command, args->options);
    command->footer(
        "The trace options and the engine options apply to a trace; a Profile JSON was read and "
        "simulated when it was made.\n"
        "Example: hotpass traffic workload conv.profile.json --tier fast --out "
        "conv.fast.workload.json");
    command->callback([args, command, &exit_code] {
        WorkloadOptions options;
        if (args->tier != "slow" && args->tier != "fast")
            return void(exit_code = fail("--tier is slow or fast"));
        options.tier = args->tier == "fast" ? Tier::fast : Tier::slow;
        options.max_shapes = args->max_shapes
                                 ? args->max_shapes
                                 : (options.tier == Tier::fast ? kMaxShapesFast : kMaxShapesSlow);
        options.max_requests = args->requests;
        Result<Profile> profile = profile_of(*command, args->file, args->trace, args->options);
        if (!profile.ok()) return void(exit_code = fail(profile.error()));
        Result<Workload> workload = derive_workload(*profile, options);
        if (!workload.ok()) return void(exit_code = fail(workload.error()));
        const std::string json = workload_to_json(*workload);
        if (!args->out.empty()) {
            Status written = write_file_atomic(args->out, json + "\n");
            if (!written.ok()) return void(exit_code = fail(written.error()));
        }
        std::cout << (args->json ? json + "\n" : format_workload(*workload));
        exit_code = kOk;
    });
}

}  // namespace

void add_traffic_commands(CLI::App &app, int &exit_code) {
    CLI::App *traffic = app.add_subcommand(
        "traffic",
        "Read serving traces, profile them, derive measurement workloads, detect drift, and "
        "synthesize traffic (docs/traffic.md).");
    traffic->require_subcommand(1);
    add_profile(*traffic, exit_code);
    add_drift(*traffic, exit_code);
    add_watch(*traffic, exit_code);
    add_synth(*traffic, exit_code);
    add_workload(*traffic, exit_code);
}

}  // namespace hp::cli
