#include "hotpass/engine/generate.h"

#include <algorithm>

#include "hotpass/core/clock.h"

namespace hp::engine {

// The running maximum stays in a register rather than being re-loaded as logits[best] every iteration
// (a load whose address depends on the previous comparison); a decode step pays this loop once per
// token over the whole vocabulary.
int32_t argmax(const float *logits, int n_vocab) {
    int32_t best = 0;
    float best_value = logits[0];
    for (int32_t v = 1; v < n_vocab; ++v) {
        if (logits[v] > best_value) {
            best = v;
            best_value = logits[v];
        }
    }
    return best;
}

Result<GenerateResult> generate_greedy(Engine &engine, const std::vector<std::vector<int32_t>> &prompts,
                                       const GenerateOptions &options) {
    const int n_vocab = engine.config().n_vocab;
    GenerateResult result;
    result.generated.resize(prompts.size());
    result.prompt_logits.resize(options.prompt_logits ? prompts.size() : 0);
    std::vector<int> seqs;
    for (const auto &prompt : prompts) {
        if (prompt.empty()) return error("empty prompt: give at least one token");
        seqs.push_back(engine.add_sequence());
    }
    struct Cleanup {
        Engine &engine;
        std::vector<int> &seqs;
        ~Cleanup() {
            for (int seq : seqs) engine.remove_sequence(seq);
        }
    } cleanup{engine, seqs};

    // Prefill: every prompt advances by up to prefill_chunk tokens per step.
    const double prefill_start = now_seconds();
    std::vector<size_t> done(prompts.size(), 0);
    std::vector<int32_t> next_token(prompts.size(), -1);
    while (true) {
        std::vector<StepInput> inputs;
        std::vector<size_t> which;
        for (size_t p = 0; p < prompts.size(); ++p) {
            if (done[p] == prompts[p].size()) continue;
            const size_t chunk = options.prefill_chunk > 0 ? std::min(prompts[p].size() - done[p], size_t(options.prefill_chunk))
                                                           : prompts[p].size() - done[p];
            inputs.push_back(StepInput{seqs[p], std::span(prompts[p]).subspan(done[p], chunk), options.prompt_logits});
            which.push_back(p);
        }
        if (inputs.empty()) break;
        auto logits = engine.step(inputs);
        if (!logits.ok()) return Error{logits.error()};
        size_t row = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
            const size_t p = which[i];
            const size_t n_row = options.prompt_logits ? inputs[i].tokens.size() : 1;
            if (options.prompt_logits) {
                result.prompt_logits[p].insert(result.prompt_logits[p].end(), logits->begin() + long(row * n_vocab),
                                               logits->begin() + long((row + n_row) * n_vocab));
            }
            done[p] += inputs[i].tokens.size();
            if (done[p] == prompts[p].size()) next_token[p] = argmax(logits->data() + (row + n_row - 1) * n_vocab, n_vocab);
            row += n_row;
        }
        for (const StepInput &input : inputs) result.n_prefill_token += int64_t(input.tokens.size());
    }
    result.prefill_seconds = now_seconds() - prefill_start;

    // Decode: all unfinished sequences together, one token each per step.
    const auto &eos = engine.config().eos_token_ids;
    auto is_eos = [&](int32_t token) { return options.stop_at_eos && std::find(eos.begin(), eos.end(), token) != eos.end(); };
    std::vector<bool> finished(prompts.size(), options.n_new <= 0);
    for (size_t p = 0; p < prompts.size(); ++p) {
        if (finished[p]) continue;
        result.generated[p].push_back(next_token[p]);
        finished[p] = is_eos(next_token[p]) || int(result.generated[p].size()) >= options.n_new;
    }
    const double decode_start = now_seconds();
    while (true) {
        std::vector<StepInput> inputs;
        std::vector<size_t> which;
        for (size_t p = 0; p < prompts.size(); ++p) {
            if (finished[p]) continue;
            inputs.push_back(StepInput{seqs[p], std::span(&result.generated[p].back(), 1), false});
            which.push_back(p);
        }
        if (inputs.empty()) break;
        auto logits = engine.step(inputs);
        if (!logits.ok()) return Error{logits.error()};
        for (size_t i = 0; i < which.size(); ++i) {
            const size_t p = which[i];
            const int32_t token = argmax(logits->data() + i * size_t(n_vocab), n_vocab);
            result.generated[p].push_back(token);
            finished[p] = is_eos(token) || int(result.generated[p].size()) >= options.n_new;
        }
        result.n_decode_token += int64_t(inputs.size());
        ++result.n_decode_step;
    }
    result.decode_seconds = now_seconds() - decode_start;
    return result;
}

}  // namespace hp::engine
