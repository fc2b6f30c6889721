// Timing inside the executor: the candidate and the incumbent take turns (ABAB, the order
// flipping every repetition) on the same batch shape, with fresh token ids on every call so no
// result can be cached. This file only collects samples; tune/runner does the statistics.
#include "executor_state.h"
#include "hotpass/core/clock.h"

namespace hp::engine {

using nlohmann::json;

std::vector<TrialSequence> shape_sequences(const json &shape) {
    std::vector<TrialSequence> sequences;
    const int decode_batch = shape.value("decode_batch", 0);
    const int decode_kv = shape.value("decode_kv", 0);
    for (int i = 0; i < decode_batch; ++i) {
        TrialSequence sequence;
        sequence.history.assign(size_t(decode_kv), 0);
        sequence.tokens = {0};
        sequences.push_back(std::move(sequence));
    }
    for (const json &length : shape.value("prefill", json::array())) {
        TrialSequence sequence;
        sequence.tokens.assign(length.get<size_t>(), 0);
        sequences.push_back(std::move(sequence));
    }
    return sequences;
}

namespace {

void fresh_tokens(std::vector<TrialSequence> &sequences, std::mt19937_64 &rng, int n_vocab) {
    for (TrialSequence &sequence : sequences) {
        for (int32_t &token : sequence.tokens) token = int32_t(rng() % uint64_t(n_vocab));
    }
}

}  // namespace

json run_measure(ExecutorState &state, const json &params) {
    std::mt19937_64 rng(params.value("seed", uint64_t(1)));
    const int warmup = params.value("warmup", 2);
    const int min_rep = params.value("min_rep", 10);
    const int max_rep = params.value("max_rep", 1000);
    const double target_seconds = params.value("target_seconds", 1.0);
    json result = {{"shapes", json::array()}};
    const uint64_t resident_before = resident_bytes();
    const size_t private_before = state.candidate->private_bytes();
    for (const json &shape : params.at("shapes")) {
        std::vector<TrialSequence> sequences = shape_sequences(shape);
        if (sequences.empty()) throw std::runtime_error("a shape needs decode_batch > 0 or prefill chunks");
        if (!allocate_blocks(state, sequences)) throw std::runtime_error("KV cache too small for shape " + shape.dump());
        int n_token = 0;
        for (const auto &sequence : sequences) n_token += int(sequence.tokens.size());
        json samples = {{"name", shape.value("name", shape.dump())}, {"n_token", n_token}};
        std::vector<double> candidate_ms, incumbent_ms;
        BatchBuilder builder;
        const double start = now_seconds();
        std::string failure;
        for (int rep = -warmup; rep < max_rep && failure.empty(); ++rep) {
            if (rep >= min_rep && now_seconds() - start >= target_seconds) break;
            for (int turn = 0; turn < 2; ++turn) {
                const bool candidate_turn = (turn == 0) == (rep % 2 == 0);
                fresh_tokens(sequences, rng, state.n_vocab());
                const CallReport report = call_plugin(state, candidate_turn ? *state.candidate : *state.incumbent, sequences, builder);
                if (!report.error.empty()) failure = report.error;
                if (rep >= 0) (candidate_turn ? candidate_ms : incumbent_ms).push_back(report.seconds * 1e3);
            }
        }
        release_blocks(state, sequences);
        if (!failure.empty()) samples["plugin_error"] = failure;
        samples["candidate_ms"] = candidate_ms;
        samples["incumbent_ms"] = incumbent_ms;
        result["shapes"].push_back(samples);
    }
    result["resident_growth_bytes"] = int64_t(resident_bytes()) - int64_t(resident_before);
    result["private_growth_bytes"] = int64_t(state.candidate->private_bytes()) - int64_t(private_before);
    // The outputs are checked again after the timing loop: a candidate that is correct only
    // while being verified is caught here.
    json recheck = {{"seed", params.value("seed", uint64_t(1)) ^ 0x5eedu}, {"n_case", 3}, {"greedy_steps", 0}};
    result["post_check"] = run_verify(state, *state.candidate, recheck);
    result["bytes_per_decode_step"] = state.bytes_per_decode_step;
    result["read_bandwidth_gbs"] = state.read_bandwidth_gbs;
    return result;
}

}  // namespace hp::engine
