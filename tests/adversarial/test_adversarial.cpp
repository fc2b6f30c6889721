// The adversarial suite: every candidate in candidates/ must get its verdict, and the supervisor
// that evaluated it must still evaluate the next honest candidate correctly.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "../process_gone.h"
#include "hotpass/tune/evaluate.h"

namespace hp::tune {
namespace {

namespace fs = std::filesystem;

const fs::path kWork = fs::temp_directory_path() / fmt::format("hotpass-adversarial-{}", getpid());

// A candidate directory holding `source` and a copy of the CPU reference it may wrap.
Candidate make_candidate(const std::string &name, const fs::path &source) {
    const fs::path dir = kWork / "candidates" / name;
    fs::create_directories(dir);
    fs::copy_file(source, dir / (name + ".cpp"), fs::copy_options::overwrite_existing);
    fs::copy_file(HOTPASS_SOURCE_DIR "/forward/cpu/reference/forward.cpp", dir / "reference_forward.inc",
                  fs::copy_options::overwrite_existing);
    auto candidate = load_candidate(dir);
    HP_CHECK(candidate.ok(), "{}", candidate.error());
    return *candidate;
}

Candidate honest() { return make_candidate("honest", HOTPASS_SOURCE_DIR "/forward/cpu/reference/forward.cpp"); }

// Deadlines are generous (a loaded 2-core CI machine), except where the test waits for a hang.
EvaluateOptions options(bool measure, double verify_deadline_seconds = 90) {
    EvaluateOptions options;
    options.build.include_dir = HOTPASS_SOURCE_DIR "/include";
    options.build.cache_dir = kWork / "artifacts";
    options.shapes = default_shapes(/*fast_tier=*/true);  // includes one sequence decoding at position 128
    options.n_case = 6;
    options.greedy_steps = 6;
    options.verify_seed = 0;  // fresh every run
    options.load_deadline_seconds = 10;
    options.verify_deadline_seconds = verify_deadline_seconds;
    options.measure_deadline_seconds = 60;
    options.measure = measure;
    // very_slow sleeps 100 ms per call: 30x+ a tiny-llama decode step, ~1.5x a prefill of 64.
    // A 5x limit keeps the verdict stable on a loaded machine.
    options.max_slowdown = 5;
    options.runner.target_seconds = 0.2;
    options.runner.min_rep = 4;
    options.runner.max_rep = 20;
    return options;
}

ExecutorLaunch launch(int n_layer) {
    ExecutorLaunch launch;
    launch.hotpass_binary = HOTPASS_BINARY;
    launch.model = "preset:tiny-llama";
    launch.n_layer = n_layer;
    launch.work_dir = kWork / fmt::format("executor-{}", n_layer);
    launch.max_loads = 8;
    launch.incumbent = "reference";
    return launch;
}

class Adversarial : public testing::Test {
protected:
    static void SetUpTestSuite() { fast_ = new Supervisor(launch(2)); }
    static void TearDownTestSuite() {
        delete fast_;
        fs::remove_all(kWork);
    }

    // Evaluates the named adversary, asserts its verdict, then checks an honest candidate.
    void expect_verdict(const std::string &name, const std::string &code, bool measure = false, double deadline = 90) {
        const Evaluation adversary = evaluate_candidate(
            *fast_, make_candidate(name, fs::path(HOTPASS_ADVERSARIAL_DIR) / (name + ".cpp")), options(measure, deadline));
        EXPECT_EQ(adversary.verdict.code, code) << name << ": " << adversary.verdict.reason;
        EXPECT_FALSE(adversary.verdict.reason.empty());
        const Evaluation next = evaluate_candidate(*fast_, honest(), options(false));
        EXPECT_TRUE(next.verdict.correct()) << "after " << name << ": " << next.verdict.code << ": " << next.verdict.reason;
    }

