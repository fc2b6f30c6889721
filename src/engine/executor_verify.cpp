// Verification inside the executor: the candidate and the trusted reference run on the same
// fresh inputs (drawn from a seed the candidate never sees) over disjoint copies of the same KV
// history. This file measures; the verdict (tolerances, reasons) is decided by tune/verifier.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "executor_state.h"
#include "hotpass/core/dtype.h"
#include "hotpass/core/hash.h"

namespace hp::engine {

using nlohmann::json;

namespace {

// KV blocks move through the backend (memcpy on the CPU, device copies on CUDA). A failing
// device copy means a poisoned context.
void checked(Status status) {
    if (!status.ok()) throw DeviceFault(status.error());
}

uint8_t *block_address(void *base, int32_t block, size_t bytes) { return static_cast<uint8_t *>(base) + size_t(block) * bytes; }

void copy_blocks(ExecutorState &state, const std::vector<int32_t> &from, const std::vector<int32_t> &to) {
    const hp_kv_cache &kv = *state.abi().kv;
    const size_t bytes = kv_block_bytes(state);
    for (int layer = 0; layer < state.abi().config.n_layer; ++layer) {
        for (size_t b = 0; b < from.size() && b < to.size(); ++b) {
            for (void *base : {kv.k[layer], kv.v[layer]}) {
                if (from[b] != to[b]) checked(state.backend->copy(block_address(base, to[b], bytes), block_address(base, from[b], bytes), bytes));
            }
        }
    }
}

// All layers' K and V bytes of the sequences' blocks, in a fixed order.
std::vector<uint8_t> snapshot_blocks(const ExecutorState &state, const std::vector<TrialSequence> &sequences) {
    const hp_kv_cache &kv = *state.abi().kv;
    const size_t bytes = kv_block_bytes(state);
    std::vector<uint8_t> snapshot;
    for (int layer = 0; layer < state.abi().config.n_layer; ++layer) {
        for (const TrialSequence &sequence : sequences) {
            for (int32_t block : sequence.blocks) {
                for (void *base : {kv.k[layer], kv.v[layer]}) {
                    snapshot.resize(snapshot.size() + bytes);
                    checked(state.backend->download(snapshot.data() + snapshot.size() - bytes, block_address(base, block, bytes), bytes));
                }
            }
        }
    }
    return snapshot;
}

void restore_blocks(ExecutorState &state, const std::vector<TrialSequence> &sequences, const std::vector<uint8_t> &snapshot) {
    const hp_kv_cache &kv = *state.abi().kv;
    const size_t bytes = kv_block_bytes(state);
    size_t offset = 0;
    for (int layer = 0; layer < state.abi().config.n_layer; ++layer) {
        for (const TrialSequence &sequence : sequences) {
            for (int32_t block : sequence.blocks) {
                for (void *base : {kv.k[layer], kv.v[layer]}) {
                    checked(state.backend->upload(block_address(base, block, bytes), snapshot.data() + offset, bytes));
                    offset += bytes;
                }
            }
        }
    }
}

uint64_t hash_blocks(const ExecutorState &state, const std::vector<TrialSequence> &sequences) {
    const std::vector<uint8_t> bytes = snapshot_blocks(state, sequences);
    return hash64(bytes.data(), bytes.size());
}

float kv_element(const ExecutorState &state, const void *base, int64_t index) {  // `base`: host memory
    switch (DType(state.abi().kv->dtype)) {
        case DType::f32: return static_cast<const float *>(base)[index];
        case DType::f16: return f16_to_f32(static_cast<const uint16_t *>(base)[index]);
        case DType::bf16: return bf16_to_f32(static_cast<const uint16_t *>(base)[index]);
    }
    return NAN;
}

// Largest |a - b| over the KV rows the step wrote, and the largest |a| there.
std::pair<double, double> compare_new_kv(const ExecutorState &state, const std::vector<TrialSequence> &a,
                                         const std::vector<TrialSequence> &b) {
    const hp_config &c = state.abi().config;
    const int block_tokens = state.kv->block_tokens();
    const int64_t row = int64_t(c.n_head_kv) * c.d_head;
    const size_t row_bytes = size_t(row) * dtype_size(DType(state.abi().kv->dtype));
    std::vector<uint8_t> row_a(row_bytes), row_b(row_bytes);
    double max_delta = 0, max_ref = 0;
    for (int layer = 0; layer < c.n_layer; ++layer) {
        for (size_t s = 0; s < a.size(); ++s) {
            const int first = int(a[s].history.size()), last = first + int(a[s].tokens.size());
            for (int p = first; p < last; ++p) {
                const int64_t offset_a = (int64_t(a[s].blocks[size_t(p / block_tokens)]) * block_tokens + p % block_tokens) * row;
                const int64_t offset_b = (int64_t(b[s].blocks[size_t(p / block_tokens)]) * block_tokens + p % block_tokens) * row;
                for (const auto &cache : {state.abi().kv->k, state.abi().kv->v}) {
                    const auto *base = static_cast<const uint8_t *>(cache[layer]);
                    checked(state.backend->download(row_a.data(), base + size_t(offset_a) * row_bytes / size_t(row), row_bytes));
                    checked(state.backend->download(row_b.data(), base + size_t(offset_b) * row_bytes / size_t(row), row_bytes));
                    for (int64_t i = 0; i < row; ++i) {
                        const float x = kv_element(state, row_a.data(), i);
                        const float y = kv_element(state, row_b.data(), i);
                        max_ref = std::max(max_ref, double(std::fabs(x)));
                        const double delta = std::fabs(double(x) - double(y));
                        max_delta = std::isnan(delta) ? INFINITY : std::max(max_delta, delta);
                    }
                }
            }
        }
    }
    return {max_delta, max_ref};
}

struct LogitComparison {
    double max_delta = 0, max_ref = 0;
    int unwritten_rows = 0;  // still holding the poison
    int nan_rows = 0;        // written, but NaN or inf
};

LogitComparison compare_logits(const std::vector<float> &reference, const std::vector<float> &candidate, int n_vocab) {
    LogitComparison result;
    for (size_t row = 0; row * size_t(n_vocab) < reference.size(); ++row) {
        bool nan_row = false, unwritten_row = false;
        for (int v = 0; v < n_vocab; ++v) {
            const size_t i = row * size_t(n_vocab) + size_t(v);
            result.max_ref = std::max(result.max_ref, double(std::fabs(reference[i])));
            if (!std::isfinite(candidate[i])) {
                uint32_t bits;
                std::memcpy(&bits, &candidate[i], sizeof bits);
                (bits == kPoisonBits ? unwritten_row : nan_row) = true;
                continue;
            }
            const double delta = std::fabs(double(reference[i]) - double(candidate[i]));
            result.max_delta = std::isnan(delta) ? INFINITY : std::max(result.max_delta, delta);
        }
        result.unwritten_rows += unwritten_row;
        result.nan_rows += nan_row && !unwritten_row;
    }
    return result;
}

// A random batch: 1-5 sequences, each a decode token or a prefill chunk, with or without cached
// history; `kind` 0 = decode only, 1 = prefill only, 2 = mixed. Lengths deliberately odd.
// Sizes are bounded by `limits` ({max_seq, max_history, max_chunk}) so a large model's
// verification stays affordable.
struct CaseLimits {
    int max_seq = 5, max_history = 70, max_chunk = 37;
};

std::vector<TrialSequence> random_case(std::mt19937_64 &rng, int n_vocab, int kind, const CaseLimits &limits) {
    auto uniform = [&](int lo, int hi) { return lo + int(rng() % uint64_t(std::max(hi, lo) - lo + 1)); };
    std::vector<TrialSequence> sequences(size_t(uniform(1, limits.max_seq)));
    for (TrialSequence &sequence : sequences) {
        const bool decode = kind == 0 || (kind == 2 && rng() % 2 == 0);
        const int history = decode ? uniform(1, limits.max_history) : (rng() % 2 ? 0 : uniform(1, limits.max_history * 4 / 7));
        const int n_token = decode ? 1 : uniform(2, limits.max_chunk);
        for (int i = 0; i < history; ++i) sequence.history.push_back(int32_t(rng() % uint64_t(n_vocab)));
        for (int i = 0; i < n_token; ++i) sequence.tokens.push_back(int32_t(rng() % uint64_t(n_vocab)));
        sequence.all_logits = !decode && rng() % 2 == 0;
    }
    return sequences;
}

// Writes each sequence's history into its blocks. The history is only the state both sides start
// from (the candidate gets a copy of the same blocks), so the fast incumbent writes it: through the
// plain reference, a workload shape's history (32 sequences x 300 tokens on llama-300m) took
// minutes and missed the verify deadline. The step under test is still compared with the reference.
bool write_history(ExecutorState &state, std::vector<TrialSequence> &sequences) {
    std::vector<TrialSequence> history_step;
    for (const TrialSequence &sequence : sequences) {
        if (sequence.history.empty()) continue;
        TrialSequence step;
        step.tokens = sequence.history;
        step.blocks = sequence.blocks;
        history_step.push_back(std::move(step));
    }
    if (history_step.empty()) return true;
    BatchBuilder builder;
    return call_plugin(state, *state.incumbent, history_step, builder).error.empty();
}

// `builder` is shared across cases on purpose: the batch arrays keep their addresses while their
// contents change, which catches a candidate that caches results by input pointer.
json verify_case(ExecutorState &state, ForwardPlugin &target, std::vector<TrialSequence> reference_side, BatchBuilder &builder) {
    json result;
    std::vector<TrialSequence> candidate_side = reference_side;
    for (auto &sequence : candidate_side) sequence.blocks.clear();
    if (!allocate_blocks(state, reference_side)) return {{"error", "KV cache too small for the verification batch"}};
    if (!allocate_blocks(state, candidate_side)) {
        release_blocks(state, reference_side);
        return {{"error", "KV cache too small for the verification batch"}};
    }
    int n_token = 0, n_prefill = 0;
    for (const auto &sequence : reference_side) {
        n_token += int(sequence.tokens.size());
        n_prefill += sequence.tokens.size() > 1;
    }
    result["n_seq"] = reference_side.size();
    result["n_token"] = n_token;
    result["n_prefill_seq"] = n_prefill;
    if (!write_history(state, reference_side)) {
        result["error"] = "the incumbent failed writing the history";
    } else {
        for (size_t s = 0; s < reference_side.size(); ++s) copy_blocks(state, reference_side[s].blocks, candidate_side[s].blocks);
        const std::vector<uint8_t> candidate_kv_before = snapshot_blocks(state, candidate_side);
        BatchBuilder reference_builder;
        const CallReport expected = call_plugin(state, *state.reference, reference_side, reference_builder);
        if (!expected.error.empty()) {
            release_blocks(state, reference_side);
            release_blocks(state, candidate_side);
            return {{"error", "the reference failed on the verification batch: " + expected.error}};
        }
        const uint64_t reference_kv = hash_blocks(state, reference_side);
        const CallReport first = call_plugin(state, target, candidate_side, builder);
        result["plugin_error"] = first.error;
        result["canary_intact"] = first.canary_intact;
        result["inputs_intact"] = first.inputs_intact;
        result["other_kv_intact"] = hash_blocks(state, reference_side) == reference_kv;
        const LogitComparison logits = compare_logits(expected.logits, first.logits, state.n_vocab());
        result["max_abs_delta"] = logits.max_delta;
        result["max_abs_ref"] = logits.max_ref;
        result["nan_rows"] = logits.nan_rows;
        result["unwritten_rows"] = logits.unwritten_rows;
        result["rows"] = expected.logits.size() / size_t(state.n_vocab());
        const auto [kv_delta, kv_ref] = compare_new_kv(state, reference_side, candidate_side);
        result["kv_max_abs_delta"] = kv_delta;
        result["kv_max_abs_ref"] = kv_ref;
        // Determinism: the same call again from the same KV state must give the same bits.
        restore_blocks(state, candidate_side, candidate_kv_before);
        const CallReport second = call_plugin(state, target, candidate_side, builder);
        result["deterministic"] = second.error == first.error &&
                                  std::memcmp(first.logits.data(), second.logits.data(), first.logits.size() * sizeof(float)) == 0;
    }
    release_blocks(state, reference_side);
    release_blocks(state, candidate_side);
    return result;
}

std::vector<int> top_k(const float *logits, int n_vocab, int k) {
    k = std::min(k, n_vocab);
    std::vector<int> order(static_cast<size_t>(n_vocab));
    for (int v = 0; v < n_vocab; ++v) order[size_t(v)] = v;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
        const float x = std::isnan(logits[a]) ? -INFINITY : logits[a], y = std::isnan(logits[b]) ? -INFINITY : logits[b];
        return x > y;
    });
    order.resize(size_t(k));
    return order;
}

