#include "hotpass/engine/batch.h"

#include <algorithm>

namespace hp::engine {

void BatchBuilder::clear() { sequences_.clear(); }

void BatchBuilder::add(const BatchSequence &sequence) { sequences_.push_back(sequence); }

const hp_batch &BatchBuilder::finish() {
    token_ids_.clear();
    positions_.clear();
    seq_start_.assign(1, 0);
    block_tables_.clear();
    logit_rows_.clear();
    size_t max_blocks = 1;
    for (const BatchSequence &sequence : sequences_) max_blocks = std::max(max_blocks, sequence.blocks.size());
    for (const BatchSequence &sequence : sequences_) {
        const int first_token = int(token_ids_.size());
        for (size_t t = 0; t < sequence.tokens.size(); ++t) {
            token_ids_.push_back(sequence.tokens[t]);
            positions_.push_back(sequence.start_position + int(t));
            if (sequence.all_logits || t + 1 == sequence.tokens.size()) logit_rows_.push_back(first_token + int(t));
        }
        seq_start_.push_back(int32_t(token_ids_.size()));
        block_tables_.insert(block_tables_.end(), sequence.blocks.begin(), sequence.blocks.end());
        block_tables_.resize(block_tables_.size() + (max_blocks - sequence.blocks.size()), -1);
    }
    batch_ = hp_batch{};
    batch_.n_token = int32_t(token_ids_.size());
    batch_.token_ids = token_ids_.data();
    batch_.positions = positions_.data();
    batch_.n_seq = int32_t(sequences_.size());
    batch_.seq_token_start = seq_start_.data();
    batch_.block_tables = block_tables_.data();
    batch_.max_blocks_per_seq = int32_t(max_blocks);
    batch_.n_logit_row = int32_t(logit_rows_.size());
    batch_.logit_rows = logit_rows_.data();
    return batch_;
}

}  // namespace hp::engine
