// PluginRig: drives one forward-pass plugin directly on an Engine's device weights and KV cache,
// with batches the caller builds (its own block tables) in fixed device buffers, eagerly or as a
// captured CUDA graph replayed with new inputs. For GPU tests and bench/gpu; needs the CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "hotpass/backend/cuda_check.h"
#include "hotpass/engine/engine.h"

namespace hp::gpu_test {

// One step's batch on the host. Block tables are [n_seq][max_blocks].
struct HostBatch {
    std::vector<int32_t> token_ids, positions, seq_start{0}, block_tables, logit_rows;
    int max_blocks = 1;

    // Appends a sequence of `tokens` starting at `start_position` with KV blocks `blocks`.
    void add(const std::vector<int32_t> &tokens, int start_position, const std::vector<int32_t> &blocks, bool all_logits) {
        const int first = int(token_ids.size());
        for (size_t t = 0; t < tokens.size(); ++t) {
            token_ids.push_back(tokens[t]);
            positions.push_back(start_position + int(t));
            if (all_logits || t + 1 == tokens.size()) logit_rows.push_back(first + int(t));
        }
        seq_start.push_back(int32_t(token_ids.size()));
        std::vector<int32_t> row = blocks;
        row.resize(size_t(max_blocks), -1);
        block_tables.insert(block_tables.end(), row.begin(), row.end());
    }
};

class PluginRig {
public:
    // Opens `forward` (in-tree name or path) for CUDA and creates it on the engine's model.
    static Result<std::unique_ptr<PluginRig>> create(engine::Engine &engine, const std::string &forward) {
        auto path = engine::resolve_forward(forward, HP_DEVICE_CUDA);
        if (!path.ok()) return Error{path.error()};
        auto plugin = engine::ForwardPlugin::open(*path);
        if (!plugin.ok()) return Error{plugin.error()};
        std::unique_ptr<PluginRig> rig(new PluginRig(engine));
        rig->plugin_ = std::move(plugin).value();
        HP_TRY(rig->plugin_->create(&engine.abi_model(), 1, &engine.device()));
        return rig;
    }
    ~PluginRig() {
        if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
        if (graph_) cudaGraphDestroy(graph_);
        plugin_.reset();
        for (void *ptr : buffers_) engine_.device().free(ptr);
    }