// Greedy decode of `steps` tokens by one plugin, recording each step's top-5.
struct GreedyTrace {
    std::vector<int32_t> tokens;
    std::vector<std::vector<int>> top5;
    std::string error;
};

GreedyTrace greedy(ExecutorState &state, ForwardPlugin &plugin, const std::vector<int32_t> &prompt, int steps, BatchBuilder &builder) {
    GreedyTrace trace;
    std::vector<TrialSequence> sequence(1);
    sequence[0].tokens = prompt;
    TrialSequence capacity;
    capacity.tokens.resize(prompt.size() + size_t(steps));
    std::vector<TrialSequence> reserve = {capacity};
    if (!allocate_blocks(state, reserve)) {
        trace.error = "KV cache too small for the greedy check";
        return trace;
    }
    sequence[0].blocks = reserve[0].blocks;
    for (int step = 0; step < steps; ++step) {
        const CallReport report = call_plugin(state, plugin, sequence, builder);
        if (!report.error.empty()) {
            trace.error = report.error;
            break;
        }
        const float *last = report.logits.data() + report.logits.size() - size_t(state.n_vocab());
        const auto best = top_k(last, state.n_vocab(), 5);
        trace.tokens.push_back(best[0]);
        trace.top5.push_back(best);
        sequence[0].history.insert(sequence[0].history.end(), sequence[0].tokens.begin(), sequence[0].tokens.end());
        sequence[0].tokens = {best[0]};
    }
    release_blocks(state, reserve);
    return trace;
}

