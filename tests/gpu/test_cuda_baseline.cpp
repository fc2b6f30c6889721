// The CUDA baseline against the CUDA reference on mixed random batches for every tiny preset, and
// its CUDA-graph capture: a captured decode step replayed with new inputs gives the eager step's
// logits bit for bit.
//
// The persistent one-token step (step_kernel.cuh, knob persistent_step, off by default) runs in the
// plugin built with it on (forward "baseline_persistent"): llama-300m (input widths 1024 and 4096,
// d_head 64, GQA 4) is checked against the reference over one-token steps of a long and a short
// sequence (many attention splits, one), for bf16 and f16 KV, and its graph replay against eager
// steps. The plugin's create() log says whether the model takes the persistent step; the test
// requires that it does.
//
// Tolerance (docs/cuda.md): bf16 GEMM inputs (normed activations, attention output, SiLU product)
// and a bf16 KV cache on both sides give max|Δ| up to about 2.5% of max|logit| on these 2-4-layer
// presets; the bound is 3e-2 · max|ref|. With top-k routing that rounding can flip a near-tied
// expert choice for a token, which changes that token's row by far more than any tolerance, so MoE
// presets are checked twice: with their own top-k, at most 10% of logit rows may exceed the bound
// (and expert counts agree within 5%); with top-k = every expert (no choice to flip), every row
// must be within it.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "gpu_rig.h"
#include "scenario.h"

namespace hp {
namespace {

constexpr double kBf16Tolerance = 3e-2;
constexpr double kMaxFlippedRows = 0.10;

struct PresetCase {
    std::string preset;
    DType kv_dtype;
};

std::string case_name(const testing::TestParamInfo<PresetCase> &info) {
    std::string name = info.param.preset + "_kv_" + std::string(dtype_name(info.param.kv_dtype));
    for (char &ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name;
}

Result<model::Model> random_model(const std::string &preset, bool every_expert = false) {
    model::SyntheticOptions synthetic;
    synthetic.seed = 21;
    synthetic.bias_std = 0.05f;
    synthetic.norm_std = 0.1f;
    auto model = model::open_model("preset:" + preset, synthetic);
    if (model.ok() && every_expert) model->config.n_expert_used = model->config.n_expert;  // weights do not depend on top-k
    return model;
}

void expect_close(const model::Model &model, const gpu_test::ScenarioResult &actual, const gpu_test::ScenarioResult &expected,
                  const std::string &label, bool allow_flips) {
    ASSERT_EQ(expected.error, "");
    ASSERT_EQ(actual.error, "");
    ASSERT_EQ(actual.logits.size(), expected.logits.size());
    int rows = 0, outliers = 0;
    for (size_t step = 0; step < expected.logits.size(); ++step) {
        const auto d = gpu_test::compare(actual.logits[step], expected.logits[step]);
        const int step_outliers = gpu_test::outlier_rows(actual.logits[step], expected.logits[step], model.config.n_vocab, kBf16Tolerance);
        rows += int(expected.logits[step].size() / size_t(model.config.n_vocab));
        outliers += step_outliers;
        if (!allow_flips) {
            EXPECT_LE(d.max_delta, kBf16Tolerance * d.max_ref) << label << " step " << step;
        }
        std::printf("%s step %zu: max|delta| %.3g (max|ref| %.3g, ratio %.2e), %d rows over the bound\n", label.c_str(), step, d.max_delta,
                    d.max_ref, d.max_delta / d.max_ref, step_outliers);
    }
    EXPECT_LE(outliers, int(kMaxFlippedRows * rows)) << label << ": " << outliers << " of " << rows << " logit rows over the bound";
    ASSERT_EQ(actual.expert_counts.size(), expected.expert_counts.size());
    int differing = 0, total = 0;
    for (size_t i = 0; i < expected.expert_counts.size(); ++i) {
        differing += std::abs(actual.expert_counts[i] - expected.expert_counts[i]);
        total += expected.expert_counts[i];
    }
    EXPECT_LE(differing, total / 20) << label << ": expert counts differ in " << differing << " of " << total << " routings";
}

// Engine options on the GPU with the forward pass `forward` (the engine's default is the baseline):
// `kv_dtype` KV in blocks of 16 tokens, 1024 tokens in all.
engine::EngineOptions cuda_options(const char *forward, DType kv_dtype) {
    engine::EngineOptions options;
    options.device = backend::DeviceKind::cuda;
    options.forward = forward;
    options.kv.dtype = kv_dtype;
    options.kv.block_tokens = 16;
    options.kv.max_tokens = 1024;
    return options;
}

// A reference engine and a baseline engine on `model`, the same scenario on both.
void run_pair(const model::Model &model, DType kv_dtype, const std::string &label, bool allow_flips) {
    engine::EngineOptions options = cuda_options("reference", kv_dtype);
    auto reference = engine::Engine::create(model, options);
    options.forward = "baseline";
    auto baseline = engine::Engine::create(model, options);
    ASSERT_TRUE(reference.ok()) << reference.error();
    ASSERT_TRUE(baseline.ok()) << baseline.error();
    const auto expected = gpu_test::run_scenario(**reference, 9);
    const auto actual = gpu_test::run_scenario(**baseline, 9);
    expect_close(model, actual, expected, label, allow_flips);
}

class CudaBaselineVsReference : public testing::TestWithParam<PresetCase> {};

TEST_P(CudaBaselineVsReference, MixedRandomBatchesMatch) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model(GetParam().preset);
    ASSERT_TRUE(model.ok()) << model.error();
    run_pair(*model, GetParam().kv_dtype, GetParam().preset, model->config.is_moe());
}

TEST_P(CudaBaselineVsReference, EveryExpertRoutedMatchesStrictly) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model(GetParam().preset, true);
    ASSERT_TRUE(model.ok()) << model.error();
    if (!model->config.is_moe()) GTEST_SKIP() << "dense preset";
    run_pair(*model, GetParam().kv_dtype, GetParam().preset + " (top-k = all)", false);
}

// The routing's top-k needs 1 <= k <= n_expert (route_token picks k distinct experts below
// n_expert). config.json parsing refuses other values, but a model handed to the plugin otherwise
// must be refused at create, with the ABI's "unsupported", not routed past the expert tables.
TEST(CudaBaselineConfig, RefusesTopKOutsideTheExperts) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("tiny-moe");
    ASSERT_TRUE(model.ok()) << model.error();
    const int n_expert = model->config.n_expert;
    auto create_with_top_k = [&](int k) {
        model->config.n_expert_used = k;
        engine::EngineOptions options;
        options.device = backend::DeviceKind::cuda;
        options.forward = "baseline";
        options.kv.max_tokens = 64;
        return engine::Engine::create(*model, options);
    };
    for (const int k : {0, n_expert + 1}) {
        auto engine = create_with_top_k(k);
        ASSERT_FALSE(engine.ok()) << "top-k " << k << " of " << n_expert << " experts accepted";
        EXPECT_NE(engine.error().find("unsupported"), std::string::npos) << engine.error();
    }
    auto engine = create_with_top_k(n_expert);  // the bound itself is taken
    EXPECT_TRUE(engine.ok()) << engine.error();
}

