// GPU decode benchmark: the CUDA baseline's decode tokens/s on a preset (weights generated on the
// device) at several batch sizes with a fixed KV length per sequence, each step replayed as one
// CUDA graph and timed with events; the device-to-device copy bandwidth measured in the same run;
// the bytes each step must read (weights + KV; for MoE the experts the routing touched) over that
// bandwidth as the roofline; executor-style
// start -> ready per phase. Prints one JSON object (for write_results.py) and a short table.
#include <CLI/CLI.hpp>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include "../../tests/gpu/gpu_rig.h"
#include "cupti_trace.h"
#include "timeline.h"
#include "hotpass/model/model.h"

namespace hp {
namespace {

struct Stats {
    double median = 0, p10 = 0, p90 = 0, min = 0;
};
Stats stats_of(std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    auto at = [&](double q) { return samples[size_t(q * double(samples.size() - 1) + 0.5)]; };
    return {at(0.5), at(0.1), at(0.9), samples.front()};
}

// Device-to-device copy bandwidth, bytes read + written per second (median of reps).
double copy_bandwidth(backend::Backend &device, size_t bytes, int reps) {
    void *a = device.alloc(bytes, 256), *b = device.alloc(bytes, 256);
    HP_CHECK(a && b, "copy buffers");
    auto stream = static_cast<cudaStream_t>(device.stream());
    auto timer = device.create_timer();
    std::vector<double> ms;
    for (int r = 0; r < reps + 3; ++r) {
        timer->start();
        HP_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        timer->stop();
        if (r >= 3) ms.push_back(*timer->elapsed_ms());
    }
    device.free(a);
    device.free(b);
    return 2.0 * double(bytes) / (stats_of(ms).median * 1e-3);
}

// A kernel's name without its namespace and argument list: "gemv_kernel<1, 0, true>".
std::string short_kernel_name(const char *mangled) {
    if (!mangled) return "?";
    int status = 1;
    char *demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? demangled : mangled;
    std::free(demangled);
    if (name.rfind("void ", 0) == 0) name = name.substr(5);
    int depth = 0;
    size_t cut = name.size(), start = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '<') ++depth;
        if (name[i] == '>') --depth;
        if (depth == 0 && name[i] == '(') {
            cut = i;
            break;
        }
        if (depth == 0 && name[i] == ':' && i + 1 < name.size() && name[i + 1] == ':') start = i + 2;
    }
    name = name.substr(start, cut - start);
    return name.size() > 72 ? name.substr(0, 72) : name;
}
std::string kernel_name(const CUDA_KERNEL_NODE_PARAMS &params) {
    const char *mangled = nullptr;
    const CUresult got = params.func ? cuFuncGetName(&mangled, params.func) : cuKernelGetName(&mangled, params.kern);
    return got == CUDA_SUCCESS ? short_kernel_name(mangled) : "?";
}
std::string kind_key(const std::string &name, int x, int y, int z) { return fmt::format("{} grid {}x{}x{}", name, x, y, z); }