    static Supervisor *fast_;
};

Supervisor *Adversarial::fast_ = nullptr;

TEST_F(Adversarial, HonestCandidateIsVerifiedAndTimed) {
    const Evaluation evaluation = evaluate_candidate(*fast_, honest(), options(true));
    EXPECT_TRUE(evaluation.verdict.correct()) << evaluation.verdict.code << ": " << evaluation.verdict.reason;
    ASSERT_TRUE(evaluation.measurement.has_value());
    EXPECT_EQ(evaluation.measurement->shapes.size(), 3u);
    for (const auto &shape : evaluation.measurement->shapes) EXPECT_GE(shape.n_sample, 4) << shape.name;
}

TEST_F(Adversarial, Segfault) { expect_verdict("segfault", "crash"); }
TEST_F(Adversarial, Abort) { expect_verdict("abort", "crash"); }
TEST_F(Adversarial, InfiniteLoop) { expect_verdict("infinite_loop", "hang", false, /*deadline=*/10); }
TEST_F(Adversarial, VerySlow) { expect_verdict("very_slow", "too_slow", /*measure=*/true); }
// Under a time cap a shape where the candidate is clearly slower stops after three pairs.
TEST_F(Adversarial, VerySlowStopsEarlyUnderATimeCap) {
    EvaluateOptions capped = options(true);
    capped.runner.max_seconds = 0.4;
    const Evaluation evaluation =
        evaluate_candidate(*fast_, make_candidate("very_slow", fs::path(HOTPASS_ADVERSARIAL_DIR) / "very_slow.cpp"), capped);
    EXPECT_EQ(evaluation.verdict.code, "too_slow") << evaluation.verdict.reason;
    ASSERT_TRUE(evaluation.measurement.has_value());
    // very_slow sleeps 100 ms a call: 30x+ a tiny-llama decode step, ~1.5x a 64-token prefill
    // (not "clearly" slower there, so that shape runs its pairs).
    const auto &raw = evaluation.measurement->raw.at("shapes");
    int stopped = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i].value("stopped_early", "") != "the candidate was clearly slower") continue;
        ++stopped;
        EXPECT_EQ(evaluation.measurement->shapes[i].n_sample, 3) << evaluation.measurement->shapes[i].name;
    }
    EXPECT_GE(stopped, 2) << raw.dump();
}
TEST_F(Adversarial, WritesWeights) { expect_verdict("writes_weights", "wrote_weights"); }
TEST_F(Adversarial, EditsTheModelDescription) { expect_verdict("edits_model_description", "wrote_weights"); }
TEST_F(Adversarial, WritesOutsideOutputs) { expect_verdict("writes_outside_outputs", "wrote_outside_outputs"); }
TEST_F(Adversarial, LeavesOutputsUnwritten) { expect_verdict("unwritten_output", "unwritten_output"); }
TEST_F(Adversarial, NanOutput) { expect_verdict("nan_output", "nan_output"); }
TEST_F(Adversarial, NanInTheKvCache) { expect_verdict("nan_kv", "kv_mismatch"); }
TEST_F(Adversarial, InvalidUtf8Name) {
    const Evaluation evaluation = evaluate_candidate(
        *fast_, make_candidate("invalid_utf8_name", fs::path(HOTPASS_ADVERSARIAL_DIR) / "invalid_utf8_name.cpp"), options(false));
    EXPECT_TRUE(evaluation.verdict.correct()) << evaluation.verdict.code << ": " << evaluation.verdict.reason;
}
TEST_F(Adversarial, CachesResultsByInputPointer) {
    // The verifier reuses the batch arrays' addresses with new contents: replayed results are
    // caught on a random batch of a repeated size, or by the greedy decode (one row per step).
    const Evaluation evaluation = evaluate_candidate(
        *fast_, make_candidate("caches_by_pointer", fs::path(HOTPASS_ADVERSARIAL_DIR) / "caches_by_pointer.cpp"), options(false));
    EXPECT_TRUE(evaluation.verdict.code == "wrong_output" || evaluation.verdict.code == "greedy_divergence")
        << evaluation.verdict.code << ": " << evaluation.verdict.reason;
}
TEST_F(Adversarial, ReturnsThePreviousResult) {
    const Evaluation evaluation = evaluate_candidate(
        *fast_, make_candidate("returns_previous", fs::path(HOTPASS_ADVERSARIAL_DIR) / "returns_previous.cpp"), options(false));
    // Caught either on a batch whose size repeats, or by the greedy decode (one row per step).
    EXPECT_TRUE(evaluation.verdict.code == "wrong_output" || evaluation.verdict.code == "greedy_divergence")
        << evaluation.verdict.code << ": " << evaluation.verdict.reason;
}
// Honest while verified, replaying its previous logits on the timing loop's repeated layouts: the
// candidate's timed outputs are checked after the loop.
TEST_F(Adversarial, CheatsOnlyWhileTimed) { expect_verdict("cheats_while_timed", "wrong_after_timing", /*measure=*/true); }
// The same with the campaign's reference budget (16 tokens): a 64-token prefill shape fits none of
// it, and its shortest sequence is checked all the same.
TEST_F(Adversarial, CheatsOnlyWhileTimedUnderAReferenceBudget) {
    EvaluateOptions budgeted = options(/*measure=*/true);
    budgeted.reference_tokens = 16;
    budgeted.shapes = {budgeted.shapes.back()};
    ASSERT_FALSE(budgeted.shapes[0].prefill.empty()) << "the fast tier's last default shape is its prefill";
    const Evaluation evaluation = evaluate_candidate(
        *fast_, make_candidate("cheats_while_timed", fs::path(HOTPASS_ADVERSARIAL_DIR) / "cheats_while_timed.cpp"), budgeted);
    EXPECT_EQ(evaluation.verdict.code, "wrong_after_timing") << evaluation.verdict.reason;
}
TEST_F(Adversarial, Nondeterministic) { expect_verdict("nondeterministic", "nondeterministic"); }
TEST_F(Adversarial, SpecialCasesWorkloadShapes) { expect_verdict("special_cases_shapes", "wrong_output"); }
TEST_F(Adversarial, LeaksMemoryEveryCall) { expect_verdict("leaks_memory", "leaks_memory", /*measure=*/true); }
TEST_F(Adversarial, LeavesAThreadRunning) { expect_verdict("leaves_thread", "leaked_thread"); }
// Wrong and leaking a thread: the wrong output is the verdict, and the executor is still replaced
// (expect_verdict's honest candidate would crash in it otherwise).
TEST_F(Adversarial, WrongAndLeavesAThreadRunning) {
    const int starts = fast_->n_start();
    expect_verdict("wrong_and_leaves_thread", "wrong_output");
    EXPECT_GT(fast_->n_start(), starts) << "the executor that ran it was not replaced";
}
TEST_F(Adversarial, Forks) { expect_verdict("forks", "forbidden_syscall"); }
TEST_F(Adversarial, WritesFiles) {
    expect_verdict("writes_file", "forbidden_syscall");
    EXPECT_FALSE(fs::exists("/tmp/hotpass-adversary-was-here"));
}
TEST_F(Adversarial, OpensASocket) { expect_verdict("opens_socket", "forbidden_syscall"); }
TEST_F(Adversarial, SignalsTheProcessThatStartedIt) { expect_verdict("signals_parent", "forbidden_syscall"); }
TEST_F(Adversarial, MakesASymlink) {
    fs::remove("/tmp/hotpass-adversary-link");
    expect_verdict("makes_symlink", "forbidden_syscall");
    EXPECT_FALSE(fs::is_symlink("/tmp/hotpass-adversary-link"));
}
TEST_F(Adversarial, ExportsExtraSymbols) { expect_verdict("extra_symbols", "bad_exports"); }
TEST_F(Adversarial, WrongAbiVersion) { expect_verdict("wrong_abi", "abi_mismatch"); }
TEST_F(Adversarial, FailsToBuild) {
    const Evaluation evaluation =
        evaluate_candidate(*fast_, make_candidate("build_fails", fs::path(HOTPASS_ADVERSARIAL_DIR) / "build_fails.cpp"), options(false));
    EXPECT_EQ(evaluation.verdict.code, "build_failed");
    EXPECT_NE(evaluation.build.diagnostics.find("this_is_not_defined"), std::string::npos) << evaluation.build.diagnostics;
}

