// What the engine and the executor share to run a forward pass on a device (CUDA): the weights
// placed once in device memory, grow-only device buffers, and a step's batch arrays packed into
// one device buffer. On the CPU none of this is used: plugins get host pointers.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "hotpass/backend/backend.h"
#include "hotpass/core/result.h"
#include "hotpass/forward_abi.h"
#include "hotpass/model/model.h"
#include "hotpass/model/synthetic.h"

namespace hp::engine {

// Every weight of the first n_layer layers (plus embeddings, final norm, lm_head) in one device
// allocation: uploaded as stored, or, for a model with no host memory (preset_shell), generated
// there with model::synthesize_tensor's recipe. tensor_data[i] is model.tensors[i]'s device
// address (nullptr for layers past n_layer). The arena is freed with backend.free().
struct DeviceWeights {
    void *arena = nullptr;
    uint64_t bytes = 0;
    std::vector<const void *> tensor_data;
};
Result<DeviceWeights> place_weights(backend::Backend &backend, const model::Model &model, int n_layer,
                                    const model::SyntheticOptions &synthetic);

// Device buffers by index, grown (never shrunk) on demand and freed with the object. A buffer
// keeps its address while it is large enough, so a captured graph may refer to it.
class DeviceBuffers {
public:
    explicit DeviceBuffers(backend::Backend &backend) : backend_(backend) {}
    ~DeviceBuffers();
    DeviceBuffers(const DeviceBuffers &) = delete;
    DeviceBuffers &operator=(const DeviceBuffers &) = delete;
    // nullptr when out of memory.
    void *get(size_t index, size_t bytes);

private:
    backend::Backend &backend_;
    std::vector<std::pair<void *, size_t>> buffers_;
};

// The five int arrays of a batch (token ids, positions, sequence starts, block tables, logit
// rows) packed back to back, and the batch re-pointed at a device copy of them.
struct PackedBatch {
    std::vector<int32_t> ints;
    size_t offsets[5] = {};
};
PackedBatch pack_batch(const hp_batch &batch);
hp_batch device_batch_view(const hp_batch &batch, const PackedBatch &packed, const int32_t *device_ints);

}  // namespace hp::engine
