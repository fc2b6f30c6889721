// Timing inside the executor: the candidate and the incumbent take turns (ABAB, the order
// flipping every repetition) on the same batch shape, with fresh token ids on every call so no
// result can be cached. This file only collects samples; tune/runner does the statistics.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <random>

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

// CUDA: one timed step of `plugin` on `sequences` (blocks allocated). The step is a replay of the
// plugin's graph for this shape when it could be captured (captured on first use, after an eager
// warm-up call; kept in `graphs`), else an eager call. The L2 is flushed before each step; the
// step is timed with events on the stream (the sample) and with the host clock to a
// whole-device synchronize (the cross-check: work escaping to another stream shows up only
// there).
struct DeviceStep {
    double event_ms = 0, host_ms = 0;
    std::string error;
};

ShapeGraph &shape_graph(ExecutorState &state, ForwardPlugin &plugin, std::map<std::string, ShapeGraph> &graphs, const std::string &key,
                        const std::vector<TrialSequence> &sequences) {
    auto found = graphs.find(key);
    if (found != graphs.end()) return found->second;
    const double start = now_seconds();
    ShapeGraph entry;
    entry.buffers = std::make_unique<DeviceBuffers>(*state.backend);
    BatchBuilder builder;
    {  // an eager call first: a plugin may size its workspaces on a new shape (never during capture)
        const CallReport warm = call_plugin(state, plugin, sequences, builder);
        if (!warm.error.empty()) entry.failure = "eager warm-up failed: " + warm.error;
    }
    builder.clear();
    for (const TrialSequence &sequence : sequences) {
        builder.add(BatchSequence{sequence.blocks, int(sequence.history.size()), sequence.tokens, sequence.all_logits});
    }
    const hp_batch &batch = builder.finish();
    entry.packed = pack_batch(batch);
    entry.n_logit = size_t(batch.n_logit_row) * size_t(state.n_vocab());
    auto *ints = static_cast<int32_t *>(entry.buffers->get(0, std::max<size_t>(entry.packed.ints.size(), 1) * sizeof(int32_t)));
    auto *logits = static_cast<float *>(entry.buffers->get(1, std::max<size_t>(entry.n_logit, 1) * sizeof(float)));
    if (!ints || !logits) throw std::runtime_error("out of device memory for a graph's buffers");
    if (Status status = state.backend->upload(ints, entry.packed.ints.data(), entry.packed.ints.size() * sizeof(int32_t)); !status.ok()) {
        throw DeviceFault(status.error());
    }
    entry.device_batch = device_batch_view(batch, entry.packed, ints);
    if (entry.failure.empty()) {
        hp_output out{logits, nullptr};
        auto graph = state.backend->capture([&] { return plugin.forward(entry.device_batch, out); });
        if (graph.ok()) {
            entry.graph = std::move(graph).value();
        } else {
            entry.failure = graph.error();
        }
    }
    if (Status device = state.backend->synchronize_device(); !device.ok()) throw DeviceFault(device.error());
    entry.capture_ms = (now_seconds() - start) * 1e3;
    return graphs.emplace(key, std::move(entry)).first->second;
}

DeviceStep timed_device_step(ExecutorState &state, ForwardPlugin &plugin, ShapeGraph &entry, const std::vector<TrialSequence> &sequences,
                             backend::EventTimer &timer) {
    auto checked = [](Status status) {
        if (!status.ok()) throw DeviceFault(status.error());
    };
    DeviceStep step;
    // Fresh token ids into the batch buffer (graph) or a new eager batch.
    size_t at = entry.packed.offsets[0];
    for (const TrialSequence &sequence : sequences) {
        for (int32_t token : sequence.tokens) entry.packed.ints[at++] = token;
    }
    auto *ints = static_cast<int32_t *>(entry.buffers->get(0, 0));
    checked(state.backend->upload(ints + entry.packed.offsets[0], entry.packed.ints.data() + entry.packed.offsets[0],
                                  (at - entry.packed.offsets[0]) * sizeof(int32_t)));
    checked(state.backend->flush_cache());
    checked(state.backend->synchronize());
    Status status = Status::success();
    const double start = now_seconds();
    timer.start();
    if (entry.graph) {
        status = entry.graph->launch();
    } else {  // the eager path: the same device arrays, the plugin called directly
        hp_output out{static_cast<float *>(entry.buffers->get(1, 0)), nullptr};
        status = plugin.forward(entry.device_batch, out);
    }
    timer.stop();
    checked(state.backend->synchronize_device());
    step.host_ms = (now_seconds() - start) * 1e3;
    auto ms = timer.elapsed_ms();
    if (!ms.ok()) throw DeviceFault(ms.error());
    step.event_ms = *ms;
    if (!status.ok()) step.error = status.error();
    return step;
}

