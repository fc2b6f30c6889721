// The adversarial suite on the GPU (label `gpu`; skipped where no CUDA device answers): the
// executor on CUDA hot-swaps candidates built by nvcc, captures and replays CUDA graphs, and every
// device-side cheat or fault gets its verdict, after which the same supervisor still verifies an
// honest candidate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "hotpass/backend/backend.h"
#include "hotpass/tune/evaluate.h"

namespace hp::tune {
namespace {

namespace fs = std::filesystem;

const fs::path kWork = fs::temp_directory_path() / fmt::format("hotpass-adversarial-cuda-{}", getpid());

void copy_into(const fs::path &dir, const fs::path &from, const std::string &as) {
    fs::copy_file(from, dir / as, fs::copy_options::overwrite_existing);
}

// An adversary: its .cu, the shared adversary.cuh, and the CUDA reference it wraps.
Candidate adversary(const std::string &name) {
    const fs::path dir = kWork / "candidates" / name;
    fs::create_directories(dir);
    copy_into(dir, fs::path(HOTPASS_CUDA_ADVERSARIAL_DIR) / (name + ".cu"), name + ".cu");
    copy_into(dir, fs::path(HOTPASS_CUDA_ADVERSARIAL_DIR) / "adversary.cuh", "adversary.cuh");
    copy_into(dir, HOTPASS_SOURCE_DIR "/forward/cuda/reference/forward.cu", "reference_forward.inc");
    copy_into(dir, HOTPASS_SOURCE_DIR "/forward/cuda/reference/kernels.cuh", "kernels.cuh");
    auto candidate = load_candidate(dir);
    HP_CHECK(candidate.ok(), "{}", candidate.error());
    return *candidate;
}

// The in-tree CUDA baseline's sources as a candidate (graph-capturable).
Candidate honest() {
    const fs::path dir = kWork / "candidates" / "honest";
    fs::create_directories(dir);
    for (const auto &entry : fs::directory_iterator(HOTPASS_SOURCE_DIR "/forward/cuda/baseline")) {
        const std::string ext = entry.path().extension().string();
        if (ext == ".cu" || ext == ".cuh" || ext == ".h") copy_into(dir, entry.path(), entry.path().filename().string());
    }
    auto candidate = load_candidate(dir);
    HP_CHECK(candidate.ok(), "{}", candidate.error());
    return *candidate;
}

// The hotpass binary beside this test (a staged build), else the one this build made.
fs::path hotpass_binary() {
    if (const char *path = std::getenv("HOTPASS_BINARY_OVERRIDE")) return path;
    std::error_code code;
    const fs::path beside = fs::read_symlink("/proc/self/exe", code).parent_path() / "hotpass";
    return !code && fs::exists(beside) ? beside : fs::path(HOTPASS_BINARY);
}

EvaluateOptions options(bool measure, double verify_deadline_seconds = 120) {
    EvaluateOptions options;
    options.build = cuda_build_options();
    options.build.include_dir = HOTPASS_SOURCE_DIR "/include";
    options.build.cache_dir = kWork / "artifacts";
    options.tolerance = {3e-2, 3e-2};  // bf16 compute against the float32 GPU reference (docs/cuda.md)
    options.shapes = default_shapes(/*fast_tier=*/true);
    options.n_case = 6;
    options.greedy_steps = 6;
    options.load_deadline_seconds = 60;
    options.verify_deadline_seconds = verify_deadline_seconds;
    options.measure_deadline_seconds = 120;
    options.measure = measure;
    options.max_slowdown = 50;  // the CUDA reference's adversaries against the baseline incumbent
    options.runner.target_seconds = 0.3;
    options.runner.min_rep = 8;
    options.runner.max_rep = 200;
    return options;
}

class AdversarialCuda : public testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!backend::cuda_available()) return;
        ExecutorLaunch launch;
        launch.hotpass_binary = hotpass_binary();
        launch.model = "preset:tiny-llama";
        launch.device = "cuda";
        launch.incumbent = "baseline";
        launch.work_dir = kWork / "executor";
        launch.max_loads = 16;
        supervisor_ = new Supervisor(launch);
    }
    static void TearDownTestSuite() {
        delete supervisor_;
        supervisor_ = nullptr;
        std::error_code ignored;
        fs::remove_all(kWork, ignored);
    }
    void SetUp() override {
        if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    }

    void expect_verdict(const std::string &name, const std::string &code, bool measure = false, double deadline = 120) {
        const Evaluation evaluation = evaluate_candidate(*supervisor_, adversary(name), options(measure, deadline));
        EXPECT_EQ(evaluation.verdict.code, code) << name << ": " << evaluation.verdict.reason;
        EXPECT_FALSE(evaluation.verdict.reason.empty());
        const Evaluation next = evaluate_candidate(*supervisor_, honest(), options(false));
        EXPECT_TRUE(next.verdict.correct()) << "after " << name << ": " << next.verdict.code << ": " << next.verdict.reason;
    }

    static Supervisor *supervisor_;
};