json verify_greedy(ExecutorState &state, ForwardPlugin &target, std::mt19937_64 &rng, int steps, BatchBuilder &builder) {
    std::vector<int32_t> prompt(static_cast<size_t>(4 + rng() % 13));
    for (auto &token : prompt) token = int32_t(rng() % uint64_t(state.n_vocab()));
    BatchBuilder reference_builder;
    const GreedyTrace expected = greedy(state, *state.reference, prompt, steps, reference_builder);
    const GreedyTrace actual = greedy(state, target, prompt, steps, builder);
    json result = {{"prompt_tokens", prompt.size()}, {"steps", steps}, {"reference", expected.tokens}, {"candidate", actual.tokens}};
    if (!actual.error.empty()) result["plugin_error"] = actual.error;
    result["ok"] = actual.error.empty() && expected.error.empty();
    for (size_t i = 0; i < expected.tokens.size() && i < actual.tokens.size(); ++i) {
        if (expected.tokens[i] == actual.tokens[i]) continue;
        // First divergence: acceptable only if each side's token is in the other's top-5
        // (vLLM's check_logprobs_close); the sequences differ afterwards, so stop here.
        const auto &ref_top = expected.top5[i], &cand_top = actual.top5[i];
        const bool close = std::find(ref_top.begin(), ref_top.end(), actual.tokens[i]) != ref_top.end() &&
                           std::find(cand_top.begin(), cand_top.end(), expected.tokens[i]) != cand_top.end();
        result["first_divergence"] = i;
        result["ok"] = result["ok"].get<bool>() && close;
        return result;
    }
    if (actual.tokens.size() != expected.tokens.size()) result["ok"] = false;
    return result;
}