// The sequences with the token ids `entry` ran with last.
std::vector<TrialSequence> last_candidate_tokens(std::vector<TrialSequence> sequences, const ShapeGraph &entry) {
    size_t at = entry.packed.offsets[0];
    for (TrialSequence &sequence : sequences) {
        for (int32_t &token : sequence.tokens) token = entry.packed.ints[at++];
    }
    return sequences;
}

// After the timing loop: an output the candidate produced while being timed, against the reference
// on the same tokens (the KV histories are as they were: timed calls write only the new positions).
json check_timed_output(ExecutorState &state, const std::vector<TrialSequence> &sequences, const std::vector<float> &output, const char *stage) {
    BatchBuilder builder;
    const CallReport expected = call_plugin(state, *state.reference, sequences, builder);
    json result = compare_to_reference(state, expected, output);
    int n_token = 0, n_prefill = 0;
    for (const auto &sequence : sequences) {
        n_token += int(sequence.tokens.size());
        n_prefill += sequence.tokens.size() > 1;
    }
    result["n_seq"] = sequences.size();
    result["n_token"] = n_token;
    result["n_prefill_seq"] = n_prefill;
    result["stage"] = stage;
    if (!expected.error.empty()) result["error"] = "the reference failed on the timing batch: " + expected.error;
    return result;
}

// On CUDA: the candidate's last replayed output, so a graph that computes something else than the
// eager call is caught.
json check_last_replay(ExecutorState &state, ShapeGraph &entry, const std::vector<TrialSequence> &sequences) {
    std::vector<float> replayed(entry.n_logit);
    if (Status status = state.backend->download(replayed.data(), entry.buffers->get(1, 0), entry.n_logit * sizeof(float)); !status.ok()) {
        throw DeviceFault(status.error());
    }
    return check_timed_output(state, sequences, replayed, entry.graph ? "the last graph replay of the timing loop" : "the last call of the timing loop");
}

// On the CPU: the candidate's outputs of two timed calls, its last and one drawn uniformly from
// all of them (reservoir sampling), kept with their tokens. A candidate that is right while
// verified and cuts corners on some timed calls is caught with the chance that one of the two
// was such a call (cheating on half the calls, for 2x: 3 in 4 a shape).
struct TimedOutputs {
    struct Call {
        std::vector<std::vector<int32_t>> tokens;  // per sequence
        std::vector<float> logits;
    };
    Call last, drawn;
    int n_call = 0;