// Time per step of each kind of kernel in a captured step, without a profiler: the step's kernel
// nodes grouped by (kernel, grid), each group re-launched alone as a graph of its nodes in step
// order (every layer's weights, so caches hold what they hold in the step; cluster shapes kept,
// programmatic-launch overlap not) and timed with events, median of `reps` replays. Nodes of other
// kinds (memset, memcpy) are not counted.
struct KernelKind {
    std::string name;
    int nodes = 0;
    double ms = 0;
};
std::vector<KernelKind> kernel_breakdown(cudaGraph_t step, backend::Backend &device, int reps) {
    size_t n_node = 0;
    HP_CUDA_CHECK(cudaGraphGetNodes(step, nullptr, &n_node));
    std::vector<cudaGraphNode_t> nodes(n_node);
    HP_CUDA_CHECK(cudaGraphGetNodes(step, nodes.data(), &n_node));
    // A captured single-stream step is a chain: order the nodes by their dependencies.
    std::map<cudaGraphNode_t, size_t> depth;
    for (cudaGraphNode_t node : nodes) depth[node] = 0;
    for (size_t round = 0; round < n_node; ++round) {
        bool changed = false;
        for (cudaGraphNode_t node : nodes) {
            size_t n_dep = 0;  // edge data too: programmatic (PDL) edges refuse a query without it
            HP_CUDA_CHECK(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n_dep));
            std::vector<cudaGraphNode_t> deps(n_dep);
            std::vector<cudaGraphEdgeData> edges(n_dep);
            HP_CUDA_CHECK(cudaGraphNodeGetDependencies(node, deps.data(), edges.data(), &n_dep));
            for (cudaGraphNode_t dep : deps) {
                if (depth[node] < depth[dep] + 1) depth[node] = depth[dep] + 1, changed = true;
            }
        }
        if (!changed) break;
    }
    std::stable_sort(nodes.begin(), nodes.end(), [&](cudaGraphNode_t a, cudaGraphNode_t b) { return depth[a] < depth[b]; });
    std::vector<std::string> order;
    struct Launch {
        CUDA_KERNEL_NODE_PARAMS params;
        CUkernelNodeAttrValue cluster;  // thread-block cluster shape: a cluster kernel needs it to run
    };
    std::map<std::string, std::vector<Launch>> groups;
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type;
        HP_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeKernel) continue;
        CUDA_KERNEL_NODE_PARAMS params{};
        if (cuGraphKernelNodeGetParams(reinterpret_cast<CUgraphNode>(node), &params) != CUDA_SUCCESS) continue;
        const std::string key = kind_key(kernel_name(params), int(params.gridDimX), int(params.gridDimY), int(params.gridDimZ));
        Launch launch{params, {}};
        if (cuGraphKernelNodeGetAttribute(reinterpret_cast<CUgraphNode>(node), CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &launch.cluster) !=
            CUDA_SUCCESS) {
            launch.cluster.clusterDim.x = launch.cluster.clusterDim.y = launch.cluster.clusterDim.z = 0;
        }
        if (!groups.count(key)) order.push_back(key);
        groups[key].push_back(launch);
    }
    auto stream = static_cast<cudaStream_t>(device.stream());
    auto timer = device.create_timer();
    std::vector<KernelKind> kinds;
    for (const std::string &key : order) {
        CUgraph graph;
        HP_CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS, "cuGraphCreate");
        CUgraphNode previous = nullptr;
        for (const Launch &launch : groups[key]) {
            CUgraphNode node;
            HP_CHECK(cuGraphAddKernelNode(&node, graph, previous ? &previous : nullptr, previous ? 1 : 0, &launch.params) == CUDA_SUCCESS,
                     "cuGraphAddKernelNode");
            if (launch.cluster.clusterDim.x > 0) {
                HP_CHECK(cuGraphKernelNodeSetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &launch.cluster) == CUDA_SUCCESS,
                         "cluster dimension");
            }
            previous = node;
        }
        CUgraphExec exec;
        HP_CHECK(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS, "cuGraphInstantiate");
        std::vector<double> ms;
        for (int r = 0; r < reps + 3; ++r) {
            timer->start();
            HP_CHECK(cuGraphLaunch(exec, reinterpret_cast<CUstream>(stream)) == CUDA_SUCCESS, "cuGraphLaunch");
            timer->stop();
            if (r >= 3) ms.push_back(*timer->elapsed_ms());
        }
        cuGraphExecDestroy(exec);
        cuGraphDestroy(graph);
        kinds.push_back({key, int(groups[key].size()), stats_of(ms).median});
    }
    return kinds;
}

