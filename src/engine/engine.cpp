#include "hotpass/engine/engine.h"

#include "hotpass/engine/batch.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "hotpass/core/hash.h"

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
    if (on_cuda) HP_TRY(engine->place_weights(options, n_layer, tensor_data));
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
        if (on_cuda && !engine->expert_counts_.empty()) {
            HP_TRY(engine->backend_->memset(engine->scratch_[2].first, 0, engine->expert_counts_.size() * sizeof(int32_t)));
        }
        engine->startup_.warm_up_ms = elapsed_ms(phase);
    }
    return engine;
}

Engine::~Engine() {
    plugin_.reset();
    binding_.reset();
    kv_.reset();
    if (backend_) {
        for (auto &[ptr, bytes] : scratch_) backend_->free(ptr);
        backend_->free(weight_arena_);
    }
}

// Weights on the device, once, in one allocation: each tensor uploaded as stored, or (a model
// with no host memory, from preset_shell) generated there with model::synthesize_tensor's
// recipe, which tests/gpu checks bit for bit. Layers past n_layer stay behind.
Status Engine::place_weights(const EngineOptions &options, int n_layer, std::vector<const void *> &tensor_data) {
    const auto aligned = [](uint64_t bytes) { return (bytes + 255) / 256 * 256; };
    uint64_t total = 0;
    for (const model::TensorView &tensor : model_.tensors) {
        if (tensor.spec.layer < n_layer) total += aligned(tensor.n_byte);
    }
    weight_arena_ = backend_->alloc(std::max<uint64_t>(total, 1), 256);
    if (!weight_arena_) return error("out of device memory placing {:.2f} GB of weights", total / 1e9);
    uint64_t offset = 0;
    for (const model::TensorView &tensor : model_.tensors) {
        if (tensor.spec.layer >= n_layer) {
            tensor_data.push_back(nullptr);
            continue;
        }
        void *dst = static_cast<char *>(weight_arena_) + offset;
        offset += aligned(tensor.n_byte);
        tensor_data.push_back(dst);
        if (tensor.data) {
            HP_TRY(backend_->upload(dst, tensor.data, tensor.n_byte));
            continue;
        }
        if (!model_.source.starts_with("preset:")) return error("tensor {} has no data and the model is no preset", tensor.spec.name);
        float mean = 0.0f, std = model_.config.initializer_range;
        if (tensor.spec.is_norm()) {
            mean = 1.0f;
            std = options.synthetic.norm_std;
        } else if (tensor.spec.is_bias()) {
            std = options.synthetic.bias_std;
        }
        HP_TRY(backend_->fill_normal(dst, tensor.dtype, tensor.n_element(), hash64(tensor.spec.name, options.synthetic.seed), mean, std));
    }
    return Status::success();
}

void *Engine::device_scratch(size_t index, size_t bytes) {
    if (scratch_.size() <= index) scratch_.resize(index + 1, {nullptr, 0});
    auto &[ptr, capacity] = scratch_[index];
    if (capacity < bytes) {
        backend_->free(ptr);
        capacity = std::max(bytes, 2 * capacity);
        ptr = backend_->alloc(capacity, 256);
        if (!ptr) capacity = 0;
    }
    return ptr;
}

// One plugin call. On CUDA the plugin gets device copies of the batch arrays (packed in one
// buffer), NaN-poisoned device logits and device expert counts; results come back to `out`'s
// host buffers, and an asynchronous device error (a poisoned context) is reported here.
Status Engine::run_plugin(const hp_batch &batch, hp_output &out) {
    if (backend_->kind() != backend::DeviceKind::cuda) return plugin_->forward(batch, out);
    std::vector<int32_t> packed;
    size_t offsets[5];
    const std::pair<const int32_t *, size_t> arrays[5] = {
        {batch.token_ids, size_t(batch.n_token)},
        {batch.positions, size_t(batch.n_token)},
        {batch.seq_token_start, size_t(batch.n_seq) + 1},
        {batch.block_tables, size_t(batch.n_seq) * size_t(batch.max_blocks_per_seq)},
        {batch.logit_rows, size_t(batch.n_logit_row)}};
    for (size_t i = 0; i < 5; ++i) {
        offsets[i] = packed.size();
        packed.insert(packed.end(), arrays[i].first, arrays[i].first + arrays[i].second);
    }
    const size_t logits_bytes = size_t(batch.n_logit_row) * size_t(config().n_vocab) * sizeof(float);
    const size_t counts_bytes = expert_counts_.size() * sizeof(int32_t);
    const bool counts_new = counts_bytes && (scratch_.size() <= 2 || scratch_[2].second < counts_bytes);
    auto *ints = static_cast<int32_t *>(device_scratch(0, std::max<size_t>(packed.size(), 1) * sizeof(int32_t)));
    auto *logits = static_cast<float *>(device_scratch(1, std::max<size_t>(logits_bytes, 4)));
    auto *counts = static_cast<int32_t *>(device_scratch(2, std::max<size_t>(counts_bytes, 4)));
    if (!ints || !logits || !counts) return error("out of device memory for a step of {} tokens", batch.n_token);
    HP_TRY(backend_->upload(ints, packed.data(), packed.size() * sizeof(int32_t)));
    HP_TRY(backend_->memset(logits, 0xff, logits_bytes));  // all-ones bits: NaN
    if (counts_new) HP_TRY(backend_->upload(counts, expert_counts_.data(), counts_bytes));
    hp_batch device_batch = batch;
    device_batch.token_ids = ints + offsets[0];
    device_batch.positions = ints + offsets[1];
    device_batch.seq_token_start = ints + offsets[2];
    device_batch.block_tables = ints + offsets[3];
    device_batch.logit_rows = ints + offsets[4];
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