    void keep(const std::vector<TrialSequence> &sequences, std::vector<float> logits, std::mt19937_64 &rng) {
        Call call;
        for (const TrialSequence &sequence : sequences) call.tokens.push_back(sequence.tokens);
        call.logits = std::move(logits);
        ++n_call;
        if (std::uniform_int_distribution<int>(1, n_call)(rng) == 1) drawn = call;
        last = std::move(call);
    }
    // With `budget` > 0 (the campaign's reference_tokens: the single-threaded reference is slow on
    // long prefill chunks) only the sequences that fit in it, taken in batch order, are checked;
    // none fitting, the shortest one is, up to kTimedCheckMaxTokens (a longer one is not checked).
    static constexpr int kTimedCheckMaxTokens = 256;
    std::optional<json> check(ExecutorState &state, const std::vector<TrialSequence> &sequences, const Call &call, const char *stage,
                              int budget) const {
        const size_t n_vocab = size_t(state.n_vocab());
        std::vector<size_t> first_row(sequences.size() + 1, 0);
        for (size_t i = 0; i < sequences.size(); ++i) first_row[i + 1] = first_row[i] + (sequences[i].all_logits ? call.tokens[i].size() : 1);
        std::vector<size_t> chosen;
        int n_token = 0;
        for (size_t i = 0; i < sequences.size(); ++i) {
            const int tokens = int(call.tokens[i].size());
            if (budget <= 0 || n_token + tokens <= budget) {
                chosen.push_back(i);
                n_token += tokens;
            }
        }
        if (chosen.empty() && !sequences.empty()) {
            size_t shortest = 0;
            for (size_t i = 1; i < sequences.size(); ++i) shortest = call.tokens[i].size() < call.tokens[shortest].size() ? i : shortest;
            if (int(call.tokens[shortest].size()) <= kTimedCheckMaxTokens) chosen.push_back(shortest);
        }
        if (chosen.empty()) return std::nullopt;
        std::vector<TrialSequence> checked;
        std::vector<float> rows;
        for (size_t i : chosen) {
            checked.push_back(sequences[i]);
            checked.back().tokens = call.tokens[i];
            rows.insert(rows.end(), call.logits.begin() + std::ptrdiff_t(first_row[i] * n_vocab),
                        call.logits.begin() + std::ptrdiff_t(first_row[i + 1] * n_vocab));
        }
        return check_timed_output(state, checked, rows, stage);
    }
};

}  // namespace

