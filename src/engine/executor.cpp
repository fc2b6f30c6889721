// The executor process: start-up (weights, KV cache, plugins, warm-up), the RPC loop, and the
// plugin-call primitive the verifier and the timer share.
#include "hotpass/engine/executor.h"

#include <dirent.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include "executor_state.h"
#include "hotpass/core/clock.h"
#include "hotpass/core/dtype.h"
#include "hotpass/core/hash.h"
#include "hotpass/core/json_text.h"
#include "hotpass/engine/rpc.h"
#include "hotpass/engine/sandbox.h"

namespace hp::engine {

using nlohmann::json;

uint64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    uint64_t pages_total = 0, pages_resident = 0;
    statm >> pages_total >> pages_resident;
    return pages_resident * uint64_t(sysconf(_SC_PAGE_SIZE));
}

int thread_count() {
    int count = 0;
    if (DIR *dir = opendir("/proc/self/task")) {
        while (dirent *entry = readdir(dir)) count += entry->d_name[0] != '.';
        closedir(dir);
    }
    return count;
}

bool allocate_blocks(ExecutorState &state, std::vector<TrialSequence> &sequences) {
    const int block_tokens = state.kv->block_tokens();
    for (TrialSequence &sequence : sequences) {
        const int length = int(sequence.history.size() + sequence.tokens.size());
        while (int(sequence.blocks.size()) * block_tokens < length) {
            const int block = state.kv->allocate_block();
            if (block < 0) {
                release_blocks(state, sequences);
                return false;
            }
            sequence.blocks.push_back(block);
        }
    }
    return true;
}

void release_blocks(ExecutorState &state, std::vector<TrialSequence> &sequences) {
    for (TrialSequence &sequence : sequences) {
        for (int32_t block : sequence.blocks) state.kv->release_block(block);
        sequence.blocks.clear();
    }
}

namespace {

constexpr size_t kCanaryFloats = 256;
constexpr uint32_t kCanaryBits = 0x7fa5a5a5u;  // NaN payloads no arithmetic produces

uint64_t batch_hash(const hp_batch &batch) {
    uint64_t h = hash64(batch.token_ids, sizeof(int32_t) * size_t(batch.n_token));
    h = hash64(batch.positions, sizeof(int32_t) * size_t(batch.n_token), h);
    h = hash64(batch.seq_token_start, sizeof(int32_t) * size_t(batch.n_seq + 1), h);
    h = hash64(batch.block_tables, sizeof(int32_t) * size_t(batch.n_seq) * size_t(batch.max_blocks_per_seq), h);
    return hash64(batch.logit_rows, sizeof(int32_t) * size_t(batch.n_logit_row), h);
}

}  // namespace

ExecutorState::~ExecutorState() {
    // Graphs first (they refer to the plugins' kernels), then the plugins (their code), then the
    // memory they ran over; the backend (the CUDA context) goes last.
    candidate_graphs.clear();
    incumbent_graphs.clear();
    candidate.reset();
    incumbent.reset();
    reference.reset();
    binding.reset();
    kv.reset();
    buffers.reset();
    if (backend && device_weights.arena) backend->free(device_weights.arena);
}

size_t kv_block_bytes(const ExecutorState &state) {
    const hp_kv_cache &kv = *state.abi().kv;
    return size_t(kv.block_tokens) * size_t(state.abi().config.n_head_kv) * size_t(state.abi().config.d_head) *
           dtype_size(DType(kv.dtype));
}

void check_device_weights(ExecutorState &state, const char *during) {
    if (!state.on_cuda()) return;  // the CPU's weights are read-only mappings (sandbox.h)
    auto sum = state.backend->checksum(state.device_weights.arena, state.device_weights.bytes);
    if (!sum.ok()) throw DeviceFault(sum.error());
    if (*sum != state.weights_checksum) {
        std::fprintf(stderr, "hotpass-executor: the device weights changed during %s (checksum %016llx, was %016llx)\n", during,
                     static_cast<unsigned long long>(*sum), static_cast<unsigned long long>(state.weights_checksum));
        std::fflush(stderr);
        _exit(kExitWroteWeights);
    }
}