// Skipping layers passes a fast tier that serves exactly those layers; the slow tier catches it.
TEST_F(Adversarial, SkipsLayersBeyondTheFastTier) {
    const Candidate skipper = make_candidate("skips_layers", fs::path(HOTPASS_ADVERSARIAL_DIR) / "skips_layers.cpp");
    const Evaluation fast = evaluate_candidate(*fast_, skipper, options(false));
    EXPECT_TRUE(fast.verdict.correct()) << fast.verdict.code << ": " << fast.verdict.reason;
    Supervisor slow(launch(0));
    const Evaluation all_layers = evaluate_candidate(slow, skipper, options(false));
    EXPECT_EQ(all_layers.verdict.code, "wrong_output") << all_layers.verdict.reason;
}

// With the reference limited to a sample of each large batch, the rows it does not compute are
// compared with the incumbent: a candidate wrong only there is still caught, and by that check.
TEST_F(Adversarial, WrongOnlyWhereTheReferenceDoesNotSample) {
    const Candidate adversary =
        make_candidate("wrong_beyond_reference_sample", fs::path(HOTPASS_ADVERSARIAL_DIR) / "wrong_beyond_reference_sample.cpp");
    EvaluateOptions sampled = options(false);
    // 600 tokens of history: random KV (write_history), so that path is covered here too.
    sampled.shapes = {Shape{"decode b3 kv200 + prefill [64]", 1.0, 3, 200, {64}}};
    sampled.reference_tokens = 40;
    const Evaluation caught = evaluate_candidate(*fast_, adversary, sampled);
    EXPECT_EQ(caught.verdict.code, "wrong_output") << caught.verdict.reason;
    EXPECT_NE(caught.verdict.reason.find("verified incumbent"), std::string::npos) << caught.verdict.reason;
    const nlohmann::json &shape_case = caught.verification.at("cases").at(0);
    EXPECT_TRUE(shape_case.at("reference_sample").at("cut").get<bool>()) << shape_case.dump();
    EXPECT_LE(shape_case.at("reference_sample").at("n_token").get<int>(), 40);
    EXPECT_EQ(shape_case.value("history", ""), "random") << shape_case.dump();

    EvaluateOptions whole = sampled;
    whole.reference_tokens = 0;
    const Evaluation by_reference = evaluate_candidate(*fast_, adversary, whole);
    EXPECT_EQ(by_reference.verdict.code, "wrong_output") << by_reference.verdict.reason;
    EXPECT_NE(by_reference.verdict.reason.find("from the reference"), std::string::npos) << by_reference.verdict.reason;

    const Evaluation honest_sampled = evaluate_candidate(*fast_, honest(), sampled);
    EXPECT_TRUE(honest_sampled.verdict.correct()) << honest_sampled.verdict.code << ": " << honest_sampled.verdict.reason;
}