// The step's kernels as they run in graph replays, from CUPTI (cupti_trace.h, timeline.h): the
// captured step instantiated again with kernel records on, `warm` replays dropped, then `reps`
// replays, each waited for, so one replay's kernels never meet the next one's.
// n_layer: kinds launched several times a layer are shown per place (split_by_layer_place).
Result<bench_timeline::Summary> trace_step(cudaGraph_t step, cudaStream_t stream, int n_layer, int reps, int warm = 3) {
    auto trace = bench_timeline::KernelTrace::begin();
    if (!trace.ok()) return Error{trace.error()};
    cudaGraphExec_t exec = nullptr;
    if (cudaGraphInstantiate(&exec, step, 0) != cudaSuccess) {
        (void)(*trace)->end();
        return Error{"graph instantiate for the timeline"};
    }
    std::vector<cudaError_t> launched;
    for (int r = 0; r < warm + reps; ++r) {
        launched.push_back(cudaGraphLaunch(exec, stream));
        launched.push_back(cudaStreamSynchronize(stream));
    }
    auto records = (*trace)->end();
    cudaGraphExecDestroy(exec);
    for (cudaError_t e : launched) {
        if (e != cudaSuccess) return error("timeline replay: {}", cudaGetErrorString(e));
    }
    if (!records.ok()) return Error{records.error()};
    // Group by the launching call (one cuGraphLaunch per replay, if CUPTI gives graph kernels its
    // correlation id); else split where no kernel ran for 20 us (the host waits between replays).
    std::vector<std::vector<bench_timeline::KernelSpan>> replays;
    std::map<uint32_t, std::vector<bench_timeline::KernelSpan>> by_launch;
    std::vector<bench_timeline::KernelSpan> all;
    for (const bench_timeline::KernelRecord &r : *records) {
        all.push_back({kind_key(short_kernel_name(r.mangled_name.c_str()), r.grid[0], r.grid[1], r.grid[2]), r.start_ns, r.end_ns});
        by_launch[r.correlation].push_back(all.back());
    }
    for (auto &[correlation, spans] : by_launch) replays.push_back(std::move(spans));
    if (int(replays.size()) != warm + reps) {
        replays.clear();
        std::sort(all.begin(), all.end(), [](const auto &a, const auto &b) { return a.start_ns < b.start_ns; });
        uint64_t front = 0;
        for (const bench_timeline::KernelSpan &k : all) {
            if (replays.empty() || k.start_ns > front + 20000) replays.emplace_back();
            replays.back().push_back(k);
            front = std::max(front, k.end_ns);
        }
    }
    auto first_start = [](const std::vector<bench_timeline::KernelSpan> &spans) {
        uint64_t t = UINT64_MAX;
        for (const auto &k : spans) t = std::min(t, k.start_ns);
        return t;
    };
    std::sort(replays.begin(), replays.end(), [&](const auto &a, const auto &b) { return first_start(a) < first_start(b); });
    if (int(replays.size()) != warm + reps) return error("timeline: {} replays found in the kernel records, {} launched", replays.size(), warm + reps);
    replays.erase(replays.begin(), replays.begin() + warm);
    bench_timeline::split_by_layer_place(replays, n_layer);
    return bench_timeline::summarize(replays);
}

