// Verification inside the executor: the candidate and the trusted reference run on the same
// fresh inputs (drawn from a seed the candidate never sees) over disjoint copies of the same KV
// history. This file measures; the verdict (tolerances, reasons) is decided by tune/verifier.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "executor_state.h"
#include "hotpass/core/clock.h"
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

// Over the KV rows the step wrote: the largest |a - b| where b is finite, the largest |a|, and how
// many entries of b (the candidate's) are NaN or inf. Kept apart so that every figure stays finite
// (a JSON number) and the verifier can say which it was.
struct KvComparison {
    double max_delta = 0, max_ref = 0;
    int64_t nonfinite = 0;
};
KvComparison compare_new_kv(const ExecutorState &state, const std::vector<TrialSequence> &a, const std::vector<TrialSequence> &b) {
    const hp_config &c = state.abi().config;
    const int block_tokens = state.kv->block_tokens();
    const int64_t row = int64_t(c.n_head_kv) * c.d_head;
    const size_t row_bytes = size_t(row) * dtype_size(DType(state.abi().kv->dtype));
    std::vector<uint8_t> row_a(row_bytes), row_b(row_bytes);
    KvComparison out;
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
                        out.max_ref = std::max(out.max_ref, double(std::fabs(x)));
                        if (!std::isfinite(y)) ++out.nonfinite;
                        else out.max_delta = std::max(out.max_delta, std::fabs(double(x) - double(y)));
                    }
                }
            }
        }
    }
    return out;
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

// A batch's histories up to this many tokens in all are written by the incumbent; longer ones get
// random KV (see write_history).
constexpr int kRealHistoryTokens = 512;

// Per layer, the RMS of the K rows and of the V rows the incumbent writes for a short real prompt:
// the scale of random histories. Measured once per executor.
bool measure_history_scale(ExecutorState &state, std::mt19937_64 &rng) {
    if (!state.history_scale.empty()) return true;
    std::vector<TrialSequence> probe(1);
    for (int i = 0; i < 32; ++i) probe[0].tokens.push_back(int32_t(rng() % uint64_t(state.n_vocab())));
    if (!allocate_blocks(state, probe)) return false;
    BatchBuilder builder;
    const bool ok = call_plugin(state, *state.incumbent, probe, builder).error.empty();
    const hp_config &c = state.abi().config;
    const int block_tokens = state.kv->block_tokens();
    const int64_t row = int64_t(c.n_head_kv) * c.d_head;
    const size_t row_bytes = size_t(row) * dtype_size(DType(state.abi().kv->dtype));
    std::vector<uint8_t> bytes(row_bytes);
    for (int layer = 0; ok && layer < c.n_layer; ++layer) {
        for (const auto &cache : {state.abi().kv->k, state.abi().kv->v}) {
            double sum = 0;
            for (int p = 0; p < int(probe[0].tokens.size()); ++p) {
                const int64_t offset = int64_t(probe[0].blocks[size_t(p / block_tokens)]) * block_tokens + p % block_tokens;
                checked(state.backend->download(bytes.data(), static_cast<const uint8_t *>(cache[layer]) + size_t(offset) * row_bytes, row_bytes));
                for (int64_t i = 0; i < row; ++i) {
                    const double value = kv_element(state, bytes.data(), i);
                    sum += value * value;
                }
            }
            const double rms = std::sqrt(sum / double(row * int64_t(probe[0].tokens.size())));
            state.history_scale.push_back(std::isfinite(rms) && rms > 0 ? float(rms) : 1.0f);
        }
    }
    release_blocks(state, probe);
    if (!ok) state.history_scale.clear();
    return ok;
}