// The baseline unloaded and loaded again in one process, each load running a step: the pattern of the
// executor's swaps. The CUDA runtime (13.0) hung in the first kernel launch of a plugin loaded again
// (RefusesTopKOutsideTheExperts above, 2026-12-05), which ForwardPlugin::keep_loaded avoids by keeping
// CUDA plugins mapped; this and that test are its regression tests on the device.
TEST(CudaBaselineConfig, PluginLoadedAgainRunsSteps) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("tiny-moe");
    ASSERT_TRUE(model.ok()) << model.error();
    for (int load = 0; load < 3; ++load) {
        engine::EngineOptions options;
        options.device = backend::DeviceKind::cuda;
        options.forward = "baseline";
        options.kv.max_tokens = 64;
        options.warm_up = true;  // one one-token step before create() returns: this load's kernels launch
        auto engine = engine::Engine::create(*model, options);
        ASSERT_TRUE(engine.ok()) << "load " << load << ": " << engine.error();
    }
}

// Steps above the decode kernels' limit run gate/up and k/v as one strided-batched cuBLAS GEMM
// each (knob gemm_pair), whose batch stride is the distance from the first matrix to the second;
// where the second lies below the first it must fall back to two GEMMs. The engine places weights
// in model.tensors order (gate before up, k before v), so the model's tensor list reversed places
// every pair the other way round; the scenario's 64- and 150-token steps take the fallback.
TEST(CudaBaselineConfig, WeightsPlacedInReverseOrderMatch) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("tiny-llama");
    ASSERT_TRUE(model.ok()) << model.error();
    std::reverse(model->tensors.begin(), model->tensors.end());  // tensors are bound by name, placed in list order
    run_pair(*model, DType::bf16, "tiny-llama (weights placed in reverse)", false);
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, CudaBaselineVsReference,
                         testing::Values(PresetCase{"tiny-llama", DType::bf16}, PresetCase{"tiny-llama3", DType::bf16},
                                         PresetCase{"tiny-qwen2", DType::bf16}, PresetCase{"tiny-qwen3", DType::bf16},
                                         PresetCase{"tiny-moe", DType::bf16}, PresetCase{"tiny-qwen2-moe", DType::bf16},
                                         PresetCase{"tiny-mixtral", DType::bf16}, PresetCase{"tiny-llama", DType::f32},
                                         PresetCase{"tiny-qwen3", DType::f16}),
                         case_name);

