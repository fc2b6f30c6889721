// Executor figures for bench/RESULTS.md (issue 3):
//   swap MODEL...   executor cold start -> ready; hot swap (load -> first verified step);
//                   experiments per hour with hot swap vs an executor restart per candidate
//   swap-cuda MODEL the same on the GPU (start-up phases, graph capture, hot swap)
//   stats MODEL     the runner's false-positive rate (a candidate against itself) and its
//                   detection rate for candidates slowed by known amounts
// Usage: executor_bench HOTPASS_BINARY SOURCE_DIR swap|swap-cuda|stats MODEL... ; prints Markdown.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <spdlog/spdlog.h>

#include "hotpass/core/clock.h"
#include "hotpass/tune/evaluate.h"
#include "hotpass/tune/stats.h"

namespace fs = std::filesystem;
using namespace hp;
using namespace hp::tune;

namespace {

fs::path g_hotpass, g_source;
const fs::path kWork = fs::temp_directory_path() / fmt::format("hotpass-executor-bench-{}", getpid());

Candidate slowed_candidate(int percent) {
    const fs::path dir = kWork / fmt::format("slowed-{}", percent);
    fs::create_directories(dir);
    fs::copy_file(g_source / "bench/executor/slowed.cpp", dir / "slowed.cpp", fs::copy_options::overwrite_existing);
    fs::copy_file(g_source / "forward/cpu/reference/forward.cpp", dir / "reference_forward.inc", fs::copy_options::overwrite_existing);
    Candidate candidate = *load_candidate(dir);
    candidate.knobs["SLOWDOWN_PERCENT"] = std::to_string(percent);
    return candidate;
}

BuildOptions build_options() {
    BuildOptions options;
    options.include_dir = g_source / "include";
    options.cache_dir = kWork / "artifacts";
    return options;
}

ExecutorLaunch launch_for(const std::string &model, int n_layer, const std::string &incumbent) {
    ExecutorLaunch launch;
    launch.hotpass_binary = g_hotpass;
    launch.model = model;
    launch.n_layer = n_layer;
    launch.incumbent = incumbent;
    launch.work_dir = kWork / "executor";
    launch.max_loads = 1000;
    return launch;
}

std::string summary(std::vector<double> values, const char *unit) {
    return fmt::format("{:.1f} {} ({:.1f}-{:.1f})", median(values), unit, quantile(values, 0.0), quantile(values, 1.0));
}

// Loads `artifact` and runs the first verified step: one small random batch (a single sequence
// of <= 8 tokens). Appends the load time (dlopen + create) and load -> verified, in ms.
void swap_to_first_verified(Supervisor &supervisor, const fs::path &artifact, int seed, std::vector<double> &load_ms,
                            std::vector<double> &first_verified_ms) {
    const double swap_start = now_seconds();
    CallOutcome load = supervisor.call("load", {{"path", artifact.string()}}, 60);
    if (!load.ok()) throw std::runtime_error(load.message);
    load_ms.push_back(load.result.value("load_seconds", 0.0) * 1e3);
    CallOutcome verify = supervisor.call(
        "verify", {{"seed", seed}, {"n_case", 1}, {"greedy_steps", 0}, {"max_seq", 1}, {"max_history", 8}, {"max_chunk", 8}}, 300);
    if (!verify.ok()) throw std::runtime_error(verify.message);
    first_verified_ms.push_back((now_seconds() - swap_start) * 1e3);
}

void bench_swap(const std::vector<std::string> &models) {
    fmt::print("| model | executor cold start -> ready | load (dlopen + create) | load -> first verified step | evaluations/hour, hot swap | evaluations/hour, restart per candidate |\n");
    fmt::print("|---|---|---|---|---|---|\n");
    for (const std::string &model : models) {
        const BuildOutcome artifact = build_candidate(slowed_candidate(0), build_options());
        if (!artifact.ok) throw std::runtime_error(artifact.diagnostics);
        const int n_layer = model == "preset:llama-300m" ? 2 : 0;  // the fast tier of the larger model
        std::vector<double> start_ms, load_ms, first_verified_ms;
        for (int i = 0; i < 5; ++i) {
            Supervisor supervisor(launch_for(model, n_layer, "reference"));
            const double start = now_seconds();
            if (!supervisor.ensure_started().ok()) throw std::runtime_error("executor did not start");
            start_ms.push_back((now_seconds() - start) * 1e3);
            for (int k = 0; k < 3; ++k) {
                swap_to_first_verified(supervisor, artifact.artifact.path, 7 + k, load_ms, first_verified_ms);
                (void)supervisor.call("unload", nlohmann::json::object(), 60);
            }
        }
        // Experiments per hour: the same evaluation (load, 4 verification batches, a short timing
        // of the fast workload, unload) of the same prebuilt candidates, in one executor vs a fresh
        // executor per candidate.
        EvaluateOptions options;
        options.build = build_options();
        const bool large = model == "preset:llama-300m";
        options.shapes = large ? std::vector<Shape>{{"decode b1 kv32", 1.0, 1, 32, {}}} : default_shapes(true);
        options.n_case = 4;
        if (large) options.max_seq = 2, options.max_history = 16, options.max_chunk = 8;
        options.greedy_steps = 4;
        options.runner.target_seconds = 0.2;
        options.runner.min_rep = 5;
        options.runner.max_rep = 40;
        const int n_candidate = large ? 3 : 6;
        double per_hour[2];
        for (int restart = 0; restart < 2; ++restart) {
            Supervisor supervisor(launch_for(model, n_layer, "reference"));
            (void)supervisor.ensure_started();
            const double start = now_seconds();
            for (int i = 0; i < n_candidate; ++i) {
                if (restart) supervisor.stop();
                const Evaluation evaluation = evaluate_candidate(supervisor, slowed_candidate(0), options);
                if (!evaluation.verdict.correct()) throw std::runtime_error(evaluation.verdict.reason);
            }
            per_hour[restart] = n_candidate / (now_seconds() - start) * 3600;
        }
        fmt::print("| {} ({} layers) | {} | {} | {} | {:.0f} | {:.0f} |\n", model, n_layer ? std::to_string(n_layer) : "all",
                   summary(start_ms, "ms"), summary(load_ms, "ms"), summary(first_verified_ms, "ms"), per_hour[0], per_hour[1]);
        std::fflush(stdout);
    }
}

// The same on the GPU: the CUDA baseline's own sources as the candidate (built by nvcc), the
// baseline as the incumbent, all layers of MODEL (a preset is generated on the device).
// Prints the start-up phases, the hot-swap steps and experiments per hour.
void bench_swap_cuda(const std::string &model) {
    const fs::path dir = kWork / "cuda-baseline";
    fs::create_directories(dir);
    for (const auto &entry : fs::directory_iterator(g_source / "forward/cuda/baseline")) {
        const std::string ext = entry.path().extension().string();
        if (ext == ".cu" || ext == ".cuh" || ext == ".h") fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
    }
    BuildOptions build = cuda_build_options();
    build.include_dir = g_source / "include";
    build.cache_dir = kWork / "artifacts";
    const Candidate candidate = *load_candidate(dir);
    const BuildOutcome artifact = build_candidate(candidate, build);
    if (!artifact.ok) throw std::runtime_error(artifact.failure + ": " + artifact.diagnostics);
    ExecutorLaunch launch = launch_for(model, 0, "baseline");
    launch.device = "cuda";
    std::vector<double> start_ms;
    std::map<std::string, std::vector<double>> phases;
    for (int i = 0; i < 3; ++i) {
        Supervisor supervisor(launch);
        const double start = now_seconds();
        if (Status started = supervisor.ensure_started(); !started.ok()) throw std::runtime_error(started.error());
        start_ms.push_back((now_seconds() - start) * 1e3);
        CallOutcome status = supervisor.call("status", nlohmann::json::object(), 30);
        if (!status.ok()) throw std::runtime_error(status.message);
        for (const auto &[phase, seconds] : status.result["startup"].items()) phases[phase].push_back(seconds.get<double>() * 1e3);
    }
    // One executor, five swaps: load, first verified step, then a short timing of two decode
    // shapes (graph capture happens on first use), unload.
    std::vector<double> load_ms, first_verified_ms, capture_ms, evaluation_s;
    const std::vector<Shape> shapes = {{"decode b1 kv512", 0.5, 1, 512, {}}, {"decode b8 kv512", 0.5, 8, 512, {}}};
    Supervisor supervisor(launch);
    if (Status started = supervisor.ensure_started(); !started.ok()) throw std::runtime_error(started.error());
    for (int k = 0; k < 5; ++k) {
        const double swap_start = now_seconds();
        swap_to_first_verified(supervisor, artifact.artifact.path, 7 + k, load_ms, first_verified_ms);
        nlohmann::json params = shapes_to_json(shapes);
        params["seed"] = 11 + k;
        params["warmup"] = 2;
        params["min_rep"] = 10;
        params["max_rep"] = 200;
        params["target_seconds"] = 0.2;
        CallOutcome measured = supervisor.call("measure", params, 300);
        if (!measured.ok()) throw std::runtime_error(measured.message);
        for (const auto &shape : measured.result["shapes"]) capture_ms.push_back(shape.value("candidate_capture_ms", 0.0));
        (void)supervisor.call("unload", nlohmann::json::object(), 60);
        evaluation_s.push_back(now_seconds() - swap_start);
    }
    const double evaluation = median(evaluation_s), start = median(start_ms) / 1e3;
    fmt::print("- candidate build (nvcc, the baseline's sources): {:.1f} s\n", artifact.artifact.build_seconds);
    fmt::print("- executor cold start -> ready: {}; phases (median ms):", summary(start_ms, "ms"));
    for (const auto &[phase, values] : phases) fmt::print(" {} {:.1f};", phase, median(values));
    fmt::print("\n- hot swap: load (dlopen + create) {}, load -> first verified step {}, graph capture per decode shape "
               "(eager warm-up + capture + instantiate) {}\n",
               summary(load_ms, "ms"), summary(first_verified_ms, "ms"), summary(capture_ms, "ms"));
    fmt::print("- one evaluation (load, verify 1 batch, time 2 decode shapes 0.2 s each, unload): {:.2f} s -> {:.0f}/hour with hot "
               "swap, {:.0f}/hour with an executor start per candidate\n",
               evaluation, 3600 / evaluation, 3600 / (evaluation + start));
}

// Fraction of `trials` measurements the runner calls significant, for a candidate slowed by
// `percent` against the unslowed reference artifact as incumbent.
void bench_stats(const std::string &model) {
    const BuildOutcome base = build_candidate(slowed_candidate(0), build_options());
    if (!base.ok) throw std::runtime_error(base.diagnostics);
    EvaluateOptions options;
    options.build = build_options();
    options.shapes = {{"decode b1 kv128", 1.0, 1, 128, {}}};
    options.n_case = 1;
    options.greedy_steps = 0;
    options.runner.target_seconds = 1.0;
    options.runner.min_rep = 20;
    options.runner.max_rep = 400;
    Supervisor supervisor(launch_for(model, 0, base.artifact.path.string()));
    fmt::print("| candidate vs incumbent | trials | called significantly different | median measured ratio | median 95% CI width |\n|---|---|---|---|---|\n");
    for (int percent : {0, 1, 2, 5, 10}) {
        const int trials = percent == 0 ? 40 : 20;
        int significant = 0;
        std::vector<double> ratios, widths;
        for (int t = 0; t < trials; ++t) {
            const Evaluation evaluation = evaluate_candidate(supervisor, slowed_candidate(percent), options);
            if (!evaluation.measurement) throw std::runtime_error(evaluation.verdict.reason);
            significant += evaluation.measurement->significant;
            ratios.push_back(1.0 / evaluation.measurement->speedup);
            widths.push_back(evaluation.measurement->speedup_ci.high - evaluation.measurement->speedup_ci.low);
        }
        fmt::print("| reference +{}% vs reference | {} | {} ({:.0f}%) | {:.3f} | {:.3f} |\n", percent, trials, significant,
                   100.0 * significant / trials, median(ratios), median(widths));
        std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char **argv) {
    spdlog::set_level(spdlog::level::warn);
    if (argc < 5) {
        fmt::print(stderr, "usage: executor_bench HOTPASS_BINARY SOURCE_DIR swap|swap-cuda|stats MODEL...\n");
        return 2;
    }
    g_hotpass = argv[1];
    g_source = argv[2];
    const std::string mode = argv[3];
    std::vector<std::string> models(argv + 4, argv + argc);
    try {
        if (mode == "swap") bench_swap(models);
        else if (mode == "swap-cuda") bench_swap_cuda(models[0]);
        else bench_stats(models[0]);
    } catch (const std::exception &failure) {
        fmt::print(stderr, "executor_bench: {}\n", failure.what());
        fs::remove_all(kWork);
        return 1;
    }
    fs::remove_all(kWork);
    return 0;
}