// Random KV for every block of the sequences' histories: uniform values with the per-layer RMS
// of real K and V rows. Every position differs, so a kernel that reads the wrong block or row
// still gives a different answer.
void write_random_history(ExecutorState &state, const std::vector<TrialSequence> &sequences, uint64_t seed) {
    const hp_kv_cache &kv = *state.abi().kv;
    const int block_tokens = state.kv->block_tokens();
    const size_t bytes = kv_block_bytes(state);
    const DType dtype = DType(kv.dtype);
    const size_t n_value = bytes / dtype_size(dtype);
    std::vector<uint8_t> block(bytes);
    uint64_t x = seed;
    auto next = [&x] {  // splitmix64
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    for (int layer = 0; layer < state.abi().config.n_layer; ++layer) {
        for (int side = 0; side < 2; ++side) {
            void *base = side == 0 ? kv.k[layer] : kv.v[layer];
            const float half_width = std::sqrt(3.0f) * state.history_scale[size_t(2 * layer + side)];
            for (const TrialSequence &sequence : sequences) {
                const int n_block = (int(sequence.history.size()) + block_tokens - 1) / block_tokens;
                for (int b = 0; b < n_block; ++b) {
                    for (size_t i = 0; i < n_value; ++i) {
                        const float value = (float(next() >> 40) * 0x1p-24f * 2 - 1) * half_width;
                        switch (dtype) {
                            case DType::f32: reinterpret_cast<float *>(block.data())[i] = value; break;
                            case DType::f16: reinterpret_cast<uint16_t *>(block.data())[i] = f32_to_f16(value); break;
                            case DType::bf16: reinterpret_cast<uint16_t *>(block.data())[i] = f32_to_bf16(value); break;
                        }
                    }
                    checked(state.backend->upload(block_address(base, sequence.blocks[size_t(b)], bytes), block.data(), bytes));
                }
            }
        }
    }
}

// Writes each sequence's history into its blocks. The history is only the state both sides start
// from (the candidate gets a copy of the same blocks); the step under test is what is compared
// with the reference. Up to kRealHistoryTokens in all the incumbent writes it from the history's
// tokens (through the plain reference, a workload shape's history of 32 sequences x 300 tokens
// took minutes on llama-300m); beyond that it is random KV at the scale of real KV, since the
// incumbent itself then took about 35 s per workload shape of llama-300m's slow tier (3,000
// history tokens at ~85 tokens/s). Returns "incumbent", "random" or "" when nothing was needed,
// or an error.
Result<std::string> write_history(ExecutorState &state, std::vector<TrialSequence> &sequences, std::mt19937_64 &rng) {
    std::vector<TrialSequence> history_step;
    int n_history = 0;
    for (const TrialSequence &sequence : sequences) {
        if (sequence.history.empty()) continue;
        TrialSequence step;
        step.tokens = sequence.history;
        step.blocks = sequence.blocks;
        n_history += int(step.tokens.size());
        history_step.push_back(std::move(step));
    }
    if (history_step.empty()) return std::string();
    if (n_history > kRealHistoryTokens) {
        if (!measure_history_scale(state, rng)) return error("the incumbent failed on a 32-token prompt (measuring the scale of KV rows)");
        write_random_history(state, sequences, rng());
        return std::string("random");
    }
    BatchBuilder builder;
    const CallReport written = call_plugin(state, *state.incumbent, history_step, builder);
    if (!written.error.empty()) return error("the incumbent failed writing the history: {}", written.error);
    return std::string("incumbent");
}

// The rows of a batch's logits that belong to each sequence: all of its tokens' with
// `all_logits`, otherwise its last token's.
std::vector<size_t> first_logit_rows(const std::vector<TrialSequence> &sequences) {
    std::vector<size_t> first;
    size_t row = 0;
    for (const TrialSequence &sequence : sequences) {
        first.push_back(row);
        row += sequence.all_logits ? sequence.tokens.size() : 1;
    }
    return first;
}

// What the plain reference runs when a batch is larger than `budget` step tokens: a random
// subset of its sequences (drawn from the verification seed, which the candidate never sees);
// the last one taken may be a prefill chunk cut to its first tokens. A cut chunk is still checked
// through the KV it writes (causal attention makes those rows independent of the tokens after
// them) and through its first logit rows when it has all of them; only its last row goes
// unchecked by the reference.
struct ReferenceSample {
    std::vector<size_t> index;             // into the batch
    std::vector<TrialSequence> sequences;  // copies, tokens possibly cut; blocks of their own
    int n_token = 0;
    bool cut = false;
};

ReferenceSample sample_for_reference(std::mt19937_64 &rng, const std::vector<TrialSequence> &batch, int budget) {
    std::vector<size_t> order(batch.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    ReferenceSample sample;
    for (size_t i : order) {
        const int take = std::min(int(batch[i].tokens.size()), budget - sample.n_token);
        if (take <= 0) break;
        TrialSequence copy = batch[i];
        copy.blocks.clear();
        if (take < int(copy.tokens.size())) {
            copy.tokens.resize(size_t(take));
            sample.cut = true;
        }
        sample.index.push_back(i);
        sample.sequences.push_back(std::move(copy));
        sample.n_token += take;
    }
    // Positions keep the batch's order, so the reference sees the sequences as the batch has them.
    std::vector<size_t> by_position(sample.index.size());
    for (size_t k = 0; k < by_position.size(); ++k) by_position[k] = k;
    std::sort(by_position.begin(), by_position.end(), [&](size_t a, size_t b) { return sample.index[a] < sample.index[b]; });
    ReferenceSample sorted;
    sorted.n_token = sample.n_token;
    sorted.cut = sample.cut;
    for (size_t k : by_position) {
        sorted.index.push_back(sample.index[k]);
        sorted.sequences.push_back(std::move(sample.sequences[k]));
    }
    return sorted;
}

// The candidate's logit rows that the reference's sample computed too, side by side.
std::pair<std::vector<float>, std::vector<float>> sampled_rows(const ReferenceSample &sample, const std::vector<TrialSequence> &batch,
                                                               const std::vector<float> &reference, const std::vector<float> &candidate,
                                                               int n_vocab) {
    const std::vector<size_t> batch_first = first_logit_rows(batch), sample_first = first_logit_rows(sample.sequences);
    std::vector<float> expected, actual;
    for (size_t k = 0; k < sample.index.size(); ++k) {
        const TrialSequence &whole = batch[sample.index[k]], &part = sample.sequences[k];
        const bool cut = part.tokens.size() < whole.tokens.size();
        if (cut && !whole.all_logits) continue;  // the reference's last row is not the candidate's
        const size_t rows = whole.all_logits ? part.tokens.size() : 1;
        const auto span = [&](const std::vector<float> &logits, size_t first) {
            return std::make_pair(logits.begin() + std::ptrdiff_t(first * size_t(n_vocab)),
                                  logits.begin() + std::ptrdiff_t((first + rows) * size_t(n_vocab)));
        };
        const auto [ref_begin, ref_end] = span(reference, sample_first[k]);
        const auto [cand_begin, cand_end] = span(candidate, batch_first[sample.index[k]]);
        expected.insert(expected.end(), ref_begin, ref_end);
        actual.insert(actual.end(), cand_begin, cand_end);
    }
    return {expected, actual};
}

// `builder` is shared across cases on purpose: the batch arrays keep their addresses while their
// contents change, which catches a candidate that caches results by input pointer.
//
// With `reference_tokens` > 0 and a batch of more step tokens than that (the slow tier's workload
// shapes: a 500-token prefill chunk through the single-threaded reference took about a minute on
// llama-300m), the check is split in two: the verified incumbent runs the whole batch and every
// logit row and KV entry of the candidate is compared with it (at twice the tolerance: both sit
// within the tolerance of the reference), and the reference runs a random sample of at most
// `reference_tokens` step tokens, which bounds how far a chain of incumbents can drift.
json verify_case(ExecutorState &state, ForwardPlugin &target, std::vector<TrialSequence> reference_side, BatchBuilder &builder,
                 std::mt19937_64 &rng, int reference_tokens) {
    json result;
    int n_token = 0, n_prefill = 0;
    for (const auto &sequence : reference_side) {
        n_token += int(sequence.tokens.size());
        n_prefill += sequence.tokens.size() > 1;
    }
    result["n_seq"] = reference_side.size();
    result["n_token"] = n_token;
    result["n_prefill_seq"] = n_prefill;
    const bool sampled = reference_tokens > 0 && n_token > reference_tokens;
    ReferenceSample sample;
    if (sampled) sample = sample_for_reference(rng, reference_side, reference_tokens);
    std::vector<TrialSequence> candidate_side = reference_side;
    for (auto &sequence : candidate_side) sequence.blocks.clear();
    std::vector<std::vector<TrialSequence> *> allocated;
    const auto release_all = [&] {
        for (auto *sequences : allocated) release_blocks(state, *sequences);
    };
    for (auto *sequences : {&reference_side, &candidate_side, &sample.sequences}) {
        if (sequences->empty()) continue;
        if (!allocate_blocks(state, *sequences)) {
            release_all();
            return {{"error", "KV cache too small for the verification batch"}};
        }
        allocated.push_back(sequences);
    }
    const Result<std::string> history = write_history(state, reference_side, rng);
    if (!history.ok()) {
        release_all();
        result["error"] = history.error();
        return result;
    }
    if (!history->empty()) result["history"] = *history;
    for (size_t s = 0; s < reference_side.size(); ++s) copy_blocks(state, reference_side[s].blocks, candidate_side[s].blocks);
    for (size_t k = 0; k < sample.index.size(); ++k) copy_blocks(state, reference_side[sample.index[k]].blocks, sample.sequences[k].blocks);
    const std::vector<uint8_t> candidate_kv_before = snapshot_blocks(state, candidate_side);
    // Without sampling the reference runs the whole batch on `reference_side`; with it the
    // incumbent does, and the reference runs the sample on blocks of its own.
    BatchBuilder reference_builder, incumbent_builder;
    const double reference_start = now_seconds();
    const CallReport expected = call_plugin(state, *state.reference, sampled ? sample.sequences : reference_side, reference_builder);
    result["reference_seconds"] = now_seconds() - reference_start;
    if (!expected.error.empty()) {
        release_all();
        return {{"error", "the reference failed on the verification batch: " + expected.error}};
    }
    CallReport incumbent;
    if (sampled) {
        incumbent = call_plugin(state, *state.incumbent, reference_side, incumbent_builder);
        if (!incumbent.error.empty()) {
            release_all();
            return {{"error", "the incumbent failed on the verification batch: " + incumbent.error}};
        }
    }
    const uint64_t reference_kv = hash_blocks(state, reference_side);
    const uint64_t sample_kv = sampled ? hash_blocks(state, sample.sequences) : 0;
    const CallReport first = call_plugin(state, target, candidate_side, builder);
    result["plugin_error"] = first.error;
    result["canary_intact"] = first.canary_intact;
    result["inputs_intact"] = first.inputs_intact;
    result["other_kv_intact"] = hash_blocks(state, reference_side) == reference_kv && (!sampled || hash_blocks(state, sample.sequences) == sample_kv);
    // Unwritten and NaN rows are counted over the candidate's whole output.
    const LogitComparison whole = compare_logits(sampled ? incumbent.logits : expected.logits, first.logits, state.n_vocab());
    result["nan_rows"] = whole.nan_rows;
    result["unwritten_rows"] = whole.unwritten_rows;
    result["rows"] = first.logits.size() / size_t(state.n_vocab());
    if (sampled) {
        std::vector<TrialSequence> candidate_sample;
        for (size_t i : sample.index) candidate_sample.push_back(candidate_side[i]);
        const auto [expected_rows, actual_rows] = sampled_rows(sample, candidate_side, expected.logits, first.logits, state.n_vocab());
        const LogitComparison logits = compare_logits(expected_rows, actual_rows, state.n_vocab());
        result["max_abs_delta"] = logits.max_delta;
        result["max_abs_ref"] = logits.max_ref;
        const KvComparison kv = compare_new_kv(state, sample.sequences, candidate_sample);
        result["kv_max_abs_delta"] = kv.max_delta;
        result["kv_max_abs_ref"] = kv.max_ref;
        const KvComparison incumbent_kv = compare_new_kv(state, reference_side, candidate_side);
        result["kv_nonfinite"] = incumbent_kv.nonfinite;  // over every entry it wrote, as the rows above
        result["reference_sample"] = {{"n_seq", sample.index.size()}, {"n_token", sample.n_token}, {"cut", sample.cut},
                                      {"rows", expected_rows.size() / size_t(state.n_vocab())}};
        result["incumbent"] = {{"max_abs_delta", whole.max_delta},
                               {"max_abs_ref", whole.max_ref},
                               {"kv_max_abs_delta", incumbent_kv.max_delta},
                               {"kv_max_abs_ref", incumbent_kv.max_ref}};
    } else {
        result["max_abs_delta"] = whole.max_delta;
        result["max_abs_ref"] = whole.max_ref;
        const KvComparison kv = compare_new_kv(state, reference_side, candidate_side);
        result["kv_max_abs_delta"] = kv.max_delta;
        result["kv_max_abs_ref"] = kv.max_ref;
        result["kv_nonfinite"] = kv.nonfinite;
    }
    // Determinism: the same call again from the same KV state must give the same bits.
    restore_blocks(state, candidate_side, candidate_kv_before);
    const CallReport second = call_plugin(state, target, candidate_side, builder);
    result["deterministic"] = second.error == first.error &&
                              std::memcmp(first.logits.data(), second.logits.data(), first.logits.size() * sizeof(float)) == 0;
    release_all();
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

// What one plugin's greedy decode produced.
struct GreedyTrace {
    std::vector<int32_t> tokens;
    std::vector<std::vector<int>> top5;
    std::string error;
};

// Greedy decode of `steps` tokens by one plugin from `sequence` (its history already in its
// blocks, which have room for the steps; its tokens the first step's), recording each step's top-5.
GreedyTrace greedy(ExecutorState &state, ForwardPlugin &plugin, std::vector<TrialSequence> sequence, int steps, BatchBuilder &builder) {
    GreedyTrace trace;
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
    return trace;
}

// A prompt longer than this is started from a history the incumbent writes (all but its last
// kGreedyFirstChunk tokens), so each side prefills only that last chunk, then decodes.
constexpr size_t kGreedyRealPrompt = 32, kGreedyFirstChunk = 8;
constexpr int kGreedyMaxPrompt = 1024;  // a sampled request's prompt is cut to this

// The prompt: one of the traffic's sampled requests when the campaign gives them (`prompts`:
// [{"length", "tokens"?}], ids random where the trace has none), else 4-16 random tokens.
json verify_greedy(ExecutorState &state, ForwardPlugin &target, std::mt19937_64 &rng, int steps, const json &prompts, BatchBuilder &builder) {
    std::vector<int32_t> prompt;
    json result = {{"steps", steps}};
    if (prompts.is_array() && !prompts.empty()) {
        const json &request = prompts[size_t(rng() % prompts.size())];
        const int max_position = state.model.config.max_position > 0 ? state.model.config.max_position - steps : kGreedyMaxPrompt;
        const int length = std::clamp(request.value("length", 1), 1, std::max(1, std::min(kGreedyMaxPrompt, max_position)));
        const std::vector<int32_t> ids = request.value("tokens", std::vector<int32_t>());
        for (int i = 0; i < length; ++i) {
            const bool known = size_t(i) < ids.size() && ids[size_t(i)] >= 0 && ids[size_t(i)] < state.n_vocab();
            prompt.push_back(known ? ids[size_t(i)] : int32_t(rng() % uint64_t(state.n_vocab())));
        }
        result["request_prompt_tokens"] = request.value("length", 1);
        result["request_token_ids"] = !ids.empty();
    } else {
        prompt.resize(static_cast<size_t>(4 + rng() % 13));
        for (auto &token : prompt) token = int32_t(rng() % uint64_t(state.n_vocab()));
    }
    result["prompt_tokens"] = prompt.size();
    // Two copies of the same start: KV for the history (if any) written once, then copied.
    std::vector<TrialSequence> sides(2);
    const size_t n_history = prompt.size() > kGreedyRealPrompt ? prompt.size() - kGreedyFirstChunk : 0;
    sides[0].history.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(n_history));
    sides[0].tokens.assign(prompt.begin() + std::ptrdiff_t(n_history), prompt.end());
    sides[1] = sides[0];
    std::vector<TrialSequence> capacity(2);
    for (TrialSequence &c : capacity) c.tokens.resize(prompt.size() + size_t(steps));
    if (!allocate_blocks(state, capacity)) {
        result["ok"] = false;
        result["error"] = "KV cache too small for the greedy check";
        return result;
    }
    sides[0].blocks = capacity[0].blocks;
    sides[1].blocks = capacity[1].blocks;
    if (n_history > 0) {
        TrialSequence history_step;
        history_step.tokens = sides[0].history;
        history_step.blocks = sides[0].blocks;
        BatchBuilder history_builder;
        const CallReport written = call_plugin(state, *state.incumbent, {history_step}, history_builder);
        if (!written.error.empty()) {
            release_blocks(state, capacity);
            result["ok"] = false;
            result["error"] = "the incumbent failed writing the prompt's history: " + written.error;
            return result;
        }
        copy_blocks(state, sides[0].blocks, sides[1].blocks);
        result["history_tokens"] = n_history;
    }
    BatchBuilder reference_builder;
    const GreedyTrace expected = greedy(state, *state.reference, {sides[0]}, steps, reference_builder);
    const GreedyTrace actual = greedy(state, target, {sides[1]}, steps, builder);
    release_blocks(state, capacity);
    result["reference"] = expected.tokens;
    result["candidate"] = actual.tokens;
    if (!actual.error.empty()) result["plugin_error"] = actual.error;
    if (!expected.error.empty()) result["error"] = "the reference failed in the greedy check: " + expected.error;
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
    const int reference_tokens = std::max(0, params.value("reference_tokens", 0));  // 0: the reference runs every batch whole
    json result = {{"cases", json::array()}};
    const uint64_t resident_before = resident_bytes();
    BatchBuilder builder;
    // The workload's own shapes first (a candidate that special-cases them is caught here), then
    // random shapes the workload does not have.
    for (const json &shape : params.value("shapes", json::array())) {
        result["cases"].push_back(verify_case(state, target, shape_case(rng, state.n_vocab(), shape), builder, rng, reference_tokens));
    }
    CaseLimits limits;
    limits.max_seq = std::max(1, params.value("max_seq", limits.max_seq));
    limits.max_history = std::max(1, params.value("max_history", limits.max_history));
    limits.max_chunk = std::max(2, params.value("max_chunk", limits.max_chunk));
    for (int i = 0; i < n_case; ++i) {
        result["cases"].push_back(verify_case(state, target, random_case(rng, state.n_vocab(), i % 3, limits), builder, rng, reference_tokens));
    }
    if (greedy_steps > 0) result["greedy"] = verify_greedy(state, target, rng, greedy_steps, params.value("greedy_prompts", json::array()), builder);
    result["resident_growth_bytes"] = int64_t(resident_bytes()) - int64_t(resident_before);
    result["private_bytes"] = target.private_bytes();
    return result;
}

}  // namespace hp::engine