// The model description plugins share (hp_model, its layers and tensor records, the KV cache's
// view) is plain memory of this process: a candidate that wrote it would change what the reference
// and every later candidate compute. Compared after every request; a change ends the executor as
// a weight write does (the description is part of the model).
void check_model_description(const ExecutorState &state, const char *during) {
    if (state.binding->fingerprint() == state.model_fingerprint) return;
    std::fprintf(stderr, "hotpass-executor: the model description (hp_model) changed during %s\n", during);
    std::fflush(stderr);
    _exit(kExitWroteWeights);
}

CallReport call_plugin(ExecutorState &state, ForwardPlugin &plugin, const std::vector<TrialSequence> &sequences,
                       BatchBuilder &builder) {
    builder.clear();
    for (const TrialSequence &sequence : sequences) {
        builder.add(BatchSequence{sequence.blocks, int(sequence.history.size()), sequence.tokens, sequence.all_logits});
    }
    const hp_batch &batch = builder.finish();
    const size_t n_logit = size_t(batch.n_logit_row) * size_t(state.n_vocab());
    // Logits poisoned with a marked NaN (so an unwritten element is told apart from a computed
    // NaN), fenced by canaries on both sides.
    float poison, canary;
    std::memcpy(&poison, &kPoisonBits, sizeof poison);
    std::memcpy(&canary, &kCanaryBits, sizeof canary);
    std::vector<float> buffer(n_logit + 2 * kCanaryFloats, poison);
    std::fill(buffer.begin(), buffer.begin() + kCanaryFloats, canary);
    std::fill(buffer.end() - kCanaryFloats, buffer.end(), canary);
    CallReport report;
    hp_output out{};
    Status status = Status::success();
    if (!state.on_cuda()) {
        const uint64_t inputs_before = batch_hash(batch);
        out.logits = buffer.data() + kCanaryFloats;
        const double start = now_seconds();
        status = plugin.forward(batch, out);
        report.seconds = now_seconds() - start;
        report.inputs_intact = batch_hash(batch) == inputs_before;
    } else {
        // The same on the device: batch arrays and fenced logits in device buffers; the host
        // clock runs to a whole-device synchronize, so work left on another stream is counted.
        const PackedBatch packed = pack_batch(batch);
        const size_t ints_bytes = std::max<size_t>(packed.ints.size(), 1) * sizeof(int32_t);
        auto *ints = static_cast<int32_t *>(state.buffers->get(0, ints_bytes));
        auto *logits = static_cast<float *>(state.buffers->get(1, buffer.size() * sizeof(float)));
        if (!ints || !logits) throw std::runtime_error(fmt::format("out of device memory for a step of {} tokens", batch.n_token));
        auto checked = [](Status step) {
            if (!step.ok()) throw DeviceFault(step.error());
        };
        checked(state.backend->upload(ints, packed.ints.data(), packed.ints.size() * sizeof(int32_t)));
        checked(state.backend->upload(logits, buffer.data(), buffer.size() * sizeof(float)));
        const hp_batch device_batch = device_batch_view(batch, packed, ints);
        out.logits = logits + kCanaryFloats;
        const double start = now_seconds();
        status = plugin.forward(device_batch, out);
        checked(state.backend->synchronize_device());
        report.seconds = now_seconds() - start;
        std::vector<int32_t> after(packed.ints.size());
        checked(state.backend->download(after.data(), ints, after.size() * sizeof(int32_t)));
        report.inputs_intact = after == packed.ints;
        checked(state.backend->download(buffer.data(), logits, buffer.size() * sizeof(float)));
    }
    if (!status.ok()) report.error = status.error();
    for (size_t i = 0; i < kCanaryFloats; ++i) {
        uint32_t before_bits, after_bits;
        std::memcpy(&before_bits, &buffer[i], 4);
        std::memcpy(&after_bits, &buffer[buffer.size() - 1 - i], 4);
        if (before_bits != kCanaryBits || after_bits != kCanaryBits) report.canary_intact = false;
    }
    report.logits.assign(buffer.begin() + kCanaryFloats, buffer.end() - kCanaryFloats);
    return report;
}

