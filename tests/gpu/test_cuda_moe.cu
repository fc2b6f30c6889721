// The CUDA baseline's grouped MoE decode (forward/cuda/baseline/moe.cuh) against float64 host math
// on fresh random inputs: routing (softmax, top-k with ties to the lower index, optional
// renormalisation), the per-expert token lists, gate/up/SiLU with the routing weight, down_proj, the
// combine into the residual (+ a gated shared expert) and the next RMSNorm's bf16 operand.
// Shapes off every tile (d_ff not a multiple of 16, d_model not a multiple of 8: element loads),
// unaligned expert matrices, experts hit by 0 / 1 / many tokens, top-k = every expert, a batch in
// which every token picks the same experts (more tokens than one pass of the kernel holds), the
// folded RMSNorm (1/rms from partial sums of x^2), 1..100 tokens; one-token steps through both
// paths (routing kernel + grouped gate/up, and the expert kernels routing the token themselves,
// knob moe_single_route); the fused one-token kernel (moe_fused.cuh), which also computes the router
// logits, on its own cases. Outputs poisoned first; two runs bit-identical. Built with the plugin's
// knob values.
//
// Routing must match exactly, so router logits are drawn per token as a shuffled ladder with steps
// of 0.05 (no near-ties for float32 softmax to flip). Tolerance of the residual: gate and up
// accumulate in float32 (5e-5 relative of sum |w h|, as test_cuda_gemv), the SwiGLU product is
// rounded to bf16 (2^-8 relative) before down_proj, so each element of x is held to
// 2^-7 * sum over slots and rows of |W_down act| (+ 1e-5): a wrong expert, token or weight moves an
// element by O(1) of that sum. The norm operand is checked against the device's own x: 2^-8 relative
// (bf16) + 1e-6. For the fused kernel the router rows are built so that their logits land near that
// ladder (plus noise); the host routes from the exact float64 logits of those bf16 rows, and the
// device's float32 logits must match them to 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../../forward/cuda/baseline/moe.cuh"
#include "../../forward/cuda/baseline/moe_fused.cuh"

namespace {

namespace moe = hp_cuda_moe;

bool have_device() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

uint16_t to_bf16_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
float from_bf16_bits(uint16_t bits) {
    const uint32_t wide = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
}

struct Bf16Buffer {
    std::vector<uint16_t> host;
    std::vector<float> value;
};
Bf16Buffer random_bf16(std::mt19937 &rng, size_t n, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    Bf16Buffer b;
    b.host.reserve(n);
    b.value.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        b.host.push_back(to_bf16_bits(normal(rng)));
        b.value.push_back(from_bf16_bits(b.host.back()));
    }
    return b;
}

