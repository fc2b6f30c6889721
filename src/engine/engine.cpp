#include "hotpass/engine/engine.h"

#include <algorithm>
#include <limits>

namespace hp::engine {

Result<std::unique_ptr<Engine>> Engine::create(const model::Model &model, const EngineOptions &options) {
    std::unique_ptr<Engine> engine(new Engine(model));
    const model::ModelConfig &config = model.config;
    const int n_layer = options.n_layer > 0 ? std::min(options.n_layer, config.n_layer) : config.n_layer;
    auto kv = KvCache::create(n_layer, config.n_head_kv, config.d_head, options.kv);
    if (!kv.ok()) return Error{kv.error()};
    engine->kv_ = std::move(kv).value();
    auto binding = ModelBinding::create(model, *engine->kv_, n_layer);
    if (!binding.ok()) return Error{binding.error()};
    engine->binding_ = std::move(binding).value();
    auto path = resolve_forward(options.forward);
    if (!path.ok()) return Error{path.error()};
    auto plugin = ForwardPlugin::open(*path);
    if (!plugin.ok()) return Error{plugin.error()};
    engine->plugin_ = std::move(plugin).value();
    HP_TRY(engine->plugin_->create(&engine->binding_->view(), options.n_thread));
    if (config.is_moe()) engine->expert_counts_.assign(size_t(n_layer) * size_t(config.n_expert), 0);
    return engine;
}

int Engine::add_sequence() {
    const int seq = next_seq_++;
    sequences_[seq] = Sequence{};
    return seq;
}

void Engine::remove_sequence(int seq) {
    auto found = sequences_.find(seq);
    HP_CHECK(found != sequences_.end(), "remove of unknown sequence {}", seq);
    for (int32_t block : found->second.blocks) kv_->release_block(block);
    sequences_.erase(found);
}

int Engine::sequence_length(int seq) const {
    auto found = sequences_.find(seq);
    HP_CHECK(found != sequences_.end(), "unknown sequence {}", seq);
    return found->second.length;
}

Result<std::vector<float>> Engine::step(const std::vector<StepInput> &inputs) {
    const int block_tokens = kv_->block_tokens();
    // Blocks each sequence needs after this step; allocate them up front, all or nothing.
    std::vector<std::vector<int32_t>> new_blocks(inputs.size());
    int max_blocks = 1;
    auto give_back = [&] {
        for (auto &blocks : new_blocks) {
            for (int32_t block : blocks) kv_->release_block(block);
        }
    };
    for (size_t i = 0; i < inputs.size(); ++i) {
        auto found = sequences_.find(inputs[i].seq);
        HP_CHECK(found != sequences_.end(), "step on unknown sequence {}", inputs[i].seq);
        HP_CHECK(!inputs[i].tokens.empty(), "step with no tokens for sequence {}", inputs[i].seq);
        const int length = found->second.length + int(inputs[i].tokens.size());
        const int needed = (length + block_tokens - 1) / block_tokens;
        for (int b = int(found->second.blocks.size()); b < needed; ++b) {
            const int block = kv_->allocate_block();
            if (block < 0) {
                give_back();
                return error("KV cache full: {} blocks of {} tokens all in use", kv_->n_block(), block_tokens);
            }
            new_blocks[i].push_back(block);
        }
        max_blocks = std::max(max_blocks, needed);
    }

    std::vector<int32_t> token_ids, positions, seq_start{0}, block_tables, logit_rows;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const Sequence &sequence = sequences_.at(inputs[i].seq);
        const int first_token = int(token_ids.size());
        for (size_t t = 0; t < inputs[i].tokens.size(); ++t) {
            token_ids.push_back(inputs[i].tokens[t]);
            positions.push_back(sequence.length + int(t));
            if (inputs[i].all_logits || t + 1 == inputs[i].tokens.size()) logit_rows.push_back(first_token + int(t));
        }
        seq_start.push_back(int32_t(token_ids.size()));
        std::vector<int32_t> table = sequence.blocks;
        table.insert(table.end(), new_blocks[i].begin(), new_blocks[i].end());
        table.resize(size_t(max_blocks), -1);
        block_tables.insert(block_tables.end(), table.begin(), table.end());
    }
    for (int32_t token : token_ids) {
        if (token < 0 || token >= config().n_vocab) {
            give_back();
            return error("token id {} outside the vocabulary [0, {})", token, config().n_vocab);
        }
    }

    hp_batch batch{};
    batch.n_token = int32_t(token_ids.size());
    batch.token_ids = token_ids.data();
    batch.positions = positions.data();
    batch.n_seq = int32_t(inputs.size());
    batch.seq_token_start = seq_start.data();
    batch.block_tables = block_tables.data();
    batch.max_blocks_per_seq = max_blocks;
    batch.n_logit_row = int32_t(logit_rows.size());
    batch.logit_rows = logit_rows.data();

    std::vector<float> logits(logit_rows.size() * size_t(config().n_vocab), std::numeric_limits<float>::quiet_NaN());
    hp_output out{};
    out.logits = logits.data();
    out.expert_counts = expert_counts_.empty() ? nullptr : expert_counts_.data();
    if (Status status = plugin_->forward(batch, out); !status.ok()) {
        give_back();
        return Error{status.error()};
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
        Sequence &sequence = sequences_.at(inputs[i].seq);
        sequence.length += int(inputs[i].tokens.size());
        sequence.blocks.insert(sequence.blocks.end(), new_blocks[i].begin(), new_blocks[i].end());
    }
    return logits;
}

}  // namespace hp::engine