// Prints the timeline's table and returns it for the JSON; a trace that failed is reported and
// leaves the step's other figures standing.
nlohmann::json report_timeline(const Result<bench_timeline::Summary> &traced, double step_ms) {
    if (!traced.ok()) {
        fmt::print(stderr, "warning: --timeline: not traced: {}\n", traced.error());
        return {{"error", traced.error()}};
    }
    const bench_timeline::Summary &t = *traced;
    nlohmann::json out = {{"replays", t.replays},       {"span_ms_median", t.span_ms_median}, {"span_ms_mean", t.span_ms_mean},
                          {"span_ms_min", t.span_ms_min}, {"span_ms_max", t.span_ms_max},       {"gap_ms", t.gap_ms},
                          {"kinds", nlohmann::json::array()}};
    fmt::print("  timeline (CUPTI, {} replays): span {:.4f} ms (min {:.4f}, max {:.4f}; the step untraced {:.4f}), no kernel running {:.4f} ms\n",
               t.replays, t.span_ms_median, t.span_ms_min, t.span_ms_max, step_ms, t.gap_ms);
    fmt::print("  {:>11} {:>6} {:>4} {:>9} {:>9}  kernel (grid)\n", "exposed ms", "share", "n", "mean us", "lead us");
    for (const bench_timeline::KindShare &k : t.kinds) {
        out["kinds"].push_back(
            {{"kernel", k.kind}, {"launches", k.launches}, {"exposed_ms", k.exposed_ms}, {"mean_us", k.mean_us}, {"mean_lead_us", k.mean_lead_us}});
        fmt::print("  {:>11.4f} {:>5.1f}% {:>4} {:>9.2f} {:>9.2f}  {}\n", k.exposed_ms, 100.0 * k.exposed_ms / t.span_ms_mean, k.launches, k.mean_us,
                   k.mean_lead_us, k.kind);
    }
    return out;
}

