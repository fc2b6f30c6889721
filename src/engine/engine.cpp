#include "hotpass/engine/engine.h"

#include "hotpass/engine/batch.h"

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
    }

    // The block tables must stay alive until the plugin returns.
    std::vector<std::vector<int32_t>> tables(inputs.size());
    BatchBuilder builder;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const Sequence &sequence = sequences_.at(inputs[i].seq);
        tables[i] = sequence.blocks;
        tables[i].insert(tables[i].end(), new_blocks[i].begin(), new_blocks[i].end());
        builder.add(BatchSequence{tables[i], sequence.length, inputs[i].tokens, inputs[i].all_logits});
        for (int32_t token : inputs[i].tokens) {
            if (token < 0 || token >= config().n_vocab) {
                give_back();
                return error("token id {} outside the vocabulary [0, {})", token, config().n_vocab);
            }
        }
    }
    const hp_batch &batch = builder.finish();

    std::vector<float> logits(size_t(batch.n_logit_row) * size_t(config().n_vocab), std::numeric_limits<float>::quiet_NaN());
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