    // One eager step; returns the logits [n_logit_row][n_vocab].
    Result<std::vector<float>> run(const HostBatch &batch) {
        HP_TRY(stage(batch));
        HP_TRY(plugin_->forward(device_batch_, device_out_));
        return logits();
    }
    // Captures one step of this shape into a CUDA graph (inputs staged, nothing executed).
    Status capture(const HostBatch &batch) {
        HP_TRY(stage(batch));
        auto stream = static_cast<cudaStream_t>(engine_.device().stream());
        HP_TRY(backend::cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture"));
        Status status = plugin_->forward(device_batch_, device_out_);
        const cudaError_t end = cudaStreamEndCapture(stream, &graph_);
        HP_TRY(status);
        HP_TRY(backend::cuda_status(end, "end capture"));
        return backend::cuda_status(cudaGraphInstantiate(&graph_exec_, graph_, 0), "graph instantiate");
    }
    // Stages `batch` (same shape as captured) and replays the graph; download=false leaves the
    // logits on the device (for timing).
    Status replay(const HostBatch &batch) {
        HP_TRY(stage(batch));
        return launch();
    }
    Status launch() {
        return backend::cuda_status(cudaGraphLaunch(graph_exec_, static_cast<cudaStream_t>(engine_.device().stream())), "graph launch");
    }
    // The captured step (null before capture()); bench/gpu times its kernels by kind.
    cudaGraph_t graph() const { return graph_; }
    // Routed-expert picks [n_layer][n_expert] summed over every step this rig ran (MoE models; empty otherwise).
    Result<std::vector<int32_t>> expert_counts() {
        std::vector<int32_t> host;
        if (!device_out_.expert_counts) return host;
        host.resize(size_t(engine_.abi_model().config.n_layer) * size_t(engine_.config().n_expert));
        HP_TRY(engine_.device().download(host.data(), device_out_.expert_counts, host.size() * sizeof(int32_t)));
        return host;
    }
    Result<std::vector<float>> logits() {
        std::vector<float> host(logit_floats_);
        HP_TRY(engine_.device().download(host.data(), device_out_.logits, host.size() * sizeof(float)));
        return host;
    }

private:
    explicit PluginRig(engine::Engine &engine) : engine_(engine) {}

    // Uploads the arrays into buffers that keep their addresses while the shape stays the same.
    Status stage(const HostBatch &batch) {
        const int n_vocab = engine_.config().n_vocab;
        std::vector<int32_t> packed;
        size_t offsets[5];
        const std::vector<int32_t> *arrays[5] = {&batch.token_ids, &batch.positions, &batch.seq_start, &batch.block_tables, &batch.logit_rows};
        for (size_t i = 0; i < 5; ++i) {
            offsets[i] = packed.size();
            packed.insert(packed.end(), arrays[i]->begin(), arrays[i]->end());
        }
        if (packed.size() > int_capacity_ || batch.logit_rows.size() * size_t(n_vocab) > logit_capacity_) {
            HP_CHECK(graph_exec_ == nullptr, "a captured rig was given a larger batch");
            ints_ = static_cast<int32_t *>(grow(packed.size() * sizeof(int32_t)));
            int_capacity_ = packed.size();
            device_out_.logits = static_cast<float *>(grow(batch.logit_rows.size() * size_t(n_vocab) * sizeof(float)));
            logit_capacity_ = batch.logit_rows.size() * size_t(n_vocab);
            if (engine_.config().is_moe()) {
                device_out_.expert_counts = static_cast<int32_t *>(
                    grow(size_t(engine_.abi_model().config.n_layer) * size_t(engine_.config().n_expert) * sizeof(int32_t)));
            }
        }
        logit_floats_ = batch.logit_rows.size() * size_t(n_vocab);
        HP_TRY(engine_.device().upload(ints_, packed.data(), packed.size() * sizeof(int32_t)));
        HP_TRY(engine_.device().memset(device_out_.logits, 0xff, logit_floats_ * sizeof(float)));
        device_batch_ = hp_batch{};
        device_batch_.n_token = int32_t(batch.token_ids.size());
        device_batch_.token_ids = ints_ + offsets[0];
        device_batch_.positions = ints_ + offsets[1];
        device_batch_.n_seq = int32_t(batch.seq_start.size() - 1);
        device_batch_.seq_token_start = ints_ + offsets[2];
        device_batch_.block_tables = ints_ + offsets[3];
        device_batch_.max_blocks_per_seq = batch.max_blocks;
        device_batch_.n_logit_row = int32_t(batch.logit_rows.size());
        device_batch_.logit_rows = ints_ + offsets[4];
        return Status::success();
    }
    void *grow(size_t bytes) {
        void *ptr = engine_.device().alloc(bytes, 256);
        HP_CHECK(ptr != nullptr, "rig: out of device memory for {} bytes", bytes);
        buffers_.push_back(ptr);
        return ptr;
    }

    engine::Engine &engine_;
    std::unique_ptr<engine::ForwardPlugin> plugin_;
    std::vector<void *> buffers_;
    int32_t *ints_ = nullptr;
    size_t int_capacity_ = 0, logit_capacity_ = 0, logit_floats_ = 0;
    hp_batch device_batch_{};
    hp_output device_out_{};
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t graph_exec_ = nullptr;
};

// max |a - b| and max |b| over two equally long vectors (b the reference). NaN counts as infinite.
struct Difference {
    double max_delta = 0, max_ref = 0;
};
inline Difference compare(const std::vector<float> &a, const std::vector<float> &b) {
    Difference d;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const double delta = std::fabs(double(a[i]) - double(b[i]));
        d.max_delta = std::max(d.max_delta, std::isfinite(delta) ? delta : INFINITY);
        d.max_ref = std::max(d.max_ref, std::fabs(double(b[i])));
    }
    if (a.size() != b.size()) d.max_delta = INFINITY;
    return d;
}

// Rows [n][n_vocab] of a whose max |a - b| exceeds tolerance * max|b| over all of b.
inline int outlier_rows(const std::vector<float> &a, const std::vector<float> &b, int n_vocab, double tolerance) {
    const double bound = tolerance * compare(a, b).max_ref;
    int outliers = 0;
    for (size_t row = 0; row * size_t(n_vocab) < b.size(); ++row) {
        const std::vector<float> ra(a.begin() + row * n_vocab, a.begin() + (row + 1) * n_vocab);
        const std::vector<float> rb(b.begin() + row * n_vocab, b.begin() + (row + 1) * n_vocab);
        outliers += compare(ra, rb).max_delta > bound;
    }
    return outliers;
}

}  // namespace hp::gpu_test