// The slow tier's greedy check starts from one of the traffic's sampled requests: a long prompt's
// history is written by the incumbent, each side prefills its last 8 tokens and decodes.
TEST_F(Adversarial, GreedyCheckReplaysATrafficRequest) {
    EvaluateOptions replay = options(false);
    replay.greedy_prompts = {GreedyPrompt{200, {}}};
    const Evaluation honest_replay = evaluate_candidate(*fast_, honest(), replay);
    ASSERT_TRUE(honest_replay.verdict.correct()) << honest_replay.verdict.code << ": " << honest_replay.verdict.reason;
    const nlohmann::json &greedy = honest_replay.verification.at("greedy");
    EXPECT_EQ(greedy.at("prompt_tokens").get<int>(), 200) << greedy.dump();
    EXPECT_EQ(greedy.at("history_tokens").get<int>(), 192) << greedy.dump();
    EXPECT_EQ(greedy.at("reference").size(), size_t(replay.greedy_steps));

    // Token ids from the trace are used as given; a request longer than the model's context is cut.
    replay.greedy_prompts = {GreedyPrompt{5000, {7, 8, 9}}};
    const Evaluation cut = evaluate_candidate(*fast_, honest(), replay);
    ASSERT_TRUE(cut.verdict.correct()) << cut.verdict.code << ": " << cut.verdict.reason;
    EXPECT_EQ(cut.verification.at("greedy").at("request_prompt_tokens").get<int>(), 5000);
    EXPECT_LE(cut.verification.at("greedy").at("prompt_tokens").get<int>(), 1024);
    EXPECT_TRUE(cut.verification.at("greedy").at("request_token_ids").get<bool>());

}