int run(const std::string &preset, const std::vector<int> &batches, int kv_length, int reps, const std::string &forward,
        const std::string &json_path, bool breakdown, bool timeline, bool warm_up) {
    const int block_tokens = 16;
    const int max_batch = *std::max_element(batches.begin(), batches.end());
    const int max_blocks = (kv_length + 1 + block_tokens - 1) / block_tokens;
    auto shell = engine::preset_shell("preset:" + preset, DType::bf16);
    if (!shell.ok()) {
        fmt::print(stderr, "error: {}\n", shell.error());
        return 1;
    }
    engine::EngineOptions options;
    options.device = backend::DeviceKind::cuda;
    options.forward = forward;
    options.kv.dtype = DType::bf16;
    options.kv.block_tokens = block_tokens;
    options.kv.n_block = max_batch * max_blocks + 1;
    options.warm_up = warm_up;
    const auto start = std::chrono::steady_clock::now();
    auto engine = engine::Engine::create(*shell, options);
    if (!engine.ok()) {
        fmt::print(stderr, "error: {}\n", engine.error());
        return 1;
    }
    const double ready_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    backend::Backend &device = (*engine)->device();
    const engine::StartupTiming startup = (*engine)->startup();
    const double bandwidth = copy_bandwidth(device, size_t(2) << 30, 20);
    const hp_config &c = (*engine)->abi_model().config;
    const double weight_bytes = double(model::bytes_read_per_token(shell->config, DType::bf16));
    const double kv_bytes_per_seq = double(kv_length + 1) * c.n_layer * 2.0 * c.n_head_kv * c.d_head * 2.0;

    nlohmann::json out = {{"preset", preset},
                          {"forward", forward},
                          {"device", device.info().name},
                          {"kv_length", kv_length},
                          {"kv_dtype", "bf16"},
                          {"copy_bandwidth_gbs", bandwidth / 1e9},
                          {"weight_bytes_per_step", weight_bytes},
                          {"startup_ms",
                           {{"context", startup.context_ms},
                            {"weights", startup.weights_ms},
                            {"kv", startup.kv_ms},
                            {"plugin", startup.plugin_ms},
                            {"warm_up", startup.warm_up_ms},
                            {"total", ready_ms}}},
                          {"batches", nlohmann::json::array()}};
    fmt::print("{} on {}: copy bandwidth {:.0f} GB/s; start->ready {:.0f} ms (context {:.0f}, weights {:.0f}, kv {:.0f}, plugin {:.0f}, warm-up {:.0f})\n",
               preset, device.info().name, bandwidth / 1e9, ready_ms, startup.context_ms, startup.weights_ms, startup.kv_ms, startup.plugin_ms,
               startup.warm_up_ms);
    auto stream = static_cast<cudaStream_t>(device.stream());
    for (int batch_size : batches) {
        auto rig = gpu_test::PluginRig::create(**engine, forward);
        if (!rig.ok()) {
            fmt::print(stderr, "error: {}\n", rig.error());
            return 1;
        }
        gpu_test::HostBatch batch;
        batch.max_blocks = max_blocks;
        for (int s = 0; s < batch_size; ++s) {
            std::vector<int32_t> blocks;
            for (int b = 0; b < max_blocks; ++b) blocks.push_back(s * max_blocks + b);
            batch.add({int32_t((s * 7919 + 1) % c.n_vocab)}, kv_length, blocks, false);
        }
        auto eager = (*rig)->run(batch);  // also sizes the plugin's workspace before capture
        if (!eager.ok()) {
            fmt::print(stderr, "error: {}\n", eager.error());
            return 1;
        }
        // Eager step time, for the launch-overhead picture.
        auto timer = device.create_timer();
        std::vector<double> eager_ms;
        for (int r = 0; r < 5; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            if (!(*rig)->run(batch).ok()) return 1;
            eager_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        const auto capture_start = std::chrono::steady_clock::now();
        Status captured = (*rig)->capture(batch);
        const double capture_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - capture_start).count();
        if (Status status = captured; !status.ok()) {
            fmt::print(stderr, "error: {}\n", status.error());
            return 1;
        }
        for (int r = 0; r < 5; ++r) (void)(*rig)->launch();
        std::vector<double> graph_ms;
        for (int r = 0; r < reps; ++r) {
            timer->start();
            (void)(*rig)->launch();
            timer->stop();
            graph_ms.push_back(*timer->elapsed_ms());
        }
        // Host clock around reps replays and one full synchronize: disagreement with the events
        // would mean work escaping the stream.
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) (void)(*rig)->launch();
        HP_CUDA_CHECK(cudaStreamSynchronize(stream));
        HP_CUDA_CHECK(cudaDeviceSynchronize());
        const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
        auto replayed = (*rig)->logits();
        const auto check = gpu_test::compare(*replayed, *eager);
        const Stats s = stats_of(graph_ms);
        const double one_token_bytes = weight_bytes + batch_size * kv_bytes_per_seq;
        // MoE: the step reads each expert its tokens chose once, so count the experts the routing
        // touched (every step of this rig ran the same batch: the counts' nonzero pattern is one step's).
        double bytes = one_token_bytes, unique_experts_per_layer = 0;
        if (c.n_expert > 0 && c.n_expert_used > 0) {
            auto counts = (*rig)->expert_counts();
            if (!counts.ok()) {
                fmt::print(stderr, "error: {}\n", counts.error());
                return 1;
            }
            const double expert_bytes = 3.0 * c.d_model * c.d_ff_expert * 2.0;  // bf16 gate, up, down
            int moe_layers = 0, unique = 0;
            for (int layer = 0; layer < c.n_layer; ++layer) {
                int picks = 0;
                for (int e = 0; e < c.n_expert; ++e) {
                    const int32_t count = (*counts)[size_t(layer) * c.n_expert + e];
                    picks += count;
                    unique += count > 0;
                }
                moe_layers += picks > 0;
            }
            if (moe_layers > 0) {
                bytes += (double(unique) - double(moe_layers) * c.n_expert_used) * expert_bytes;
                unique_experts_per_layer = double(unique) / moe_layers;
            }
        }
        const double floor_ms = bytes / bandwidth * 1e3;
        nlohmann::json kernels = nlohmann::json::array();
        if (breakdown) {
            double total_ms = 0;
            for (const KernelKind &kind : kernel_breakdown((*rig)->graph(), device, 20)) {
                kernels.push_back({{"kernel", kind.name}, {"launches", kind.nodes}, {"ms", kind.ms}});
                total_ms += kind.ms;
                fmt::print("  {:>8.4f} ms {:>4}x  {}\n", kind.ms, kind.nodes, kind.name);
            }
            fmt::print("  {:>8.4f} ms in kernels timed alone by kind; the step takes {:.4f} ms\n", total_ms, stats_of(graph_ms).median);
        }
        const nlohmann::json timeline_json = timeline ? report_timeline(trace_step((*rig)->graph(), stream, c.n_layer, 20), s.median) : nlohmann::json();
        out["batches"].push_back({{"batch", batch_size},
                                  {"step_ms_median", s.median},
                                  {"step_ms_p10", s.p10},
                                  {"step_ms_p90", s.p90},
                                  {"step_ms_host", host_ms},
                                  {"eager_step_ms_median", stats_of(eager_ms).median},
                                  {"capture_ms", capture_ms},
                                  {"tokens_per_s", batch_size / (s.median * 1e-3)},
                                  {"bytes_per_step", bytes},
                                  {"roofline_ms", floor_ms},
                                  {"roofline_one_token_ms", one_token_bytes / bandwidth * 1e3},
                                  {"unique_experts_per_layer", unique_experts_per_layer},
                                  {"fraction_of_roofline", floor_ms / s.median},
                                  {"graph_vs_eager_max_delta", check.max_delta},
                                  {"reps", reps},
                                  {"kernels", kernels},
                                  {"timeline", timeline_json}});
        fmt::print("batch {:>3}: step {:.3f} ms (p10 {:.3f}, p90 {:.3f}; host clock {:.3f}; eager {:.3f}; capture {:.1f}) = {:.0f} tokens/s; "
                   "roofline {:.3f} ms ({:.0f}%)",
                   batch_size, s.median, s.p10, s.p90, host_ms, stats_of(eager_ms).median, capture_ms, batch_size / (s.median * 1e-3), floor_ms,
                   100.0 * floor_ms / s.median);
        if (unique_experts_per_layer > 0) {
            fmt::print(" counting {:.1f} experts per layer (one token's {}: {:.3f} ms)", unique_experts_per_layer, c.n_expert_used,
                       one_token_bytes / bandwidth * 1e3);
        }
        fmt::print("\n");
    }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    return 0;
}

}  // namespace
}  // namespace hp

