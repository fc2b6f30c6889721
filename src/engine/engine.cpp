#include "hotpass/engine/engine.h"

#include "hotpass/engine/batch.h"
#include "hotpass/engine/device_step.h"

#include <algorithm>
#include <chrono>
#include <limits>


namespace hp::engine {

namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const model::Model &model, const EngineOptions &options) {
    std::unique_ptr<Engine> engine(new Engine(model));
    const model::ModelConfig &config = model.config;
    const int n_layer = options.n_layer > 0 ? std::min(options.n_layer, config.n_layer) : config.n_layer;
    const bool on_cuda = options.device == backend::DeviceKind::cuda;
    const hp_device device = on_cuda ? HP_DEVICE_CUDA : HP_DEVICE_CPU;

    auto phase = std::chrono::steady_clock::now();
    auto backend = backend::create_backend(options.device, options.device_index);
    if (!backend.ok()) return Error{backend.error()};
    engine->backend_ = std::move(backend).value();
    engine->startup_.context_ms = elapsed_ms(phase);

    phase = std::chrono::steady_clock::now();
    std::vector<const void *> tensor_data;
    if (on_cuda) {
        auto weights = place_weights(*engine->backend_, model, n_layer, options.synthetic);
        if (!weights.ok()) return Error{weights.error()};
        engine->weight_arena_ = weights->arena;
        tensor_data = std::move(weights->tensor_data);
        engine->scratch_ = std::make_unique<DeviceBuffers>(*engine->backend_);
    }
    engine->startup_.weights_ms = elapsed_ms(phase);

    phase = std::chrono::steady_clock::now();
    auto kv = KvCache::create(n_layer, config.n_head_kv, config.d_head, options.kv, on_cuda ? engine->backend_.get() : nullptr);
    if (!kv.ok()) return Error{kv.error()};
    engine->kv_ = std::move(kv).value();
    engine->startup_.kv_ms = elapsed_ms(phase);

    phase = std::chrono::steady_clock::now();
    auto binding = ModelBinding::create(model, *engine->kv_, n_layer, device, tensor_data);
    if (!binding.ok()) return Error{binding.error()};
    engine->binding_ = std::move(binding).value();
    auto path = resolve_forward(options.forward, device);
    if (!path.ok()) return Error{path.error()};
    auto plugin = ForwardPlugin::open(*path);
    if (!plugin.ok()) return Error{plugin.error()};
    engine->plugin_ = std::move(plugin).value();
    HP_TRY(engine->plugin_->create(&engine->binding_->view(), options.n_thread, on_cuda ? engine->backend_.get() : nullptr));
    if (config.is_moe()) engine->expert_counts_.assign(size_t(n_layer) * size_t(config.n_expert), 0);
    HP_TRY(engine->backend_->synchronize());
    engine->startup_.plugin_ms = elapsed_ms(phase);

    if (options.warm_up) {  // one 1-token step; its KV blocks and expert counts are given back
        phase = std::chrono::steady_clock::now();
        const int seq = engine->add_sequence();
        const int32_t token = config.bos_token_id >= 0 && config.bos_token_id < config.n_vocab ? config.bos_token_id : 0;
        auto logits = engine->step({StepInput{seq, std::span(&token, 1), false}});
        engine->remove_sequence(seq);
        if (!logits.ok()) return Error{logits.error()};
        std::fill(engine->expert_counts_.begin(), engine->expert_counts_.end(), 0);
        engine->startup_.warm_up_ms = elapsed_ms(phase);
    }
    return engine;
}

Engine::~Engine() {
    plugin_.reset();
    binding_.reset();
    kv_.reset();
    scratch_.reset();
    if (backend_) backend_->free(weight_arena_);
}

// One plugin call. On CUDA the plugin gets device copies of the batch arrays (packed in one
// buffer), NaN-poisoned device logits and device expert counts; results come back to `out`'s
// host buffers, and an asynchronous device error (a poisoned context) is reported here.
Status Engine::run_plugin(const hp_batch &batch, hp_output &out) {
    if (backend_->kind() != backend::DeviceKind::cuda) return plugin_->forward(batch, out);
    const PackedBatch packed = pack_batch(batch);
    const size_t logits_bytes = size_t(batch.n_logit_row) * size_t(config().n_vocab) * sizeof(float);
    const size_t counts_bytes = expert_counts_.size() * sizeof(int32_t);
    auto *ints = static_cast<int32_t *>(scratch_->get(0, std::max<size_t>(packed.ints.size(), 1) * sizeof(int32_t)));
    auto *logits = static_cast<float *>(scratch_->get(1, std::max<size_t>(logits_bytes, 4)));
    auto *counts = static_cast<int32_t *>(scratch_->get(2, std::max<size_t>(counts_bytes, 4)));
    if (!ints || !logits || !counts) return error("out of device memory for a step of {} tokens", batch.n_token);
    HP_TRY(backend_->upload(ints, packed.ints.data(), packed.ints.size() * sizeof(int32_t)));
    HP_TRY(backend_->memset(logits, 0xff, logits_bytes));  // all-ones bits: NaN
    if (counts_bytes) HP_TRY(backend_->upload(counts, expert_counts_.data(), counts_bytes));
    hp_batch device_batch = device_batch_view(batch, packed, ints);
    hp_output device_out{logits, counts_bytes ? counts : nullptr};
    HP_TRY(plugin_->forward(device_batch, device_out));
    HP_TRY(backend_->download(out.logits, logits, logits_bytes));
    if (counts_bytes) HP_TRY(backend_->download(expert_counts_.data(), counts, counts_bytes));
    return Status::success();
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
    if (Status status = run_plugin(batch, out); !status.ok()) {
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