namespace {

// Best-of-3 read bandwidth over a buffer well beyond the last-level cache, with n_thread threads.
double measure_read_bandwidth_gbs(int n_thread) {
    const size_t n = size_t(256) << 20 >> 3;  // 256 MiB of uint64
    std::vector<uint64_t> data(n, 1);
    double best = 0;
    for (int trial = 0; trial < 3; ++trial) {
        std::vector<uint64_t> sums(size_t(n_thread), 0);
        const double start = now_seconds();
        std::vector<std::thread> workers;
        for (int t = 0; t < n_thread; ++t) {
            workers.emplace_back([&, t] {
                uint64_t sum = 0;
                const size_t begin = n * size_t(t) / size_t(n_thread), end = n * size_t(t + 1) / size_t(n_thread);
                for (size_t i = begin; i < end; ++i) sum += data[i];
                sums[size_t(t)] = sum;
            });
        }
        for (auto &worker : workers) worker.join();
        const double seconds = now_seconds() - start;
        if (sums[0] == 0) return 0;  // keeps the loop from being optimised away
        best = std::max(best, double(n * 8) / seconds / 1e9);
    }
    return best;
}

// Device-to-device copy bandwidth (bytes read + written, best of 5 copies of 512 MiB), the
// convention of the CUDA roofline (docs/cuda.md).
Result<double> measure_device_bandwidth_gbs(backend::Backend &backend) {
    const size_t bytes = size_t(512) << 20;
    DeviceBuffers buffers(backend);
    void *from = buffers.get(0, bytes), *to = buffers.get(1, bytes);
    if (!from || !to) return error("out of device memory for the bandwidth probe");
    auto timer = backend.create_timer();
    double best = 0;
    for (int trial = 0; trial < 5; ++trial) {
        timer->start();
        HP_TRY(backend.copy(to, from, bytes));
        timer->stop();
        auto ms = timer->elapsed_ms();
        if (!ms.ok()) return Error{ms.error()};
        if (*ms > 0) best = std::max(best, 2.0 * double(bytes) / (*ms * 1e-3) / 1e9);
    }
    return best;
}

Result<std::unique_ptr<ForwardPlugin>> open_plugin(ExecutorState &state, const std::string &name_or_path) {
    auto path = resolve_forward(name_or_path, state.on_cuda() ? HP_DEVICE_CUDA : HP_DEVICE_CPU);
    if (!path.ok()) return Error{path.error()};
    auto plugin = ForwardPlugin::open(*path);
    if (!plugin.ok()) return Error{plugin.error()};
    HP_TRY((*plugin)->create(&state.abi(), state.options.n_thread, state.on_cuda() ? state.backend.get() : nullptr));
    return plugin;
}

Result<std::unique_ptr<ExecutorState>> start_executor(const ExecutorOptions &options) {
    if (options.n_thread < 1) return error("--threads must be at least 1, got {}", options.n_thread);
    auto state = std::make_unique<ExecutorState>();
    state->options = options;
    double phase = now_seconds();
    auto lap = [&](const char *name) {
        const double now = now_seconds();
        state->startup[name] = now - phase;
        phase = now;
    };
    auto backend = backend::create_backend(options.device, options.device_index);
    if (!backend.ok()) return Error{backend.error()};
    state->backend = std::move(backend).value();
    const bool on_cuda = state->on_cuda();
    lap("context_seconds");
    model::SyntheticOptions synthetic;
    synthetic.seed = options.seed;
    // On CUDA a preset needs no host copy: its weights are generated on the device.
    auto model = on_cuda && options.model.starts_with("preset:") ? preset_shell(options.model, DType::bf16)
                                                                 : model::open_model(options.model, synthetic);
    if (!model.ok()) return Error{model.error()};
    state->model = std::move(model).value();
    const int n_layer = options.n_layer > 0 ? std::min(options.n_layer, state->model.config.n_layer) : state->model.config.n_layer;
    std::vector<const void *> tensor_data;
    if (on_cuda) {
        auto weights = place_weights(*state->backend, state->model, n_layer, synthetic);
        if (!weights.ok()) return Error{weights.error()};
        state->device_weights = std::move(weights).value();
        tensor_data = state->device_weights.tensor_data;
        state->buffers = std::make_unique<DeviceBuffers>(*state->backend);
    }
    lap("weights_seconds");
    auto kv = KvCache::create(n_layer, state->model.config.n_head_kv, state->model.config.d_head, options.kv,
                              on_cuda ? state->backend.get() : nullptr);
    if (!kv.ok()) return Error{kv.error()};
    state->kv = std::move(kv).value();
    auto binding = ModelBinding::create(state->model, *state->kv, n_layer, on_cuda ? HP_DEVICE_CUDA : HP_DEVICE_CPU, tensor_data);
    if (!binding.ok()) return Error{binding.error()};
    state->binding = std::move(binding).value();
    state->model_fingerprint = state->binding->fingerprint();
    lap("kv_cache_seconds");
    auto reference = open_plugin(*state, options.reference);
    if (!reference.ok()) return error("reference plugin: {}", reference.error());
    state->reference = std::move(reference).value();
    auto incumbent = open_plugin(*state, options.incumbent);
    if (!incumbent.ok()) return error("incumbent plugin: {}", incumbent.error());
    state->incumbent = std::move(incumbent).value();
    lap("plugins_seconds");

    // Warm-up: one small step through each plugin (first-touch of the weights' pages).
    std::vector<TrialSequence> warm(1);
    warm[0].tokens = {1, 2, 3, 4};
    if (!allocate_blocks(*state, warm)) return error("the KV cache is too small for a 4-token warm-up");
    for (ForwardPlugin *plugin : {state->reference.get(), state->incumbent.get()}) {
        BatchBuilder builder;
        CallReport report = call_plugin(*state, *plugin, warm, builder);
        if (!report.error.empty()) return error("warm-up failed: {}", report.error);
    }
    release_blocks(*state, warm);
    lap("warmup_seconds");
    if (on_cuda) {
        auto sum = state->backend->checksum(state->device_weights.arena, state->device_weights.bytes);
        if (!sum.ok()) return Error{sum.error()};
        state->weights_checksum = *sum;
        lap("weights_checksum_seconds");
        auto bandwidth = measure_device_bandwidth_gbs(*state->backend);
        if (!bandwidth.ok()) return Error{bandwidth.error()};
        state->read_bandwidth_gbs = *bandwidth;
    } else {
        state->read_bandwidth_gbs = measure_read_bandwidth_gbs(options.n_thread);
    }
    lap("bandwidth_probe_seconds");

    state->bytes_per_decode_step = model::bytes_read_per_token(state->model, n_layer);
    return state;
}

json status_json(const ExecutorState &state) {
    return {{"model", state.options.model},
            {"device", std::string(backend::device_name(state.options.device))},
            {"device_name", state.backend->info().name},
            {"persisting_l2_bytes", state.backend->info().persisting_l2_bytes},
            {"architecture", std::string(model::architecture_hf_name(state.model.config.arch))},
            {"n_layer", state.abi().config.n_layer},
            {"n_layer_model", state.model.config.n_layer},
            {"n_vocab", state.n_vocab()},
            {"candidate", state.candidate ? json(state.candidate_path) : json()},
            {"reference", state.reference->path().string()},
            {"incumbent", state.incumbent->path().string()},
            {"n_load", state.n_load},
            {"max_loads", state.options.max_loads},
            {"weight_bytes", state.model.n_byte()},
            {"bytes_per_decode_step", state.bytes_per_decode_step},
            {"kv_bytes", state.kv->n_byte()},
            {"kv_blocks_free", state.kv->n_free_block()},
            {"read_bandwidth_gbs", state.read_bandwidth_gbs},
            {"resident_bytes", resident_bytes()},
            {"threads", thread_count()},
            {"startup", state.startup},
            {"pid", getpid()}};
}

// Handles one request; returns the reply. Sets `stop` when the executor should exit after replying.
json handle(ExecutorState &state, const json &request, bool &stop) {
    const std::string method = request.value("method", "");
    const json params = request.value("params", json::object());
    if (method == "status") return status_json(state);
    if (method == "shutdown") {
        stop = true;
        return json::object();
    }
    if (method == "load") {
        if (state.candidate) throw std::runtime_error("a candidate is already loaded: unload it first");
        if (!params.contains("path") || !params["path"].is_string()) throw std::runtime_error("load needs params.path");
        const std::string path = params["path"];
        state.threads_before_load = thread_count();
        const double start = now_seconds();
        auto plugin = ForwardPlugin::open(path);
        if (!plugin.ok()) throw std::runtime_error(plugin.error());
        if (Status status = (*plugin)->create(&state.abi(), state.options.n_thread, state.on_cuda() ? state.backend.get() : nullptr);
            !status.ok()) {
            if (state.on_cuda()) {  // a create() that faulted the device leaves nothing usable
                if (Status device = state.backend->synchronize_device(); !device.ok()) throw DeviceFault(device.error());
            }
            throw std::runtime_error(status.error());
        }
        if (state.on_cuda()) {
            if (Status device = state.backend->synchronize_device(); !device.ok()) throw DeviceFault(device.error());
        }
        state.candidate = std::move(plugin).value();
        state.candidate_path = path;
        ++state.n_load;
        return {{"name", std::string(state.candidate->name())}, {"load_seconds", now_seconds() - start}};
    }
    if (method == "unload") {
        if (!state.candidate) throw std::runtime_error("no candidate is loaded");
        const size_t private_bytes = state.candidate->private_bytes();
        state.candidate_graphs.clear();  // before the code they launch is unloaded
        state.candidate.reset();
        state.candidate_path.clear();
        const int threads_after = thread_count();
        const bool recycle = state.n_load >= state.options.max_loads;
        stop = recycle;
        return {{"threads_before_load", state.threads_before_load},
                {"threads_after_unload", threads_after},
                {"private_bytes_at_unload", private_bytes},
                {"recycle", recycle}};
    }
    if (method == "verify") {
        if (!state.candidate) throw std::runtime_error("verify needs a loaded candidate");
        json result = run_verify(state, *state.candidate, params);
        check_device_weights(state, "verification");
        return result;
    }
    if (method == "measure") {
        if (!state.candidate) throw std::runtime_error("measure needs a loaded candidate");
        json result = run_measure(state, params);
        check_device_weights(state, "timing");
        return result;
    }
    throw std::runtime_error("unknown method '" + method + "' (status, load, unload, verify, measure, shutdown)");
}

std::string method_of(const json &request) { return request.value("method", std::string("?")); }

}  // namespace

