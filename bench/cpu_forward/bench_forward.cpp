// The CPU forward-pass benchmark driver (run by bench/cpu_forward/run.sh). One process opens the
// model once and holds one engine per (forward pass, threads); every repetition then measures, in
// alternation, the ceilings (read bandwidth, FMA peaks), the baseline's decode (batch 1/4/16) and
// prefill (128/512 tokens), the reference's decode (batch 1/4/16, 1 thread, in the first
// kReferenceReps repetitions only: it is ~10x slower) and OpenBLAS on an f32 copy of the weights'
// shapes, so compared figures share the host's conditions. Prints one JSON object per
// measurement: {"rep", "what", "forward", "threads", "tokens", "value", "unit"}.
//   hotpass_bench_cpu_forward MODEL REPS [--no-reference] [--no-blas] [--threads N] [--decode-only]
//                             [--weights-4k] [--no-ceilings] [--batch B]
// (--threads N: only N threads instead of 1 and 2; --decode-only: no prefill figures; --batch B:
// decode at batch B only instead of 1, 4 and 16; --weights-4k:
// preset weights on 4 KiB pages instead of transparent huge pages; --no-ceilings: no bandwidth or
// FMA peaks; all for quick A/B runs, e.g. of two plugin builds through HOTPASS_PLUGIN_DIR.)
// The read-bandwidth ceiling of a repetition is the faster of a 4 KiB-page and a huge-page buffer.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "hotpass/engine/engine.h"
#include "hotpass/engine/generate.h"
#include "hotpass/model/model.h"
#include "roofline.h"

namespace {

using hp::engine::Engine;

void emit(int rep, const std::string &what, const std::string &forward, int threads, int tokens, double value, const char *unit) {
    std::printf("{\"rep\": %d, \"what\": \"%s\", \"forward\": \"%s\", \"threads\": %d, \"tokens\": %d, \"value\": %.6g, \"unit\": \"%s\"}\n",
                rep, what.c_str(), forward.c_str(), threads, tokens, value, unit);
    std::fflush(stdout);
}

std::vector<int32_t> prompt(int n, int n_vocab, uint64_t salt) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back(int32_t((uint64_t(i) * 2654435761u + salt * 40503u) % uint64_t(n_vocab)));
    return tokens;
}

// Decode tokens/s of `batch` sequences (prompts of `prompt_tokens` tokens, n_new new tokens each).
double decode_tps(Engine &engine, int batch, int n_new, int rep, int prompt_tokens = 32) {
    std::vector<std::vector<int32_t>> prompts;
    for (int b = 0; b < batch; ++b) prompts.push_back(prompt(prompt_tokens, engine.config().n_vocab, uint64_t(rep * 100 + b)));
    hp::engine::GenerateOptions options;
    options.n_new = n_new;
    options.stop_at_eos = false;
    auto result = hp::engine::generate_greedy(engine, prompts, options);
    if (!result.ok()) throw std::runtime_error(result.error());
    return double(result->n_decode_token) / result->decode_seconds;
}

double prefill_tps(Engine &engine, int n_token, int rep) {
    hp::engine::GenerateOptions options;
    options.n_new = 1;
    options.stop_at_eos = false;
    auto result = hp::engine::generate_greedy(engine, {prompt(n_token, engine.config().n_vocab, uint64_t(rep))}, options);
    if (!result.ok()) throw std::runtime_error(result.error());
    return double(result->n_prefill_token) / result->prefill_seconds;
}