int main(int argc, char **argv) {
    CLI::App app{"GPU decode benchmark: CUDA-graph step time, tokens/s and roofline per batch size"};
    std::string preset = "llama-3.2-1b", forward = "baseline", json_path, batches_text = "1,8,32,64";
    int kv_length = 1024, reps = 50;
    bool breakdown = false, timeline = false, no_warm_up = false;
    app.add_option("--preset", preset)->capture_default_str();
    app.add_option("--forward", forward)->capture_default_str();
    app.add_option("--batches", batches_text)->capture_default_str();
    app.add_option("--kv", kv_length, "KV positions cached per sequence before the step")->capture_default_str();
    app.add_option("--reps", reps)->capture_default_str();
    app.add_option("--json", json_path, "write the figures here");
    app.add_flag("--breakdown", breakdown, "also time each kind of kernel of the step alone (graph of its launches, events)");
    app.add_flag("--timeline", timeline,
                 "also trace the step's kernels in graph replays with CUPTI (needs libcupti): per kind of kernel, the time it adds "
                 "to the step (its end past every earlier kernel's), its mean duration and how early it starts under the kernels "
                 "before it (programmatic launch)");
    app.add_flag("--no-warm-up", no_warm_up,
                 "skip the engine's one-token warm-up step at start-up, so that every kernel launched is one of the batches' "
                 "steps (for a profiler's launch counts, e.g. Nsight Compute's --launch-skip); start->ready then has no warm-up");
    CLI11_PARSE(app, argc, argv);
    std::vector<int> batches;
    std::stringstream stream(batches_text);
    for (std::string item; std::getline(stream, item, ',');) batches.push_back(std::stoi(item));
    if (!hp::backend::cuda_available()) {
        fmt::print(stderr, "no CUDA device\n");
        return 77;
    }
    return hp::run(preset, batches, kv_length, reps, forward, json_path, breakdown, timeline, !no_warm_up);
}