// Captures decode(0) on `graph`, then for steps 0..2 replays decode(step) there and runs it eagerly on
// `eager` (the replay first: it writes the step's KV, which the eager step rewrites): the replayed
// logits must equal the eager step's within tolerance * max|ref|.
template <typename Decode>
void expect_replays_match(gpu_test::PluginRig &eager, gpu_test::PluginRig &graph, Decode &&decode, const std::string &label, double tolerance) {
    ASSERT_TRUE(graph.capture(decode(0)).ok());
    for (int step = 0; step < 3; ++step) {
        ASSERT_TRUE(graph.replay(decode(step)).ok());
        auto replayed = graph.logits();
        auto expected = eager.run(decode(step));
        ASSERT_TRUE(replayed.ok() && expected.ok());
        const auto d = gpu_test::compare(*replayed, *expected);
        EXPECT_LE(d.max_delta, tolerance * d.max_ref) << label << " step " << step;
        std::printf("%s graph step %d: max|delta| %.3g (max|ref| %.3g)\n", label.c_str(), step, d.max_delta, d.max_ref);
    }
}

class CudaBaselineGraph : public testing::TestWithParam<std::string> {};

// Four sequences prefilled eagerly, then one decode step captured as a graph and replayed twice
// with new tokens and positions; each replay must give what the same step gives eagerly.
TEST_P(CudaBaselineGraph, ReplayWithNewInputsMatchesEager) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model(GetParam());
    ASSERT_TRUE(model.ok()) << model.error();
    engine::EngineOptions options;
    options.device = backend::DeviceKind::cuda;
    options.forward = "baseline";
    options.kv.dtype = DType::bf16;
    options.kv.block_tokens = 16;
    options.kv.n_block = 64;
    auto engine = engine::Engine::create(*model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    auto eager = gpu_test::PluginRig::create(**engine, "baseline");
    auto graph = gpu_test::PluginRig::create(**engine, "baseline");
    ASSERT_TRUE(eager.ok()) << eager.error();
    ASSERT_TRUE(graph.ok()) << graph.error();
    const int n_vocab = model->config.n_vocab, max_blocks = 8;
    std::vector<int> lengths = {5, 17, 70, 2};
    auto blocks_of = [&](int s) {
        std::vector<int32_t> blocks;
        for (int b = 0; b < max_blocks; ++b) blocks.push_back(s * max_blocks + b);
        return blocks;
    };
    gpu_test::HostBatch prefill;
    prefill.max_blocks = max_blocks;
    for (int s = 0; s < 4; ++s) {
        std::vector<int32_t> tokens;
        for (int i = 0; i < lengths[size_t(s)]; ++i) tokens.push_back(int32_t((s * 131 + i * 17) % n_vocab));
        prefill.add(tokens, 0, blocks_of(s), false);
    }
    ASSERT_TRUE((*eager)->run(prefill).ok());
    auto decode = [&](int step) {
        gpu_test::HostBatch batch;
        batch.max_blocks = max_blocks;
        for (int s = 0; s < 4; ++s) batch.add({int32_t((step * 31 + s * 7) % n_vocab)}, lengths[size_t(s)] + step, blocks_of(s), false);
        return batch;
    };
    expect_replays_match(**eager, **graph, decode, GetParam(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, CudaBaselineGraph, testing::Values("tiny-llama", "tiny-moe", "tiny-qwen2-moe"),
                         [](const testing::TestParamInfo<std::string> &info) {
                             std::string name = info.param;
                             for (char &ch : name) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return name;
                         });

// The plugin's log lines while `body` runs (spdlog's default logger, where the engine routes them).
template <typename Body>
std::string plugin_log(Body &&body) {
    std::ostringstream lines;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
    auto logger = spdlog::default_logger();
    const auto level = logger->level();
    logger->set_level(spdlog::level::info);
    logger->sinks().push_back(sink);
    body();
    logger->sinks().pop_back();
    logger->set_level(level);
    return lines.str();
}

// One-token steps of one sequence of ~500 positions (llama-300m: 16/4 heads, d_head 64, d_model 1024)
// against the reference, every step: the single-token attention then runs its 4 splits as a cluster,
// the shape in which a plugin built with knob attn_fd_oproj folds o_proj into it (256 rows a split;
// bench/gpu/ab_decode.sh HOTPASS_AB_VARIANT_TESTS runs this binary with such a plugin). A plugin whose
// log says the knob is on must also say that a step took it.
TEST(CudaBaselineLongSequence, OneTokenStepsMatchReference) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("llama-300m");
    ASSERT_TRUE(model.ok()) << model.error();
    engine::EngineOptions options = cuda_options("reference", DType::bf16);
    auto reference = engine::Engine::create(*model, options);
    options.forward = "baseline";
    Result<std::unique_ptr<engine::Engine>> baseline = Error{"not created"};
    std::string log = plugin_log([&] { baseline = engine::Engine::create(*model, options); });
    ASSERT_TRUE(reference.ok()) << reference.error();
    ASSERT_TRUE(baseline.ok()) << baseline.error();
    const int n_vocab = model->config.n_vocab;
    std::vector<int32_t> prefill;
    for (int i = 0; i < 500; ++i) prefill.push_back(int32_t(splitmix64(31 + uint64_t(i)) % uint64_t(n_vocab)));
    std::vector<engine::Engine *> engines = {reference->get(), baseline->get()};
    std::vector<int> seq(2);
    for (int e = 0; e < 2; ++e) {
        seq[size_t(e)] = engines[size_t(e)]->add_sequence();
        ASSERT_TRUE(engines[size_t(e)]->step({{seq[size_t(e)], prefill, false}}).ok());
    }
    for (int step = 0; step < 6; ++step) {
        const std::vector<int32_t> token = {int32_t(splitmix64(7919 + uint64_t(step)) % uint64_t(n_vocab))};
        std::vector<std::vector<float>> logits;
        for (int e = 0; e < 2; ++e) {
            Result<std::vector<float>> out = Error{"not run"};
            log += plugin_log([&] { out = engines[size_t(e)]->step({{seq[size_t(e)], token, false}}); });
            ASSERT_TRUE(out.ok()) << out.error();
            logits.push_back(std::move(out).value());
        }
        ASSERT_EQ(logits[1].size(), size_t(n_vocab));
        const auto d = gpu_test::compare(logits[1], logits[0]);
        EXPECT_LE(d.max_delta, kBf16Tolerance * d.max_ref) << "step " << step;
        std::printf("one-token step %d at %d positions: max|delta| %.3g (max|ref| %.3g, ratio %.2e)\n", step, 501 + step, d.max_delta, d.max_ref,
                    d.max_delta / d.max_ref);
    }
    if (log.find("attn_fd_oproj: on") != std::string::npos) {
        EXPECT_NE(log.find("o_proj done in the single-token attention"), std::string::npos) << "the plugin has attn_fd_oproj on, no step took it:\n" << log;
    }
    std::printf("o_proj in the attention: %s\n", log.find("o_proj done in the single-token attention") != std::string::npos ? "yes" : "no");
}

// Decode steps of 8, 12, 40, 56 and 80 sequences, every token alone in its sequence (prefilled to 2-256
// positions, KV blocks of 16), against the reference each step (llama-300m: 4 kv heads, d_head 64, GQA group 4).
// At 8 tokens the plugin's defaults run the tensor-core attention with its K/V through the shared-memory ring,
// the first warp step copied before the wait (knobs attn_mma_ring, attn_mma_ring_min_tokens / _max_tokens,
// attn_mma_ring_early); at 12 the CUDA-core kernel; at 40, 56 and 80 the tensor-core kernel in the blocks one wave
// of a 132-SM device holds (attn_mma_one_wave: 3 splits of 4-warp blocks, one of 8-warp blocks, one of 4-warp
// blocks; where attn_fd_target_blocks alone gave 4 and 3 splits of 4-warp blocks and one of 8-warp blocks).
TEST(CudaBaselineDecodeBatch, OneTokenPerSequenceMatchesReference) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("llama-300m");
    ASSERT_TRUE(model.ok()) << model.error();
    engine::EngineOptions options = cuda_options("reference", DType::bf16);
    options.kv.max_tokens = 16384;
    auto reference = engine::Engine::create(*model, options);
    options.forward = "baseline";
    auto baseline = engine::Engine::create(*model, options);
    ASSERT_TRUE(reference.ok()) << reference.error();
    ASSERT_TRUE(baseline.ok()) << baseline.error();
    const int n_vocab = model->config.n_vocab;
    std::vector<int> lengths = {40, 17, 70, 2, 33, 250, 16, 129, 64, 5, 90, 31};
    for (size_t s = 12; s < 80; ++s) lengths.push_back(lengths[s % 12] + int(s / 12));
    const std::vector<engine::Engine *> engines = {reference->get(), baseline->get()};
    for (const size_t n_seq : {size_t(8), size_t(12), size_t(40), size_t(56), size_t(80)}) {
        std::vector<std::vector<int>> seqs(2);
        for (size_t e = 0; e < 2; ++e) {
            for (size_t s = 0; s < n_seq; ++s) {
                seqs[e].push_back(engines[e]->add_sequence());
                std::vector<int32_t> prefill;
                for (int i = 0; i < lengths[s]; ++i) prefill.push_back(int32_t(splitmix64(n_seq * 100000 + s * 1000 + uint64_t(i)) % uint64_t(n_vocab)));
                ASSERT_TRUE(engines[e]->step({{seqs[e][s], prefill, false}}).ok());
            }
        }
        for (int step = 0; step < 3; ++step) {
            std::vector<std::vector<int32_t>> tokens(n_seq);
            for (size_t s = 0; s < n_seq; ++s) tokens[s] = {int32_t(splitmix64(7919 * uint64_t(step + 1) + s) % uint64_t(n_vocab))};
            std::vector<std::vector<float>> logits;
            for (size_t e = 0; e < 2; ++e) {
                std::vector<engine::StepInput> inputs;
                for (size_t s = 0; s < n_seq; ++s) inputs.push_back({seqs[e][s], tokens[s], false});
                auto out = engines[e]->step(inputs);
                ASSERT_TRUE(out.ok()) << out.error();
                logits.push_back(std::move(out).value());
            }
            ASSERT_EQ(logits[1].size(), n_seq * size_t(n_vocab));
            const auto d = gpu_test::compare(logits[1], logits[0]);
            EXPECT_LE(d.max_delta, kBf16Tolerance * d.max_ref) << n_seq << " sequences, step " << step;
            std::printf("%zu one-token sequences, step %d: max|delta| %.3g (max|ref| %.3g)\n", n_seq, step, d.max_delta, d.max_ref);
        }
        for (size_t e = 0; e < 2; ++e) {
            for (const int seq : seqs[e]) engines[e]->remove_sequence(seq);
        }
    }
}

