// BatchBuilder: turns per-sequence token chunks into one hp_batch (the ABI's step description).
// Shared by the Engine and the executor so both speak exactly the same batch layout.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hotpass/forward_abi.h"

namespace hp::engine {

struct BatchSequence {
    std::span<const int32_t> blocks;  // the sequence's KV block table (covers every new position)
    int start_position = 0;           // position of tokens[0]; KV of earlier positions is cached
    std::span<const int32_t> tokens;
    bool all_logits = false;          // logits for every token; otherwise only the last
};

class BatchBuilder {
public:
    void clear();
    void add(const BatchSequence &sequence);
    // The batch over everything added since clear(); valid until the next add/clear.
    const hp_batch &finish();
    int n_token() const { return int(token_ids_.size()); }
    int n_logit_row() const { return int(logit_rows_.size()); }
    std::span<const int32_t> token_ids() const { return token_ids_; }

private:
    std::vector<BatchSequence> sequences_;
    std::vector<int32_t> token_ids_, positions_, seq_start_, block_tables_, logit_rows_;
    hp_batch batch_{};
};

}  // namespace hp::engine