// The reference reads every weight once per token (prefill included), ~4 tokens/s on llama-300m:
// it is measured in the first few repetitions only, with 1-token prompts and 2 decode steps per
// batch size. Its attention over <= 3 positions instead of the baseline's 32-47 is < 0.5% of its
// step (the matmuls read 552 MB per token); the decode speed it reports is its matmul speed.
constexpr int kReferenceReps = 3;

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL REPS [--no-reference] [--no-blas]\n", argv[0]);
        return 2;
    }
    const std::string spec = argv[1];
    const int reps = std::atoi(argv[2]);
    bool with_reference = true, with_blas = true, with_prefill = true, with_ceilings = true;
    hp::model::SyntheticOptions synthetic;
    std::vector<int> thread_counts = {1, 2}, batches = {1, 4, 16};
    for (int i = 3; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--no-reference")) with_reference = false;
        if (!std::strcmp(argv[i], "--no-blas")) with_blas = false;
        if (!std::strcmp(argv[i], "--decode-only")) with_prefill = false;
        if (!std::strcmp(argv[i], "--no-ceilings")) with_ceilings = false;
        if (!std::strcmp(argv[i], "--weights-4k")) synthetic.huge_pages = false;
        if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) thread_counts = {std::atoi(argv[++i])};
        if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) batches = {std::atoi(argv[++i])};
    }
    auto model = hp::model::open_model(spec, synthetic);
    if (!model.ok()) {
        std::fprintf(stderr, "error: %s\n", model.error().c_str());
        return 1;
    }
    const hp::model::ModelConfig &c = model->config;
    // Matmul flops of one token: 2 per weight it reads (routed experts included, unused ones not).
    const double bytes_per_token = double(hp::model::bytes_read_per_token(*model));
    emit(0, "bytes_per_token", "", 0, 1, bytes_per_token, "B");
    emit(0, "flops_per_token", "", 0, 1, 2.0 * bytes_per_token / double(hp::dtype_size(c.dtype)), "flop");

    auto make = [&](const std::string &forward, int threads) {
        hp::engine::EngineOptions options;
        options.forward = forward;
        options.n_thread = threads;
        options.kv.max_tokens = 2048;
        auto engine = Engine::create(*model, options);
        if (!engine.ok()) throw std::runtime_error(engine.error());
        return std::move(engine).value();
    };
    std::map<int, std::unique_ptr<Engine>> baseline;
    for (int threads : thread_counts) baseline[threads] = make("baseline", threads);
    std::unique_ptr<Engine> reference = with_reference ? make("reference", 1) : nullptr;

    std::unique_ptr<BlasPeer> blas;
    if (with_blas && !c.is_moe()) {
        std::vector<std::pair<int, int>> shapes;
        const int q = c.n_head * c.d_head, kv = c.n_head_kv * c.d_head;
        for (int l = 0; l < c.n_layer; ++l) {
            for (auto shape : {std::pair{q, c.d_model}, std::pair{kv, c.d_model}, std::pair{kv, c.d_model}, std::pair{c.d_model, q},
                               std::pair{c.d_ff, c.d_model}, std::pair{c.d_ff, c.d_model}, std::pair{c.d_model, c.d_ff}}) shapes.push_back(shape);
        }
        shapes.push_back({c.n_vocab, c.d_model});
        blas = std::make_unique<BlasPeer>(shapes);
    }

    // Warm-up: first touches of weights, KV cache and scratch.
    for (auto &[threads, engine] : baseline) decode_tps(*engine, 1, 4, 0);
    for (int rep = 1; rep <= reps; ++rep) {
        for (int threads : thread_counts) {
            if (with_ceilings) {
                const double read_4k = read_bandwidth_gbs(threads, false), read_huge = read_bandwidth_gbs(threads, true);
                emit(rep, "read_bandwidth_4k", "", threads, 0, read_4k, "GB/s");
                emit(rep, "read_bandwidth_huge", "", threads, 0, read_huge, "GB/s");
                emit(rep, "read_bandwidth", "", threads, 0, std::max(read_4k, read_huge), "GB/s");
                emit(rep, "fma_peak_f32", "", threads, 0, fma_peak_gflops(threads, false), "GFLOP/s");
                emit(rep, "fma_peak_bf16", "", threads, 0, fma_peak_gflops(threads, true), "GFLOP/s");
            }
            for (int batch : batches) {
                emit(rep, "decode", "baseline", threads, batch, decode_tps(*baseline[threads], batch, 16, rep), "tokens/s");
                if (blas) emit(rep, "decode", "openblas", threads, batch, blas->tokens_per_s(threads, batch), "tokens/s");
            }
            for (int n_token : {128, 512}) {
                if (!with_prefill) break;
                emit(rep, "prefill", "baseline", threads, n_token, prefill_tps(*baseline[threads], n_token, rep), "tokens/s");
                if (blas) emit(rep, "prefill", "openblas", threads, n_token, blas->tokens_per_s(threads, n_token), "tokens/s");
            }
        }
        if (reference && rep <= kReferenceReps) {
            for (int batch : batches) emit(rep, "decode", "reference", 1, batch, decode_tps(*reference, batch, 3, rep, 1), "tokens/s");
        }
    }
    return 0;
}