// A workload shape with random contents (see executor_measure.cpp for the shape format).
std::vector<TrialSequence> shape_case(std::mt19937_64 &rng, int n_vocab, const json &shape) {
    std::vector<TrialSequence> sequences = shape_sequences(shape);
    for (TrialSequence &sequence : sequences) {
        for (int32_t &token : sequence.history) token = int32_t(rng() % uint64_t(n_vocab));
        for (int32_t &token : sequence.tokens) token = int32_t(rng() % uint64_t(n_vocab));
    }
    return sequences;
}

}  // namespace

json compare_to_reference(const ExecutorState &state, const CallReport &expected, const std::vector<float> &actual) {
    const LogitComparison logits = compare_logits(expected.logits, actual, state.n_vocab());
    return {{"max_abs_delta", logits.max_delta},
            {"max_abs_ref", logits.max_ref},
            {"nan_rows", logits.nan_rows},
            {"unwritten_rows", logits.unwritten_rows},
            {"rows", expected.logits.size() / size_t(state.n_vocab())}};
}

json run_verify(ExecutorState &state, ForwardPlugin &target, const json &params) {
    std::mt19937_64 rng(params.value("seed", uint64_t(1)));
    const int n_case = params.value("n_case", 12);
    const int greedy_steps = params.value("greedy_steps", 8);
    json result = {{"cases", json::array()}};
    const uint64_t resident_before = resident_bytes();
    BatchBuilder builder;
    // The workload's own shapes first (a candidate that special-cases them is caught here), then
    // random shapes the workload does not have.
    for (const json &shape : params.value("shapes", json::array())) {
        result["cases"].push_back(verify_case(state, target, shape_case(rng, state.n_vocab(), shape), builder));
    }
    CaseLimits limits;
    limits.max_seq = std::max(1, params.value("max_seq", limits.max_seq));
    limits.max_history = std::max(1, params.value("max_history", limits.max_history));
    limits.max_chunk = std::max(2, params.value("max_chunk", limits.max_chunk));
    for (int i = 0; i < n_case; ++i) {
        result["cases"].push_back(verify_case(state, target, random_case(rng, state.n_vocab(), i % 3, limits), builder));
    }
    if (greedy_steps > 0) result["greedy"] = verify_greedy(state, target, rng, greedy_steps, builder);
    result["resident_growth_bytes"] = int64_t(resident_bytes()) - int64_t(resident_before);
    result["private_bytes"] = target.private_bytes();
    return result;
}

}  // namespace hp::engine