json run_measure(ExecutorState &state, const json &params) {
    std::mt19937_64 rng(params.value("seed", uint64_t(1)));
    const int warmup = params.value("warmup", 2);
    const int min_rep = params.value("min_rep", 10);
    const int max_rep = params.value("max_rep", 1000);
    const double target_seconds = params.value("target_seconds", 1.0);
    const double max_seconds = params.value("max_seconds", 0.0);  // 0: none
    const int min_rep_capped = std::min(min_rep, params.value("min_rep_capped", min_rep));
    json result = {{"shapes", json::array()}};
    const uint64_t resident_before = resident_bytes();
    const size_t private_before = state.candidate->private_bytes();
    json replay_checks = json::array();
    for (const json &shape : params.at("shapes")) {
        std::vector<TrialSequence> sequences = shape_sequences(shape);
        if (sequences.empty()) throw std::runtime_error("a shape needs decode_batch > 0 or prefill chunks");
        if (!allocate_blocks(state, sequences)) throw std::runtime_error("KV cache too small for shape " + shape.dump());
        int n_token = 0;
        for (const auto &sequence : sequences) n_token += int(sequence.tokens.size());
        json samples = {{"name", shape.value("name", shape.dump())}, {"n_token", n_token}};
        std::vector<double> candidate_ms, incumbent_ms, candidate_host_ms, incumbent_host_ms;
        ShapeGraph *graphs[2] = {nullptr, nullptr};  // candidate, incumbent (CUDA)
        std::unique_ptr<backend::EventTimer> timer;
        if (state.on_cuda()) {
            // Blocks are part of the key: a graph bakes in the block tables it was captured with.
            std::string key = shape.dump();
            for (const auto &sequence : sequences) key += fmt::format("|{}", fmt::join(sequence.blocks, ","));
            fresh_tokens(sequences, rng, state.n_vocab());
            graphs[0] = &shape_graph(state, *state.candidate, state.candidate_graphs, key, sequences);
            graphs[1] = &shape_graph(state, *state.incumbent, state.incumbent_graphs, key, sequences);
            samples["candidate_graph"] = graphs[0]->graph != nullptr;
            samples["incumbent_graph"] = graphs[1]->graph != nullptr;
            if (!graphs[0]->failure.empty()) samples["candidate_graph_failure"] = graphs[0]->failure;
            if (!graphs[1]->failure.empty()) samples["incumbent_graph_failure"] = graphs[1]->failure;
            samples["candidate_capture_ms"] = graphs[0]->capture_ms;
            samples["l2_flushed"] = true;
            timer = state.backend->create_timer();
        }
        BatchBuilder builder;
        TimedOutputs timed;  // CPU
        const double start = now_seconds();
        std::string failure;
        for (int rep = -warmup; rep < max_rep && failure.empty(); ++rep) {
            if (rep >= min_rep && now_seconds() - start >= target_seconds) break;
            if (max_seconds > 0) {
                const double elapsed = now_seconds() - start;
                // Multi-second steps: one warm-up pair is enough.
                if (rep < 0 && rep > -warmup && elapsed >= max_seconds / 4) rep = 0;
                if (rep >= min_rep_capped && elapsed >= max_seconds) break;
                // A candidate clearly slower (its fastest call 1.5x the incumbent's slowest, three
                // times) is not going to be faster: the shape stops there.
                if (rep >= 3 && elapsed >= max_seconds / 4 &&
                    *std::min_element(candidate_ms.begin(), candidate_ms.end()) > 1.5 * *std::max_element(incumbent_ms.begin(), incumbent_ms.end())) {
                    samples["stopped_early"] = "the candidate was clearly slower";
                    break;
                }
            }
            for (int turn = 0; turn < 2; ++turn) {
                const bool candidate_turn = (turn == 0) == (rep % 2 == 0);
                ForwardPlugin &plugin = candidate_turn ? *state.candidate : *state.incumbent;
                fresh_tokens(sequences, rng, state.n_vocab());
                double ms = 0, host_ms = 0;
                if (state.on_cuda()) {
                    const DeviceStep step = timed_device_step(state, plugin, *graphs[candidate_turn ? 0 : 1], sequences, *timer);
                    if (!step.error.empty()) failure = step.error;
                    ms = step.event_ms;
                    host_ms = step.host_ms;
                } else {
                    CallReport report = call_plugin(state, plugin, sequences, builder);
                    if (!report.error.empty()) failure = report.error;
                    ms = host_ms = report.seconds * 1e3;
                    if (candidate_turn && rep >= 0 && report.error.empty()) timed.keep(sequences, std::move(report.logits), rng);
                }
                if (rep < 0) continue;
                (candidate_turn ? candidate_ms : incumbent_ms).push_back(ms);
                (candidate_turn ? candidate_host_ms : incumbent_host_ms).push_back(host_ms);
            }
            // The last call of the last repetition may be the incumbent's: the candidate's output
            // buffer still holds its own last step, checked below.
        }
        if (state.on_cuda() && failure.empty()) replay_checks.push_back(check_last_replay(state, *graphs[0], last_candidate_tokens(sequences, *graphs[0])));
        if (!state.on_cuda() && failure.empty() && timed.n_call > 0) {
            const int budget = std::max(0, params.value("reference_tokens", 0));
            if (auto last = timed.check(state, sequences, timed.last, "the candidate's last call of the timing loop", budget)) {
                replay_checks.push_back(std::move(*last));
            }
            if (timed.n_call > 1) {
                if (auto drawn = timed.check(state, sequences, timed.drawn, "a timed call drawn at random from the timing loop", budget)) {
                    replay_checks.push_back(std::move(*drawn));
                }
            }
        }
        release_blocks(state, sequences);
        if (!failure.empty()) samples["plugin_error"] = failure;
        samples["candidate_ms"] = candidate_ms;
        samples["incumbent_ms"] = incumbent_ms;
        if (state.on_cuda()) {
            samples["candidate_host_ms"] = candidate_host_ms;
            samples["incumbent_host_ms"] = incumbent_host_ms;
        }
        result["shapes"].push_back(samples);
    }
    result["resident_growth_bytes"] = int64_t(resident_bytes()) - int64_t(resident_before);
    result["private_growth_bytes"] = int64_t(state.candidate->private_bytes()) - int64_t(private_before);
    // The outputs are checked again after the timing loop: a candidate that is correct only
    // while being verified is caught here.
    json recheck = {{"seed", params.value("seed", uint64_t(1)) ^ 0x5eedu},
                    {"n_case", 3},
                    {"greedy_steps", 0},
                    {"reference_tokens", params.value("reference_tokens", 0)}};
    result["post_check"] = run_verify(state, *state.candidate, recheck);
    for (json &check : replay_checks) result["post_check"]["cases"].push_back(std::move(check));
    result["bytes_per_decode_step"] = state.bytes_per_decode_step;
    result["read_bandwidth_gbs"] = state.read_bandwidth_gbs;
    result["device"] = std::string(backend::device_name(state.options.device));
    return result;
}

}  // namespace hp::engine