constexpr const char *kPersistentPlugin = "baseline_persistent";

class CudaBaselinePersistentStep : public testing::TestWithParam<DType> {};

// Sequence a: 150 prefilled tokens, sequence b: 5; then one-token steps of each alone (the
// persistent kernel: one token, one sequence, its logits), compared with the reference every step.
TEST_P(CudaBaselinePersistentStep, OneTokenStepsMatchReference) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("llama-300m");
    ASSERT_TRUE(model.ok()) << model.error();
    engine::EngineOptions options = cuda_options("reference", GetParam());
    auto reference = engine::Engine::create(*model, options);
    ASSERT_TRUE(reference.ok()) << reference.error();
    options.forward = kPersistentPlugin;
    Result<std::unique_ptr<engine::Engine>> baseline = Error{"not created"};
    const std::string log = plugin_log([&] { baseline = engine::Engine::create(*model, options); });
    ASSERT_TRUE(baseline.ok()) << baseline.error();
    ASSERT_NE(log.find("persistent step: on"), std::string::npos) << "llama-300m does not take the persistent step:\n" << log;

    const int n_vocab = model->config.n_vocab;
    uint64_t counter = 0;
    auto tokens = [&](int n) {
        std::vector<int32_t> out;
        for (int i = 0; i < n; ++i) out.push_back(int32_t(splitmix64(977 + counter++) % uint64_t(n_vocab)));
        return out;
    };
    std::vector<engine::Engine *> engines = {reference->get(), baseline->get()};
    std::vector<int> a(2), b(2);
    for (int e = 0; e < 2; ++e) a[size_t(e)] = engines[size_t(e)]->add_sequence(), b[size_t(e)] = engines[size_t(e)]->add_sequence();
    const std::vector<int32_t> prefill_a = tokens(150), prefill_b = tokens(5);
    for (int e = 0; e < 2; ++e) {
        ASSERT_TRUE(engines[size_t(e)]->step({{a[size_t(e)], prefill_a, false}}).ok());
        ASSERT_TRUE(engines[size_t(e)]->step({{b[size_t(e)], prefill_b, false}}).ok());
    }
    for (int step = 0; step < 8; ++step) {
        const bool long_one = step % 2 == 0;
        const std::vector<int32_t> token = tokens(1);
        std::vector<std::vector<float>> logits;
        for (int e = 0; e < 2; ++e) {
            auto out = engines[size_t(e)]->step({{long_one ? a[size_t(e)] : b[size_t(e)], token, false}});
            ASSERT_TRUE(out.ok()) << out.error();
            logits.push_back(std::move(out).value());
        }
        ASSERT_EQ(logits[1].size(), size_t(n_vocab));
        const auto d = gpu_test::compare(logits[1], logits[0]);
        EXPECT_LE(d.max_delta, kBf16Tolerance * d.max_ref) << "step " << step;
        std::printf("persistent step %d (%s sequence): max|delta| %.3g (max|ref| %.3g, ratio %.2e)\n", step, long_one ? "long" : "short",
                    d.max_delta, d.max_ref, d.max_delta / d.max_ref);
    }
}

