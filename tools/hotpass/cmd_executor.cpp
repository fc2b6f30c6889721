// `hotpass executor` (the persistent engine process) and `hotpass submit` (evaluate one candidate).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "commands.h"
#include "validators.h"
#include "hotpass/core/json_text.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/engine/executor.h"
#include "hotpass/engine/plugin.h"
#include "hotpass/model/model.h"
#include "hotpass/tune/evaluate.h"
#ifdef HOTPASS_HAVE_CAMPAIGN
#include "hotpass/campaign/workload_shapes.h"
#endif

namespace hp::cli {
namespace {

struct SubmitArgs {
    std::string candidate_dir;
    std::string model = "preset:tiny-llama";
    uint64_t seed = 0;
    std::string tier = "fast";
    int fast_layers = 2;
    std::string workload;
    std::string incumbent = "baseline";
    std::string cache_dir;
    int n_thread = 1;
    int n_case = 12;
    int reference_tokens = 0;
    double target_seconds = 1.0;
    double deadline_seconds = 120;
    bool json_output = false;
    bool no_measure = false;
    std::string device = "cpu";
};

// Exit codes of `hotpass submit`, by verdict.
int exit_code_for(const tune::Verdict &verdict) {
    if (verdict.code == "faster") return 0;
    if (verdict.code == "not_faster") return 1;
    if (verdict.code == "build_failed" || verdict.code == "bad_exports") return 3;
    if (verdict.code == "infrastructure") return 5;
    return 4;
}

void print_human(const tune::Evaluation &evaluation) {
    fmt::print("candidate  {}\n", evaluation.candidate.dir.string());
    if (evaluation.build.ok) {
        fmt::print("build      {} ({})\n", evaluation.build.artifact.path.string(),
                   evaluation.build.artifact.cached ? "cached" : fmt::format("{:.1f} s", evaluation.build.artifact.build_seconds));
    }
    fmt::print("verdict    {}: {}\n", evaluation.verdict.code, evaluation.verdict.reason);
    if (evaluation.hot_swap_seconds > 0) {
        fmt::print("hot swap   load {:.1f} ms, load -> verified {:.1f} ms\n", evaluation.load_seconds * 1e3, evaluation.hot_swap_seconds * 1e3);
    }
    if (!evaluation.measurement) return;
    const tune::Measurement &m = *evaluation.measurement;
    fmt::print("\n{:<28} {:>6} {:>12} {:>12} {:>9} {:>17} {:>9}\n", "shape", "weight", "incumbent ms", "candidate ms", "speedup", "95% CI", "p");
    for (const auto &shape : m.shapes) {
        fmt::print("{:<28} {:>6.2f} {:>12.3f} {:>12.3f} {:>8.3f}x {:>8.3f}-{:<8.3f} {:>9.2g}{}\n", shape.name, shape.weight,
                   shape.incumbent_ms, shape.candidate_ms, shape.speedup, shape.speedup_ci.low, shape.speedup_ci.high,
                   shape.p_value, shape.significant ? " *" : "");
    }
    fmt::print("{:<28} {:>6} {:>12.3f} {:>12.3f} {:>8.3f}x {:>8.3f}-{:<8.3f}{}\n", "weighted", "", m.weighted_incumbent_ms,
               m.weighted_candidate_ms, m.speedup, m.speedup_ci.low, m.speedup_ci.high, m.significant ? " *" : "");
}

// --workload: the executor's own shapes, or (with the campaign library) anything `optimize
// --traffic` takes, scaled the way a campaign scales it.
Result<std::vector<tune::Shape>> load_shapes(const std::string &path, bool fast_tier) {
#ifdef HOTPASS_HAVE_CAMPAIGN
    return campaign::load_executor_shapes(path, fast_tier);
#else
    (void)fast_tier;
    auto text = read_text_file(path);
    if (!text.ok()) return Error{text.error()};
    const auto json = nlohmann::json::parse(*text, nullptr, false);
    if (json.is_discarded()) return error("not JSON");
    return tune::parse_shapes(json);
#endif
}

int run_submit(const SubmitArgs &args) {
    auto candidate = tune::load_candidate(args.candidate_dir);
    if (!candidate.ok()) {
        fmt::print(stderr, "error: {}\n", candidate.error());
        return 2;
    }
    if (Status model = model::check_model_spec(args.model); !model.ok()) {  // before the candidate's build
        fmt::print(stderr, "error: --model {}: {}\n", args.model, model.error());
        return 2;
    }
    const bool on_cuda = args.device == "cuda";
    if (auto incumbent = engine::resolve_forward(args.incumbent, on_cuda ? HP_DEVICE_CUDA : HP_DEVICE_CPU); !incumbent.ok()) {
        fmt::print(stderr, "error: --incumbent {}: {}\n", args.incumbent, incumbent.error());  // before the candidate's build
        return 2;
    }
    tune::EvaluateOptions options;
    if (on_cuda) {
        options.build = tune::cuda_build_options();
        // bf16 compute against the float32 GPU reference (docs/cuda.md's tolerances).
        options.tolerance = {3e-2, 3e-2};
    }
    options.build.include_dir = tune::default_include_dir();
    // Per user: a shared cache in /tmp would let anyone who can write there plant an artifact
    // under a key predictable from the sources.
    options.build.cache_dir = args.cache_dir.empty() ? std::filesystem::temp_directory_path() / fmt::format("hotpass-artifacts-{}", getuid())
                                                     : std::filesystem::path(args.cache_dir);
    if (args.cache_dir.empty()) {
        std::error_code code;
        std::filesystem::create_directories(options.build.cache_dir, code);
        struct stat info {};
        if (!code && ::stat(options.build.cache_dir.c_str(), &info) == 0 && info.st_uid == getuid()) ::chmod(options.build.cache_dir.c_str(), 0700);
        if (code || ::stat(options.build.cache_dir.c_str(), &info) != 0 || info.st_uid != getuid() || (info.st_mode & 022) != 0) {
            fmt::print(stderr, "error: the artifact cache {} is not a folder only you can write; give --cache DIR\n", options.build.cache_dir.string());
            return 5;
        }
    }
    options.n_case = args.n_case;
    options.reference_tokens = args.reference_tokens;
    options.runner.target_seconds = args.target_seconds;
    options.verify_deadline_seconds = args.deadline_seconds;
    options.measure = !args.no_measure;
    const bool fast = args.tier == "fast";
    if (!args.workload.empty()) {
        auto shapes = load_shapes(args.workload, fast);
        if (!shapes.ok()) {
            fmt::print(stderr, "error: workload {}: {}\n", args.workload, shapes.error());
            return 2;
        }
        options.shapes = std::move(shapes).value();
    } else {
        options.shapes = tune::default_shapes(fast);
    }
    tune::ExecutorLaunch launch;
    launch.model = args.model;
    launch.seed = args.seed;
    launch.n_layer = fast ? args.fast_layers : 0;
    launch.incumbent = args.incumbent;
    launch.n_thread = args.n_thread;
    launch.device = args.device;
    tune::Supervisor supervisor(launch);
    const tune::Evaluation evaluation = tune::evaluate_candidate(supervisor, *candidate, options);
    if (args.json_output) fmt::print("{}\n", json_text(tune::evaluation_to_json(evaluation), 2));
    else print_human(evaluation);
    return exit_code_for(evaluation.verdict);
}

}  // namespace

void add_executor_commands(CLI::App &app, int &exit_code) {
    auto options = std::make_shared<engine::ExecutorOptions>();
    auto socket = std::make_shared<std::string>();
    auto no_sandbox = std::make_shared<bool>(false);
    auto device = std::make_shared<std::string>("cpu");
    auto *executor = app.add_subcommand(
        "executor",
        "Run the persistent executor: load a model once, then serve JSON-lines RPCs (status, load,\n"
        "verify, measure, unload, shutdown) on a unix socket. Normally started by `hotpass submit`\n"
        "or a campaign, not by hand.");
    executor->add_option("--model", options->model, "checkpoint folder or preset:NAME")->required();
    executor->add_option("--seed", options->seed, "weight seed for presets")->capture_default_str();
    executor->add_option("--layers", options->n_layer, "serve only the first N layers (fast tier); 0: all")->capture_default_str()->check(count(0, "layers"));
    executor->add_option("--socket", *socket, "unix socket path to listen on (created owner-only)")->required();
    executor->add_option("--reference", options->reference, "trusted forward pass for verification")->capture_default_str();
    executor->add_option("--incumbent", options->incumbent, "forward pass candidates are timed against")->capture_default_str();
    executor->add_option("--threads", options->n_thread, "CPU threads for forward passes")->capture_default_str()->check(count(1, "threads"));
    executor->add_option("--max-loads", options->max_loads, "exit after this many candidates (recycling)")->capture_default_str()->check(count(1, "candidates"));
    executor->add_flag("--no-sandbox", *no_sandbox, "do not install the seccomp filter (debugging only)");
    executor->add_option("--device", *device, "cpu, or cuda: weights, KV cache and plugins on the GPU, decode timed as CUDA graphs")
        ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
    executor->add_option("--device-index", options->device_index, "CUDA device")->capture_default_str()->check(count(0, "devices"));
    executor->callback([=, &exit_code] {
        options->socket = *socket;
        options->device = *device == "cuda" ? backend::DeviceKind::cuda : backend::DeviceKind::cpu;
        options->sandbox = !*no_sandbox;
        exit_code = engine::run_executor(*options);
    });

    auto args = std::make_shared<SubmitArgs>();
    auto *submit = app.add_subcommand(
        "submit",
        "Evaluate one candidate forward pass: build it, hot-load it into an executor, verify it\n"
        "against the reference, time it against the incumbent, print the verdict.\n"
        "Exit code: 0 faster, 1 correct but not faster, 3 build failed, 4 rejected, 5 infrastructure, 2 bad usage.\n"
        "Example: hotpass submit my_candidate/ --model preset:tiny-llama --tier fast");
    submit->add_option("candidate", args->candidate_dir, "candidate directory (sources + optional candidate.json)")->required();
    submit->add_option("--model", args->model, "checkpoint folder or preset:NAME")->capture_default_str();
    submit->add_option("--seed", args->seed, "weight seed for presets")->capture_default_str();
    submit->add_option("--tier", args->tier, "fast: first --fast-layers layers, small workload; slow: all layers")
        ->check(CLI::IsMember({"fast", "slow"}))->capture_default_str();
    submit->add_option("--fast-layers", args->fast_layers, "layers served by the fast tier")->capture_default_str()->check(count(1, "layers"));
    submit->add_option("--workload", args->workload, "the shapes to time: {\"shapes\": [{name, weight, decode_batch, decode_kv, prefill: []}]}, or what `optimize --traffic` takes (a `traffic workload` file, a profile, a trace)");
    submit->add_option("--incumbent", args->incumbent, "forward pass to time against: baseline, reference, or a .so")->capture_default_str();
    submit->add_option("--cache", args->cache_dir, "artifact cache directory (default: $TMPDIR/hotpass-artifacts-UID, owner-only)");
    submit->add_option("--threads", args->n_thread, "CPU threads for forward passes")->capture_default_str()->check(count(1, "threads"));
    submit->add_option("--cases", args->n_case, "random verification batches")->capture_default_str()->check(count(1, "batches"));
    submit->add_option("--reference-tokens", args->reference_tokens,
                       "step tokens the plain reference runs per verification batch; a larger batch is compared whole with the "
                       "incumbent and on a random sample of this many tokens with the reference (0: the reference runs it whole)")
        ->check(count(0, "tokens"))->capture_default_str();
    submit->add_option("--seconds-per-shape", args->target_seconds, "timing budget per shape, seconds")->capture_default_str()->check(seconds());
    submit->add_option("--deadline", args->deadline_seconds, "seconds the verification may take before the executor counts as hung (loading a candidate: 30 s; timing: from --seconds-per-shape and the shapes)")->capture_default_str()->check(seconds());
    submit->add_flag("--no-measure", args->no_measure, "build and verify only (a correct candidate is then not_faster: exit 1)");
    submit->add_option("--device", args->device, "cpu, or cuda: the candidate is .cu sources built with nvcc and run on the GPU")
        ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
    submit->add_flag("--json", args->json_output, "print the evaluation as JSON");
    submit->callback([args, &exit_code] { exit_code = run_submit(*args); });
}

}  // namespace hp::cli
