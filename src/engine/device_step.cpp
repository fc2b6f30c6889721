#include "hotpass/engine/device_step.h"

#include <algorithm>

#include "hotpass/core/hash.h"

namespace hp::engine {

Result<DeviceWeights> place_weights(backend::Backend &backend, const model::Model &model, int n_layer,
                                    const model::SyntheticOptions &synthetic) {
    const auto aligned = [](uint64_t bytes) { return (bytes + 255) / 256 * 256; };
    DeviceWeights weights;
    for (const model::TensorView &tensor : model.tensors) {
        if (tensor.spec.layer < n_layer) weights.bytes += aligned(tensor.n_byte);
    }
    weights.arena = backend.alloc(std::max<uint64_t>(weights.bytes, 1), 256);
    if (!weights.arena) return error("out of device memory placing {:.2f} GB of weights", double(weights.bytes) / 1e9);
    auto fail = [&](std::string message) -> Result<DeviceWeights> {
        backend.free(weights.arena);
        return Error{std::move(message)};
    };
    uint64_t offset = 0;
    for (const model::TensorView &tensor : model.tensors) {
        if (tensor.spec.layer >= n_layer) {
            weights.tensor_data.push_back(nullptr);
            continue;
        }
        void *dst = static_cast<char *>(weights.arena) + offset;
        offset += aligned(tensor.n_byte);
        weights.tensor_data.push_back(dst);
        if (tensor.data) {
            if (Status status = backend.upload(dst, tensor.data, tensor.n_byte); !status.ok()) return fail(status.error());
            continue;
        }
        if (!model.source.starts_with("preset:")) return fail(fmt::format("tensor {} has no data and the model is no preset", tensor.spec.name));
        float mean = 0.0f, std = model.config.initializer_range;
        if (tensor.spec.is_norm()) {
            mean = 1.0f;
            std = synthetic.norm_std;
        } else if (tensor.spec.is_bias()) {
            std = synthetic.bias_std;
        }
        const uint64_t key = hash64(tensor.spec.name, synthetic.seed);
        if (Status status = backend.fill_normal(dst, tensor.dtype, tensor.n_element(), key, mean, std); !status.ok()) {
            return fail(status.error());
        }
    }
    return weights;
}

DeviceBuffers::~DeviceBuffers() {
    for (auto &[ptr, bytes] : buffers_) backend_.free(ptr);
}

void *DeviceBuffers::get(size_t index, size_t bytes) {
    if (buffers_.size() <= index) buffers_.resize(index + 1, {nullptr, 0});
    auto &[ptr, capacity] = buffers_[index];
    if (capacity < bytes) {
        backend_.free(ptr);
        capacity = std::max(bytes, 2 * capacity);
        ptr = backend_.alloc(capacity, 256);
        if (!ptr) capacity = 0;
    }
    return ptr;
}

PackedBatch pack_batch(const hp_batch &batch) {
    PackedBatch packed;
    const std::pair<const int32_t *, size_t> arrays[5] = {
        {batch.token_ids, size_t(batch.n_token)},
        {batch.positions, size_t(batch.n_token)},
        {batch.seq_token_start, size_t(batch.n_seq) + 1},
        {batch.block_tables, size_t(batch.n_seq) * size_t(batch.max_blocks_per_seq)},
        {batch.logit_rows, size_t(batch.n_logit_row)}};
    for (size_t i = 0; i < 5; ++i) {
        packed.offsets[i] = packed.ints.size();
        packed.ints.insert(packed.ints.end(), arrays[i].first, arrays[i].first + arrays[i].second);
    }
    return packed;
}

hp_batch device_batch_view(const hp_batch &batch, const PackedBatch &packed, const int32_t *device_ints) {
    hp_batch view = batch;
    view.token_ids = device_ints + packed.offsets[0];
    view.positions = device_ints + packed.offsets[1];
    view.seq_token_start = device_ints + packed.offsets[2];
    view.block_tables = device_ints + packed.offsets[3];
    view.logit_rows = device_ints + packed.offsets[4];
    return view;
}

}  // namespace hp::engine