// One sequence prefilled eagerly, a one-token step captured as a graph (the persistent launch, its
// barrier reset and the embedding) and replayed with new tokens and positions: each replay gives what
// the same step gives eagerly, bit for bit.
TEST_P(CudaBaselinePersistentStep, GraphReplayMatchesEager) {
    if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto model = random_model("llama-300m");
    ASSERT_TRUE(model.ok()) << model.error();
    engine::EngineOptions options;
    options.device = backend::DeviceKind::cuda;
    options.forward = kPersistentPlugin;
    options.kv.dtype = GetParam();
    options.kv.block_tokens = 16;
    options.kv.n_block = 64;
    auto engine = engine::Engine::create(*model, options);
    ASSERT_TRUE(engine.ok()) << engine.error();
    auto eager = gpu_test::PluginRig::create(**engine, kPersistentPlugin);
    auto graph = gpu_test::PluginRig::create(**engine, kPersistentPlugin);
    ASSERT_TRUE(eager.ok()) << eager.error();
    ASSERT_TRUE(graph.ok()) << graph.error();
    const int n_vocab = model->config.n_vocab, max_blocks = 16, length = 200;
    std::vector<int32_t> blocks;
    for (int b = 0; b < max_blocks; ++b) blocks.push_back(b);
    gpu_test::HostBatch prefill;
    prefill.max_blocks = max_blocks;
    std::vector<int32_t> tokens;
    for (int i = 0; i < length; ++i) tokens.push_back(int32_t((i * 17 + 3) % n_vocab));
    prefill.add(tokens, 0, blocks, false);
    ASSERT_TRUE((*eager)->run(prefill).ok());
    auto decode = [&](int step) {
        gpu_test::HostBatch batch;
        batch.max_blocks = max_blocks;
        batch.add({int32_t((step * 31 + 7) % n_vocab)}, length + step, blocks, false);
        return batch;
    };
    expect_replays_match(**eager, **graph, decode, "persistent", 0.0);
}

INSTANTIATE_TEST_SUITE_P(Llama300m, CudaBaselinePersistentStep, testing::Values(DType::bf16, DType::f16),
                         [](const testing::TestParamInfo<DType> &info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hp