// Device allocations of one case, freed at the end.
struct DeviceArena {
    std::vector<void *> ptrs;
    ~DeviceArena() {
        for (void *p : ptrs) cudaFree(p);
    }
    template <class T>
    T *upload(const std::vector<T> &host, size_t offset_elements = 0) {
        void *ptr = nullptr;
        if (cudaMalloc(&ptr, (host.size() + offset_elements) * sizeof(T) + 16) != cudaSuccess) return nullptr;
        ptrs.push_back(ptr);
        T *at = static_cast<T *>(ptr) + offset_elements;
        if (!host.empty()) cudaMemcpy(at, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
        return at;
    }
    template <class T>
    T *filled(size_t n, T value) {
        return upload(std::vector<T>(n, value));
    }
};

enum class Routing { random, skewed, same };

struct Case {
    int n_token, n_expert, k, d_model, d_ff;
    Routing routing = Routing::random;
    bool norm_topk_prob = true;
    bool folded = false;     // 1/rms from random partial sums of x^2
    bool shared = false;     // a gated shared expert's output to add
    bool next_norm = false;  // the combine writes bf16(RMSNorm(x) * w)
    bool misaligned = false; // expert matrices one element past a 16-byte boundary
    int n_physical = 16;     // distinct weight sets; expert e uses set e % n_physical (keeps host memory small)
    bool single_token = false;  // n_token 1: the one-token down kernel accumulates into x (next_norm: folded, gemv.cuh's NormOut)
    int down_tiles = 1;         // 16-row tiles per block of the grouped down
    bool single_route = false;  // single_token: the gate/up and down kernels route the token themselves (no routing kernel)
    bool fused = false;         // single_token: the fused kernel (moe_fused.cuh) computes the router logits and runs the whole FFN
    moe::FusedDown down = moe::FusedDown::rows;  // fused: the down form (knobs moe_fused_down_mma, moe_fused_stage_down, moe_fused_split_down)
    bool logit_flags = false;    // fused: the logits handed over as tagged words, no barrier 1 (knob moe_fused_logit_flags)
    bool tables_shared = false;  // fused: the expert tables copied to shared memory (knob moe_fused_tables_shared)
    int launches = 1;            // fused: launches on one barrier counter (and tag words); the earlier ones with an all-zero router
    bool dynamic_items = false;  // fused: gate/up rows claimed from a counter shared by the launches (knob moe_fused_dynamic_items)
};

std::string describe(const Case &c) {
    const char *routing = c.routing == Routing::random ? "random" : c.routing == Routing::skewed ? "skewed" : "same experts";
    return "n_token " + std::to_string(c.n_token) + ", experts " + std::to_string(c.n_expert) + " top-" + std::to_string(c.k) + ", d_model " +
           std::to_string(c.d_model) + ", d_ff " + std::to_string(c.d_ff) + ", " + routing + (c.norm_topk_prob ? ", norm_topk" : "") +
           (c.folded ? ", folded norm" : "") + (c.shared ? ", shared" : "") + (c.next_norm ? ", next norm" : "") +
           (c.misaligned ? ", misaligned" : "") + (c.single_token ? ", one-token down" : "") + (c.single_route ? ", routed by the expert kernels" : "") + (c.fused ? std::string(", fused kernel, ") + moe::fused_down_name(c.down) : "") +
           (c.logit_flags ? ", tagged logits" : "") + (c.tables_shared ? ", tables in shared memory" : "") +
           (c.launches > 1 ? ", launch " + std::to_string(c.launches) + " on one counter" : "") +
           (c.dynamic_items ? ", gate/up rows claimed" : "") +
           (c.down_tiles > 1 ? ", down tiles " + std::to_string(c.down_tiles) : "");
}

// Router logits: per token a ladder 0, -0.05, -0.1, ... assigned to experts in a random order
// (skewed: biased toward low expert ids; same: one order for every token).
std::vector<float> router_logits(const Case &c, std::mt19937 &rng) {
    std::vector<float> logits(size_t(c.n_token) * c.n_expert);
    std::vector<int> order(static_cast<size_t>(c.n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::normal_distribution<double> noise(0.0, 1.0);
    for (int t = 0; t < c.n_token; ++t) {
        if (c.routing == Routing::random) std::shuffle(order.begin(), order.end(), rng);
        if (c.routing == Routing::skewed) {
            std::vector<std::pair<double, int>> keyed;
            for (int e = 0; e < c.n_expert; ++e) keyed.push_back({0.3 * e + noise(rng) * 2.0, e});
            std::sort(keyed.begin(), keyed.end());
            for (int e = 0; e < c.n_expert; ++e) order[size_t(e)] = keyed[size_t(e)].second;
        }
        for (int rank = 0; rank < c.n_expert; ++rank) logits[size_t(t) * c.n_expert + order[size_t(rank)]] = 1.0f - 0.05f * float(rank);
    }
    return logits;
}

void run_case(const Case &c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    std::mt19937 rng(seed);
    DeviceArena arena;
    const int n = c.n_token, E = c.n_expert, k = c.k, D = c.d_model, F = c.d_ff, P = std::min(c.n_physical, E);
    const size_t off = c.misaligned ? 1 : 0;
    std::vector<float> logits = router_logits(c, rng);
    const Bf16Buffer h = random_bf16(rng, size_t(n) * D, 1.0f);
    std::vector<Bf16Buffer> gate(P), up(P), down(P);
    for (int e = 0; e < P; ++e) {
        gate[e] = random_bf16(rng, size_t(F) * D, 1.0f / std::sqrt(float(D)));
        up[e] = random_bf16(rng, size_t(F) * D, 1.0f / std::sqrt(float(D)));
        down[e] = random_bf16(rng, size_t(D) * F, 1.0f / std::sqrt(float(F)));
    }
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> x0(size_t(n) * D), shared(size_t(n) * D), shared_logit(static_cast<size_t>(n)), norm_w(static_cast<size_t>(D));
    for (float &v : x0) v = uniform(rng);
    for (float &v : shared) v = uniform(rng);
    for (float &v : shared_logit) v = 2.0f * uniform(rng);
    for (float &v : norm_w) v = 1.0f + 0.5f * uniform(rng);
    const int n_sum_sq = (D + 15) / 16;
    std::vector<float> sum_sq(size_t(n) * n_sum_sq);
    std::uniform_real_distribution<float> positive(0.0f, 4.0f * 16.0f);
    for (float &v : sum_sq) v = positive(rng);
    const float eps = 1e-6f;
    // The fused kernel computes the logits itself: router rows built so that (row . h) / rms lands
    // near the ladder above (plus noise off it), and the host routes from the exact logits of those
    // bf16 rows in float64.
    Bf16Buffer router;
    std::vector<uint16_t> warm_router;  // Case::launches: the earlier launches' router
    if (c.fused) {
        double h_sq = 0, inv_rms = 1;
        for (int i = 0; i < D; ++i) h_sq += double(h.value[size_t(i)]) * h.value[size_t(i)];
        if (c.folded) {
            double sum = 0;
            for (int i = 0; i < n_sum_sq; ++i) sum += sum_sq[size_t(i)];
            inv_rms = 1.0 / std::sqrt(sum / D + eps);
        }
        router = random_bf16(rng, size_t(E) * D, float(0.005 / (inv_rms * std::sqrt(h_sq))));
        for (int e = 0; e < E; ++e) {
            double dot = 0;
            for (int i = 0; i < D; ++i) {
                const size_t at = size_t(e) * D + i;
                router.host[at] = to_bf16_bits(router.value[at] + float(logits[size_t(e)] * h.value[size_t(i)] / (inv_rms * h_sq)));
                router.value[at] = from_bf16_bits(router.host[at]);
                dot += double(router.value[at]) * h.value[size_t(i)];
            }
            logits[size_t(e)] = float(dot * inv_rms);
        }
        // Logits of about 8 + 0.01 (E - e), far above the checked launch's (0 and below): a word of an
        // earlier launch taken by the checked one puts its expert into the top-k.
        if (c.launches > 1) {
            warm_router.resize(size_t(E) * D);
            for (int e = 0; e < E; ++e) {
                for (int i = 0; i < D; ++i) {
                    warm_router[size_t(e) * D + i] = to_bf16_bits(float((8.0 + 0.01 * (E - e)) * h.value[size_t(i)] / (inv_rms * h_sq)));
                }
            }
        }
        std::vector<float> sorted(logits.begin(), logits.end());
        std::sort(sorted.rbegin(), sorted.rend());
        for (int rank = 0; rank < std::min(k + 1, E) - 1; ++rank) {
            ASSERT_GT(sorted[size_t(rank)] - sorted[size_t(rank) + 1], 0.01f) << "router construction: near-tied logits";
        }
    }

    // Device inputs.
    std::vector<const __nv_bfloat16 *> tables(size_t(3 * E));
    std::vector<const __nv_bfloat16 *> physical(size_t(3 * P));
    for (int e = 0; e < P; ++e) {
        physical[size_t(e)] = reinterpret_cast<const __nv_bfloat16 *>(arena.upload(gate[e].host, off));
        physical[size_t(P + e)] = reinterpret_cast<const __nv_bfloat16 *>(arena.upload(up[e].host, off));
        physical[size_t(2 * P + e)] = reinterpret_cast<const __nv_bfloat16 *>(arena.upload(down[e].host, off));
    }
    for (int e = 0; e < E; ++e) {
        for (int m = 0; m < 3; ++m) tables[size_t(m * E + e)] = physical[size_t(m * P + e % P)];
    }
    bool aligned = true;
    for (const auto *ptr : tables) aligned = aligned && hp_cuda_gemv::aligned16(ptr);
    auto *table = arena.upload(tables);
    moe::MoeStep s;
    moe::RouteParams &r = s.route;
    r.logits = arena.upload(logits);
    r.n_token = n;
    r.n_expert = E;
    r.k = k;
    r.norm_topk_prob = c.norm_topk_prob;
    if (c.folded) {
        r.x_sum_sq = arena.upload(sum_sq);
        r.n_sum_sq = n_sum_sq;
        r.d_model = D;
        r.norm_eps = eps;
    }
    // The routing's outputs, poisoned.
    auto poisoned_routing = [&](moe::Routing &routing) {
        routing.expert_index = arena.filled<int32_t>(size_t(n) * k, -7);
        routing.expert_weight = arena.filled<float>(size_t(n) * k, NAN);
        routing.n_active = arena.filled<int32_t>(1, -7);
        routing.active_expert = arena.filled<int32_t>(size_t(E), -7);
        routing.group_start = arena.filled<int32_t>(size_t(E) + 1, -7);
        routing.group_pair = arena.filled<int32_t>(size_t(n) * k, -7);
        routing.inv_rms = arena.filled<float>(size_t(n), NAN);
    };
    r.expert_counts = arena.filled<int32_t>(size_t(E), 0);
    poisoned_routing(r.routing);
    s.gate = table;
    s.up = table + E;
    s.down = table + 2 * E;
    s.vec = aligned;
    s.down_tiles = c.down_tiles;
    s.h = reinterpret_cast<const __nv_bfloat16 *>(arena.upload(h.host));
    s.d_model = D;
    s.d_ff = F;
    s.act = reinterpret_cast<__nv_bfloat16 *>(arena.filled<uint16_t>(size_t(n) * k * F, 0x7fc0));
    s.out = arena.filled<float>(size_t(n) * k * D, NAN);
    s.x = arena.upload(x0);
    if (c.shared) {
        s.shared = arena.upload(shared);
        s.shared_logit = arena.upload(shared_logit);
    }
    const int n_tile = (D + 15) / 16;
    s.single_route = c.single_route;
    if (c.single_token) {
        s.single_token = true;
        if (c.next_norm) {
            s.norm_out.h = reinterpret_cast<__nv_bfloat16 *>(arena.filled<uint16_t>(size_t(D), 0x7fc0));
            s.norm_out.w = arena.upload(norm_w);
            s.norm_out.w_dtype = HP_DTYPE_F32;
            s.norm_out.sum_sq = arena.filled<float>(size_t(n_tile), NAN);
        }
    } else if (c.next_norm) {
        s.next_norm_w = arena.upload(norm_w);
        s.next_norm_dtype = HP_DTYPE_F32;
        s.norm_eps = eps;
        s.h_out = reinterpret_cast<__nv_bfloat16 *>(arena.filled<uint16_t>(size_t(n) * D, 0x7fc0));
    }
    // The fused kernel as the plugin runs it: the next norm's operand and tile sums written over the FFN
    // input and its sums, which every block reads at its start (with moe_fused_act_tags no barrier 2 keeps
    // a block's tile writes from reaching a block that has not read them yet).
    if (c.fused && c.next_norm && c.folded) {
        s.norm_out.h = const_cast<__nv_bfloat16 *>(s.h);
        s.norm_out.sum_sq = const_cast<float *>(r.x_sum_sq);
    }
    for (void *ptr : arena.ptrs) ASSERT_NE(ptr, nullptr);
    moe::FusedParams f, warm;  // warm: the earlier launches (Case::launches), on f's counter and tag words, with their own outputs
    if (c.fused) {
        f = moe::fused_params(s, reinterpret_cast<const __nv_bfloat16 *>(arena.upload(router.host)), arena.filled<float>(size_t(E), NAN),
                              arena.filled<unsigned long long>(1, 0ull),
                              arena.filled<float>(size_t(hp_cuda_gemv::device_sm_count()) * D, NAN),
                              c.logit_flags ? arena.filled<unsigned long long>(size_t(E), 0ull) : nullptr,
                              c.dynamic_items ? arena.filled<int>(1, 0) : nullptr,
                              c.logit_flags && moe::kFusedActTags ? arena.filled<uint32_t>(size_t(k) * F, 0u) : nullptr);
        f.tables_shared = c.tables_shared;
        if (c.launches > 1) {
            warm = f;
            warm.router = reinterpret_cast<const __nv_bfloat16 *>(arena.upload(warm_router));
            warm.x = arena.upload(x0);
            warm.expert_counts = arena.filled<int32_t>(size_t(E), 0);
            poisoned_routing(warm.routing);
            warm.act = reinterpret_cast<__nv_bfloat16 *>(arena.filled<uint16_t>(size_t(n) * k * F, 0x7fc0));
            if (warm.norm_out.h) {
                warm.norm_out.h = reinterpret_cast<__nv_bfloat16 *>(arena.filled<uint16_t>(size_t(D), 0x7fc0));
                warm.norm_out.sum_sq = arena.filled<float>(size_t(n_tile), NAN);
            }
            for (void *ptr : arena.ptrs) ASSERT_NE(ptr, nullptr);
        }
        ASSERT_TRUE(c.single_token && moe::fused_fits(f, aligned) && moe::fused_resident(f, c.down)) << "a fused case the kernel does not take";
    }
    auto run = [&] {
        if (c.fused) {
            // Earlier launches on the same counter and tag words, writing their own outputs, then the
            // checked launch straight after them (a programmatic dependent of the last, as in a step).
            for (int launch = 1; launch < c.launches; ++launch) ASSERT_EQ(moe::launch_fused(warm, nullptr, c.down), cudaSuccess);
            ASSERT_EQ(moe::launch_fused(f, nullptr, c.down), cudaSuccess);
            return;
        }
        moe::moe_experts(s, nullptr);
        if (!c.single_token) moe::moe_combine(s, nullptr);
    };
    run();
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());

    // Host routing in float64.
    std::vector<int> index(size_t(n) * k);
    std::vector<double> weight(size_t(n) * k), inv_rms(size_t(n), 1.0);
    std::vector<int> counts(size_t(E), 0);
    for (int t = 0; t < n; ++t) {
        std::vector<double> prob(static_cast<size_t>(E));
        double max_logit = -INFINITY, total = 0;
        for (int e = 0; e < E; ++e) max_logit = std::max(max_logit, double(logits[size_t(t) * E + e]));
        for (int e = 0; e < E; ++e) total += prob[size_t(e)] = std::exp(double(logits[size_t(t) * E + e]) - max_logit);
        for (double &p : prob) p /= total;
        double chosen = 0;
        for (int slot = 0; slot < k; ++slot) {
            int best = -1;
            for (int e = 0; e < E; ++e) {
                if (prob[size_t(e)] >= 0 && (best < 0 || prob[size_t(e)] > prob[size_t(best)])) best = e;
            }
            index[size_t(t) * k + slot] = best;
            weight[size_t(t) * k + slot] = prob[size_t(best)];
            chosen += prob[size_t(best)];
            prob[size_t(best)] = -1;
            ++counts[size_t(best)];
        }
        if (c.norm_topk_prob) {
            for (int slot = 0; slot < k; ++slot) weight[size_t(t) * k + slot] /= chosen;
        }
        if (c.folded) {
            double sum = 0;
            for (int i = 0; i < n_sum_sq; ++i) sum += sum_sq[size_t(t) * n_sum_sq + i];
            inv_rms[size_t(t)] = 1.0 / std::sqrt(sum / D + eps);
        }
    }
    auto download = [&](auto *device, size_t count) {
        std::vector<std::remove_const_t<std::remove_pointer_t<decltype(device)>>> host(count);
        cudaMemcpy(host.data(), device, count * sizeof(host[0]), cudaMemcpyDeviceToHost);
        return host;
    };
    const auto got_index = download(r.routing.expert_index, size_t(n) * k);
    const auto got_weight = download(r.routing.expert_weight, size_t(n) * k);
    const auto got_counts = download(r.expert_counts, size_t(E));
    const int got_active = download(r.routing.n_active, 1)[0];
    const auto got_active_expert = download(r.routing.active_expert, size_t(E));
    const auto got_start = download(r.routing.group_start, size_t(E) + 1);
    const auto got_pair = download(r.routing.group_pair, size_t(n) * k);
    if (c.fused) {  // the router GEMV: float32 sums of the same bf16 products
        const auto got_logits = download(f.logits, size_t(E));
        for (int e = 0; e < E; ++e) ASSERT_NEAR(got_logits[size_t(e)], logits[size_t(e)], 1e-4) << "logit " << e;
        if (f.items) ASSERT_EQ(download(f.items, 1)[0], 0) << "the claim counter is left for the next launch at zero";
    }
    for (size_t i = 0; i < index.size(); ++i) {
        ASSERT_EQ(got_index[i], index[i]) << "pair " << i;
        ASSERT_NEAR(got_weight[i], weight[i], 1e-6 + 1e-5 * weight[i]) << "pair " << i;
    }
    int active = 0, position = 0;
    for (int e = 0; e < E; ++e) {
        ASSERT_EQ(got_counts[size_t(e)], counts[size_t(e)]) << "expert " << e;
        if (counts[size_t(e)] == 0) continue;
        ASSERT_EQ(got_active_expert[size_t(active)], e);
        ASSERT_EQ(got_start[size_t(active)], position);
        std::vector<int> members;
        for (int pos = position; pos < position + counts[size_t(e)]; ++pos) members.push_back(got_pair[size_t(pos)]);
        std::sort(members.begin(), members.end());
        std::vector<int> expected;
        for (int pair = 0; pair < n * k; ++pair) {
            if (index[size_t(pair)] == e) expected.push_back(pair);
        }
        ASSERT_EQ(members, expected) << "tokens of expert " << e;
        position += counts[size_t(e)];
        ++active;
    }
    ASSERT_EQ(got_active, active);
    ASSERT_EQ(got_start[size_t(active)], n * k);
    int hit_0 = 0, hit_1 = 0, hit_many = 0;
    for (int e = 0; e < E; ++e) (counts[size_t(e)] == 0 ? hit_0 : counts[size_t(e)] == 1 ? hit_1 : hit_many) += 1;
    std::printf("%s: %d experts active (hit by 0 / 1 / many: %d / %d / %d)\n", describe(c).c_str(), active, hit_0, hit_1, hit_many);

    // Host FFN in float64 over the same bf16 inputs.
    std::vector<double> y(size_t(n) * D, 0.0), bound(size_t(n) * D, 0.0);
    std::vector<double> act(static_cast<size_t>(F));
    for (int t = 0; t < n; ++t) {
        for (int slot = 0; slot < k; ++slot) {
            const int e = index[size_t(t) * k + slot] % P;
            for (int row = 0; row < F; ++row) {
                double g = 0, u = 0;
                for (int i = 0; i < D; ++i) {
                    const double hv = h.value[size_t(t) * D + i];
                    g += double(gate[e].value[size_t(row) * D + i]) * hv;
                    u += double(up[e].value[size_t(row) * D + i]) * hv;
                }
                g *= inv_rms[size_t(t)];
                u *= inv_rms[size_t(t)];
                act[size_t(row)] = weight[size_t(t) * k + slot] * g / (1.0 + std::exp(-g)) * u;
            }
            for (int o = 0; o < D; ++o) {
                double sum = 0, magnitude = 0;
                for (int row = 0; row < F; ++row) {
                    const double term = double(down[e].value[size_t(o) * F + row]) * act[size_t(row)];
                    sum += term;
                    magnitude += std::fabs(term);
                }
                y[size_t(t) * D + o] += sum;
                bound[size_t(t) * D + o] += magnitude;
            }
        }
    }
    const auto got_x = download(s.x, size_t(n) * D);
    int bad = 0;
    double worst = 0;
    for (int t = 0; t < n; ++t) {
        const double shared_weight = c.shared ? 1.0 / (1.0 + std::exp(-double(shared_logit[size_t(t)]))) : 0.0;
        for (int o = 0; o < D; ++o) {
            const size_t i = size_t(t) * D + o;
            const double expected = double(x0[i]) + y[i] + shared_weight * double(shared[i]);
            const double tolerance = std::ldexp(bound[i], -7) + 1e-5;
            const double error = std::fabs(double(got_x[i]) - expected);
            worst = std::max(worst, error / tolerance);
            if (!(error <= tolerance) && bad++ < 5) ADD_FAILURE() << "x[" << t << "][" << o << "] = " << got_x[i] << ", expected " << expected;
        }
    }
    EXPECT_EQ(bad, 0);
    std::printf("  residual: worst error %.3f of the bound\n", worst);
    // moe_fused_act_tags (on by default; test_cuda_moe_barrier compiles it out): the down that polls the tagged act against the one after
    // barrier 2, the same launch again on a fresh x with no tag words: the same bits.
    if (c.fused && f.act_tags && c.down == moe::FusedDown::mma) {
        moe::FusedParams plain = f;
        plain.act_tags = nullptr;
        plain.x = arena.upload(x0);
        plain.h = reinterpret_cast<const __nv_bfloat16 *>(arena.upload(h.host));  // f's may hold its next norm's operand
        if (plain.x_sum_sq) plain.x_sum_sq = arena.upload(sum_sq);
        if (plain.norm_out.h) {
            plain.norm_out.h = reinterpret_cast<__nv_bfloat16 *>(arena.filled<uint16_t>(size_t(D), 0x7fc0));
            plain.norm_out.sum_sq = arena.filled<float>(size_t(n_tile), NAN);
        }
        for (void *ptr : arena.ptrs) ASSERT_NE(ptr, nullptr);
        ASSERT_EQ(moe::launch_fused(plain, nullptr, c.down), cudaSuccess);
        CHECK_CUDA(cudaDeviceSynchronize());
        const auto plain_x = download(plain.x, size_t(D));
        ASSERT_EQ(std::memcmp(plain_x.data(), got_x.data(), size_t(D) * sizeof(float)), 0) << "tagged act and barrier 2 differ in x";
        if (plain.norm_out.h) {
            const auto plain_h = download(reinterpret_cast<const uint16_t *>(plain.norm_out.h), size_t(D));
            const auto tagged_h = download(reinterpret_cast<const uint16_t *>(f.norm_out.h), size_t(D));
            ASSERT_EQ(plain_h, tagged_h) << "tagged act and barrier 2 differ in the next norm's operand";
        }
        std::printf("  tagged act: bit-identical to barrier 2\n");
    }
    if (c.next_norm && c.single_token) {  // bf16(x * w) and the tiles' sums of x^2, from the device's own x
        const auto got_h = download(reinterpret_cast<const uint16_t *>(s.norm_out.h), size_t(D));
        const auto got_sum_sq = download(s.norm_out.sum_sq, size_t(n_tile));
        int bad_h = 0;
        for (int o = 0; o < D; ++o) {
            const double expected = double(got_x[size_t(o)]) * norm_w[size_t(o)];
            const double value = from_bf16_bits(got_h[size_t(o)]);
            if (!(std::fabs(value - expected) <= std::ldexp(std::fabs(expected), -8) + 1e-6) && bad_h++ < 5) {
                ADD_FAILURE() << "h[" << o << "] = " << value << ", expected " << expected;
            }
        }
        for (int tile = 0; tile < n_tile; ++tile) {
            double expected = 0;
            for (int o = tile * 16; o < std::min(D, tile * 16 + 16); ++o) expected += double(got_x[size_t(o)]) * got_x[size_t(o)];
            if (!(std::fabs(got_sum_sq[size_t(tile)] - expected) <= 1e-5 * expected + 1e-6) && bad_h++ < 5) {
                ADD_FAILURE() << "sum_sq[" << tile << "] = " << got_sum_sq[size_t(tile)] << ", expected " << expected;
            }
        }
        EXPECT_EQ(bad_h, 0);
    } else if (c.next_norm) {
        const auto got_h = download(reinterpret_cast<const uint16_t *>(s.h_out), size_t(n) * D);
        int bad_h = 0;
        for (int t = 0; t < n; ++t) {
            double total = 0;
            for (int o = 0; o < D; ++o) total += double(got_x[size_t(t) * D + o]) * got_x[size_t(t) * D + o];
            const double scale = 1.0 / std::sqrt(total / D + eps);
            for (int o = 0; o < D; ++o) {
                const double expected = double(got_x[size_t(t) * D + o]) * scale * norm_w[size_t(o)];
                const double value = from_bf16_bits(got_h[size_t(t) * D + o]);
                if (!(std::fabs(value - expected) <= std::ldexp(std::fabs(expected), -8) + 1e-6) && bad_h++ < 5) {
                    ADD_FAILURE() << "h[" << t << "][" << o << "] = " << value << ", expected " << expected;
                }
            }
        }
        EXPECT_EQ(bad_h, 0);
    }
    // A second run from the same residual (and the same FFN input where the first wrote over it): bit-identical.
    CHECK_CUDA(cudaMemcpy(s.x, x0.data(), x0.size() * sizeof(float), cudaMemcpyHostToDevice));
    if (s.norm_out.h && s.norm_out.h == s.h) {
        CHECK_CUDA(cudaMemcpy(s.norm_out.h, h.host.data(), h.host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(s.norm_out.sum_sq, sum_sq.data(), sum_sq.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    run();
    CHECK_CUDA(cudaDeviceSynchronize());
    const auto again = download(s.x, size_t(n) * D);
    EXPECT_EQ(std::memcmp(again.data(), got_x.data(), again.size() * sizeof(float)), 0) << "second run differs";
}

// route_token's picks of one row of logits, by one warp (PER_LANE probabilities per lane).
template <int PER_LANE>
__global__ void route_token_kernel(const float *logits, int n_expert, int k, int *expert, float *weight, float *total) {
    const float sum = moe::route_token<PER_LANE>(logits, n_expert, k, [&](int slot, int e, float prob) {
        expert[slot] = e;
        weight[slot] = prob;
    });
    if (threadIdx.x == 0) *total = sum;
}

// The top-k of the routing (route_token: every routing kernel's) on rows built to tie exactly: equal
// logits give bit-equal probabilities, which must go to the lower expert (torch.topk), across lanes
// and within one; -inf logits (probability 0) are picked once no positive one is left, lowest first;
// a NaN or +inf logit, or logits all -inf, make every probability NaN, and the picks must still be
// k distinct experts below n_expert (experts 0..k-1, NaN weights, no index past the expert tables,
// padding lanes included). 20, 100..128 and 500 experts: 1, 4 and 16 probabilities per lane. Host
// reference in float64.
TEST(CudaMoe, RouteTokenTopKTiesAndNonFinite) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    struct RouteCase {
        const char *name;
        std::vector<float> logits;
        int k;
    };
    std::vector<RouteCase> cases;
    std::mt19937 rng(20261201);
    {  // 128 experts on a ladder of 16 values (steps of 0.25), 8 experts per value, shuffled
        std::vector<float> l(128);
        for (int e = 0; e < 128; ++e) l[size_t(e)] = 0.25f * float(e % 16);
        std::shuffle(l.begin(), l.end(), rng);
        cases.push_back({"ladder of ties", l, 8});
        cases.push_back({"ladder of ties, top-k every expert", l, 128});
    }
    cases.push_back({"all equal", std::vector<float>(128, 1.5f), 8});
    {  // 100 experts (the last 28 lanes of the fourth column empty); the maximum at 3, 35, 67 and 99 (one lane)
        std::vector<float> l(100);
        for (int e = 0; e < 100; ++e) l[size_t(e)] = -0.05f * float(e);
        for (int e : {3, 35, 67, 99}) l[size_t(e)] = 2.0f;
        l[40] = l[72] = 1.0f;  // a second tie in one lane (8), its columns 1 and 2
        cases.push_back({"ties within a lane", l, 8});
    }
    {  // 16 experts, 12 at -inf: the 4 finite first, then probability 0 by index
        std::vector<float> l(16, -INFINITY);
        l[9] = 0.5f;
        l[2] = 1.0f;
        l[14] = 0.5f;
        l[6] = -3.0f;
        cases.push_back({"-inf logits", l, 8});
        cases.push_back({"-inf logits, top-k every expert", l, 16});
        cases.push_back({"all -inf", std::vector<float>(16, -INFINITY), 4});
    }
    {  // 100 experts (padding lanes past n_expert) with a NaN logit: picks 0..7, never a padding lane
        std::vector<float> l(100);
        for (int e = 0; e < 100; ++e) l[size_t(e)] = 0.01f * float((e * 13) % 100);
        l[99] = NAN;
        cases.push_back({"a NaN logit, 100 experts", l, 8});
    }
    {  // one probability per lane (20 experts), and sixteen (500 experts), with ties across columns
        std::vector<float> small(20), large(500);
        for (int e = 0; e < 20; ++e) small[size_t(e)] = 0.5f * float(e % 7);
        for (int e = 0; e < 500; ++e) large[size_t(e)] = 0.125f * float((e * 7) % 61);
        cases.push_back({"20 experts", small, 5});
        cases.push_back({"500 experts", large, 12});
        cases.push_back({"500 experts, top-k 64", large, 64});
    }
    {
        std::vector<float> l(128);
        for (int e = 0; e < 128; ++e) l[size_t(e)] = 0.1f * float((e * 37) % 128);
        cases.push_back({"distinct", l, 8});
        l[77] = NAN;
        cases.push_back({"a NaN logit", l, 8});
        l[77] = INFINITY;
        cases.push_back({"a +inf logit", l, 8});
    }
    for (const RouteCase &c : cases) {
        SCOPED_TRACE(c.name);
        const int n_expert = int(c.logits.size()), k = c.k;
        DeviceArena arena;
        const float *logits = arena.upload(c.logits);
        int *expert = arena.filled<int>(size_t(k), -7);
        float *weight = arena.filled<float>(size_t(k), -7.0f);
        float *total = arena.filled<float>(1, -7.0f);
        for (void *ptr : arena.ptrs) ASSERT_NE(ptr, nullptr);
        ASSERT_LE(n_expert, 512);
        if (n_expert <= 32) {
            route_token_kernel<1><<<1, 32>>>(logits, n_expert, k, expert, weight, total);
        } else if (n_expert <= 128) {
            route_token_kernel<4><<<1, 32>>>(logits, n_expert, k, expert, weight, total);
        } else {
            route_token_kernel<16><<<1, 32>>>(logits, n_expert, k, expert, weight, total);
        }
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<int> got_e(static_cast<size_t>(k));
        std::vector<float> got_w(static_cast<size_t>(k));
        CHECK_CUDA(cudaMemcpy(got_e.data(), expert, got_e.size() * sizeof(int), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(got_w.data(), weight, got_w.size() * sizeof(float), cudaMemcpyDeviceToHost));
        float got_total = 0.0f;
        CHECK_CUDA(cudaMemcpy(&got_total, total, sizeof(float), cudaMemcpyDeviceToHost));
        const bool nan_or_inf = std::any_of(c.logits.begin(), c.logits.end(), [](float l) { return std::isnan(l) || l == INFINITY; });
        const bool no_finite_max = std::all_of(c.logits.begin(), c.logits.end(), [](float l) { return l == -INFINITY; });
        if (nan_or_inf || no_finite_max) {  // every probability NaN: the first k experts, NaN weights
            for (int slot = 0; slot < k; ++slot) {
                EXPECT_EQ(got_e[size_t(slot)], slot) << "slot " << slot;
                EXPECT_TRUE(std::isnan(got_w[size_t(slot)])) << "slot " << slot;
            }
            EXPECT_TRUE(std::isnan(got_total));
            continue;
        }
        double max_logit = -INFINITY, sum = 0.0;
        for (float l : c.logits) max_logit = std::max(max_logit, double(l));
        std::vector<double> prob(static_cast<size_t>(n_expert));
        for (int e = 0; e < n_expert; ++e) sum += prob[size_t(e)] = std::exp(double(c.logits[size_t(e)]) - max_logit);
        std::vector<int> order(static_cast<size_t>(n_expert));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[size_t(a)] > prob[size_t(b)]; });
        double expected_total = 0.0;
        for (int slot = 0; slot < k; ++slot) {
            EXPECT_EQ(got_e[size_t(slot)], order[size_t(slot)]) << "slot " << slot;
            EXPECT_NEAR(got_w[size_t(slot)], prob[size_t(order[size_t(slot)])] / sum, 1e-6) << "slot " << slot;
            expected_total += prob[size_t(order[size_t(slot)])] / sum;
        }
        EXPECT_NEAR(got_total, expected_total, 1e-5) << "sum of the chosen probabilities";
    }
}

TEST(CudaMoe, GroupedExpertsMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const std::vector<Case> cases = {
        // qwen3-30b-a3b's expert shapes at batch 1 and 8 (128 experts top-8, d_ff 768)
        {1, 128, 8, 2048, 768, Routing::random, true, true, false, true},
        {8, 128, 8, 2048, 768, Routing::random, true, true, false, true},
        // off-tile shapes: d_model not a multiple of 8 (element loads), d_ff not a multiple of 16
        {3, 8, 2, 70, 40, Routing::random, false, true, true, true},
        {5, 8, 2, 256, 100, Routing::random, true, false, false, false, true},
        // top-k = every expert
        {8, 16, 16, 256, 100, Routing::random, true, false, true, false},
        // experts hit by 0 / 1 / many tokens; 64 tokens in one pass
        {33, 64, 4, 128, 48, Routing::skewed, true, false, false, true},
        {64, 128, 8, 512, 200, Routing::random, true, true, false, true},
        // every token picks the same two experts: 100 tokens, two passes of 64 over each
        {100, 8, 2, 64, 24, Routing::same, false, false, true, true},
        {17, 60, 4, 96, 88, Routing::same, true, true, true, false},
        // one-token steps: down_proj over the concatenated act, accumulated into x, next norm folded
        {1, 128, 8, 2048, 768, Routing::random, true, true, false, true, false, 16, true},
        {1, 8, 8, 70, 40, Routing::random, false, true, false, true, false, 16, true},
        {1, 16, 3, 256, 100, Routing::random, true, false, false, false, true, 16, true},
        // one-token steps: 300 experts (10 logits per lane), 257 chunks of input (two gate/up iterations at unroll 8)
        {1, 300, 8, 2056, 72, Routing::random, true, true, false, true, false, 16, true},
        {1, 40, 5, 70, 24, Routing::skewed, false, false, false, true, true, 16, true},
        // the grouped down taking several 16-row tiles per block (tiles not a multiple of it)
        {32, 128, 8, 2048, 768, Routing::random, true, true, false, true, false, 16, false, 4},
        {9, 16, 4, 200, 72, Routing::skewed, false, false, true, true, true, 16, false, 3},
    };
    uint32_t seed = 1;
    for (const Case &c : cases) {
        run_case(c, seed);
        if (c.single_token) {  // the same inputs through the path of knob moe_single_route
            Case routed = c;
            routed.single_route = true;
            run_case(routed, seed);
        }
        ++seed;
    }
}

// The fused one-token kernel (moe_fused.cuh: router GEMV, routing, gate/up, down and the residual in
// one launch) against the same host math, its logits included.
TEST(CudaMoe, FusedOneTokenMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    std::vector<Case> cases = {
        // qwen3-30b-a3b's shapes, folded norm in and out
        {1, 128, 8, 2048, 768, Routing::random, true, true, false, true, false, 16, true},
        // 300 experts (10 logits per lane), 257 input chunks (two router and gate/up iterations)
        {1, 300, 8, 2056, 72, Routing::random, true, true, false, true, false, 16, true},
        // no folded norm, no next norm; d_ff of 13 chunks (fewer than a warp's lanes)
        {1, 16, 3, 256, 104, Routing::random, true, false, false, false, false, 16, true},
        // 256 tiles of d_model: blocks take several; d_ff of 25 chunks; no renormalisation
        {1, 64, 6, 4096, 200, Routing::skewed, false, true, false, true, false, 16, true},
        // top-k = every expert
        {1, 8, 8, 512, 64, Routing::random, true, true, false, true, false, 16, true},
        // down rows too many for shared memory (8 x 16 x 1024 x 2 bytes): register loads only
        {1, 32, 8, 512, 1024, Routing::random, true, true, false, true, false, 16, true},
        // an odd expert count (the staged rows' mbarrier stays 8-byte aligned); 160 experts (8 logits per lane)
        {1, 33, 2, 256, 64, Routing::random, true, true, false, true, false, 16, true},
        {1, 160, 4, 512, 64, Routing::skewed, true, true, false, true, false, 16, true},
        // split down with more chunks of a down row per block than a warp has lanes (264 items a block)
        {1, 16, 8, 64, 4352, Routing::random, true, true, false, true, false, 16, true},
        // top-20: more experts than the block has warps (the partials' rows)
        {1, 32, 20, 256, 64, Routing::random, true, true, false, true, false, 16, true},
    };
    // How the logits reach the routing and the tables are read: barrier 1 and the tables in global
    // memory; tagged words (after one earlier launch on the same counter, and words) with the tables in
    // global memory; the tables in shared memory; and both (the knobs' defaults), which plan_fused gives
    // to the kernel compiled for them (DEFAULT_HANDOFF); the others run the kernel that reads them at run
    // time (with moe_fused_act_tags, its run-time act-tag branch where the logits are tagged).
    // With several launches, also gate/up rows claimed from one counter (moe_fused_dynamic_items, in the
    // build with it on: test_cuda_moe_dyn; tagged words after two earlier launches, and the defaults after
    // one): each launch must leave it at zero for the next, and every row be taken exactly once (a row
    // taken twice or not at all leaves act wrong or poisoned).
    struct Handoff {
        bool logit_flags, tables_shared;
        int launches;
        bool dynamic_items;
    };
    const Handoff handoffs[] = {{false, false, 1, false}, {true, false, 3, true}, {true, false, 2, false}, {false, true, 1, false}, {true, true, 2, false},
                                {true, true, 2, true}};
    uint32_t seed = 100;
    for (Case &c : cases) {  // the down forms: rows by register loads after gate/up (products by FMAs, on tensor cores), rows staged during it, split by gate/up items
        c.fused = true;
        for (moe::FusedDown down : {moe::FusedDown::rows, moe::FusedDown::mma, moe::FusedDown::staged, moe::FusedDown::split}) {
            for (const Handoff &handoff : handoffs) {
                // (split down takes its own items: the counter is not used there)
                if (handoff.dynamic_items && (!moe::kFusedDynamicItems || down == moe::FusedDown::split)) continue;
                c.down = down;
                c.logit_flags = handoff.logit_flags;
                c.tables_shared = handoff.tables_shared;
                c.launches = handoff.launches;
                c.dynamic_items = handoff.dynamic_items;
                run_case(c, seed);
            }
        }
        ++seed;
    }
}

}  // namespace