int run_executor(const ExecutorOptions &options) {
    const double start = now_seconds();
    auto state = start_executor(options);
    if (!state.ok()) {
        std::fprintf(stderr, "hotpass-executor: start-up failed: %s\n", state.error().c_str());
        return 1;
    }
    (*state)->startup["total_seconds"] = now_seconds() - start;
    auto listener = listen_unix(options.socket);
    if (!listener.ok()) {
        std::fprintf(stderr, "hotpass-executor: %s\n", listener.error().c_str());
        return 1;
    }
    spdlog::info("executor ready on {} in {:.2f} s", options.socket.string(), now_seconds() - start);
    // One client (the supervisor) per executor lifetime: accept it, close the listener, then
    // lock the process down before any candidate code runs.
    const int client = accept4(*listener, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(*listener);
    ::unlink(options.socket.c_str());
    if (client < 0) {
        std::fprintf(stderr, "hotpass-executor: accept failed: %s\n", std::strerror(errno));
        return 1;
    }
    LineChannel channel(client);
    if (options.sandbox) {
        std::vector<std::pair<const void *, size_t>> weights;
        for (const auto &tensor : (*state)->model.tensors) {
            if (tensor.data) weights.emplace_back(tensor.data, tensor.n_byte);  // host mappings (none for a CUDA preset)
        }
        install_fault_handlers(std::move(weights));
        if (Status status = install_seccomp_filter(); !status.ok()) {
            std::fprintf(stderr, "hotpass-executor: %s\n", status.error().c_str());
            return 1;
        }
    }
    bool stop = false;
    while (!stop) {
        auto line = channel.read_line(-1);
        if (!line.ok()) return 0;  // the supervisor went away
        json reply;
        json request = json::parse(*line, nullptr, false);
        if (request.is_discarded() || !request.is_object()) {
            reply = {{"id", nullptr}, {"ok", false}, {"error", "malformed request: expected one JSON object per line"}};
        } else {
            reply["id"] = request.value("id", json());
            try {
                reply["result"] = handle(**state, request, stop);
                reply["ok"] = true;
            } catch (const DeviceFault &fault) {
                // Nothing can run in a poisoned context: say why and exit; the supervisor
                // restarts the executor and the verdict is device_fault.
                std::fprintf(stderr, "hotpass-executor: device fault during %s: %s\n", method_of(request).c_str(), fault.what());
                std::fflush(stderr);
                _exit(kExitDeviceFault);
            } catch (const std::exception &failure) {
                reply["ok"] = false;
                reply["error"] = failure.what();
            }
            check_model_description(**state, method_of(request).c_str());  // after a failed request too: a failed create() may have written it
        }
        if (!channel.write_line(json_text(reply)).ok()) return 0;
    }
    return 0;
}

}  // namespace hp::engine