Supervisor *AdversarialCuda::supervisor_ = nullptr;

// Hot swap on the GPU: the baseline's own sources, built by nvcc, loaded, verified, timed as CUDA
// graphs against the incumbent's graphs; a second swap reuses the executor (no restart).
TEST_F(AdversarialCuda, HonestCandidateIsHotSwappedAndTimedAsGraphs) {
    const Evaluation first = evaluate_candidate(*supervisor_, honest(), options(true));
    ASSERT_TRUE(first.verdict.correct()) << first.verdict.code << ": " << first.verdict.reason;
    ASSERT_TRUE(first.measurement.has_value());
    for (const auto &shape : first.measurement->raw["shapes"]) {
        EXPECT_TRUE(shape.value("candidate_graph", false)) << shape.dump();
        EXPECT_TRUE(shape.value("incumbent_graph", false)) << shape.dump();
        EXPECT_TRUE(shape.value("l2_flushed", false));
    }
    for (const auto &shape : first.measurement->shapes) EXPECT_GE(shape.n_sample, 8) << shape.name;
    // The same sources again: the artifact is cached, the executor is the same process.
    const int starts = supervisor_->n_start();
    const Evaluation second = evaluate_candidate(*supervisor_, honest(), options(true));
    EXPECT_TRUE(second.verdict.correct()) << second.verdict.code << ": " << second.verdict.reason;
    EXPECT_TRUE(second.build.artifact.cached);
    EXPECT_EQ(supervisor_->n_start(), starts);
    // Identical code timed against itself: no significant speedup either way is expected, but
    // the statistics decide; only the verdict's kind is asserted.
    auto status = supervisor_->call("status", nlohmann::json::object(), 30);
    ASSERT_TRUE(status.ok()) << status.message;
    EXPECT_EQ(status.result.value("device", ""), "cuda");
    EXPECT_EQ(status.result.value("persisting_l2_bytes", uint64_t(1)), 0u);
    for (const char *phase : {"context_seconds", "weights_seconds", "kv_cache_seconds", "plugins_seconds", "warmup_seconds"}) {
        EXPECT_TRUE(status.result["startup"].contains(phase)) << phase;
    }
}

TEST_F(AdversarialCuda, OutOfBoundsWritePoisonsTheContext) { expect_verdict("out_of_bounds_write", "device_fault"); }
TEST_F(AdversarialCuda, WritesIntoDeviceWeights) { expect_verdict("writes_weights", "wrote_weights"); }
TEST_F(AdversarialCuda, WorkOnASideStream) { expect_verdict("side_stream", "escaped_stream", /*measure=*/true); }
TEST_F(AdversarialCuda, UnwrittenOutput) { expect_verdict("unwritten_output", "unwritten_output"); }
TEST_F(AdversarialCuda, StaleOutput) {
    const Evaluation evaluation = evaluate_candidate(*supervisor_, adversary("stale_output"), options(false));
    EXPECT_TRUE(evaluation.verdict.code == "wrong_output" || evaluation.verdict.code == "greedy_divergence")
        << evaluation.verdict.code << ": " << evaluation.verdict.reason;
}
TEST_F(AdversarialCuda, SpinningKernelHangs) { expect_verdict("hang", "hang", false, /*deadline=*/15); }
TEST_F(AdversarialCuda, SpecialCasesWorkloadShapes) { expect_verdict("special_cases_shapes", "wrong_output"); }

}  // namespace
}  // namespace hp::tune