TEST_F(Adversarial, ExecutorIsRecycledAfterMaxLoads) {
    ASSERT_TRUE(fast_->ensure_started().ok());
    const int starts = fast_->n_start();
    for (int i = 0; i < 9; ++i) {
        const Evaluation evaluation = evaluate_candidate(*fast_, honest(), options(false));
        ASSERT_TRUE(evaluation.verdict.correct()) << evaluation.verdict.reason;
    }
    EXPECT_GE(fast_->n_start(), starts + 1);  // max_loads = 8
}

// The terminal's Ctrl-C goes to the foreground process group: the executor is outside it, so an
// interrupted campaign decides what happens to the candidate in flight, not the signal.
TEST_F(Adversarial, ExecutorIsOutsideTheCallersProcessGroup) {
    ASSERT_TRUE(fast_->ensure_started().ok());
    ASSERT_GT(fast_->pid(), 0);
    EXPECT_EQ(getpgid(fast_->pid()), fast_->pid());
    EXPECT_NE(getpgid(fast_->pid()), getpgrp());
}

// ... and still dies with the process that started it (no orphan spinning on a hanging candidate),
// even while its connection stays open: a forked holder keeps the socket, so only the death signal
// can end it.
TEST_F(Adversarial, ExecutorDiesWithTheProcessThatStartedIt) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(fds[0]);
        ExecutorLaunch own = launch(2);
        own.work_dir = kWork / "executor-orphan";  // its own socket, not the suite's executor's
        Supervisor supervisor(own);
        const pid_t executor = supervisor.ensure_started().ok() ? supervisor.pid() : -1;
        const pid_t holder = fork();
        if (holder == 0) {
            sleep(60);
            _exit(0);
        }
        const pid_t pids[2] = {executor, holder};
        (void)!write(fds[1], pids, sizeof pids);
        _exit(0);  // no destructor: the supervisor does not stop it
    }
    close(fds[1]);
    pid_t pids[2] = {-1, -1};
    ASSERT_EQ(read(fds[0], pids, sizeof pids), ssize_t(sizeof pids));
    close(fds[0]);
    waitpid(child, nullptr, 0);
    const pid_t executor = pids[0];
    if (executor <= 0 && pids[1] > 0) kill(pids[1], SIGKILL);
    ASSERT_GT(executor, 0);
    const bool gone = hp::test_support::process_gone_within(executor, 30);  // 30 s: a loaded machine
    EXPECT_TRUE(gone) << "executor " << executor << " outlived the process that started it";
    if (!gone) kill(executor, SIGKILL);
    if (pids[1] > 0) kill(pids[1], SIGKILL);
}

}  // namespace
}  // namespace hp::tune
