// The CUDA baseline's decode GEMV (forward/cuda/baseline/gemv.cuh), its staged one-token kernel
// (gemv_staged.cuh) and its skinny GEMM (gemm_skinny.cuh), each on every case whose shape it takes,
// against plain float64 math on the host over the same bf16 inputs: fresh random weights, activations, biases and residuals per
// case, shapes off every tile (n_in not a multiple of 8 or of a warp's 32-input step, n_out not a
// multiple of the 16-row tile, 1..64 tokens, unaligned operands), every epilogue, q/k/v-style
// multi-matrix launches. Outputs are poisoned first, so an unwritten element fails; two runs must
// agree bit for bit (no atomics, fixed reduction order). Built with the plugin's knob values.
//
// Tolerance: float32 accumulation (in the tensor cores, then across warps) over n_in products
// differs from float64 by rounding of the partial sums, bounded by a small multiple of 2^-23 times
// the sum of |w x| per rounding step; each element is held to 5e-5 * sum_i |w_i x_i| (+ 1e-6), far
// below a wrong index or a lost product (O(1) of that sum). The SwiGLU epilogue rounds its
// product to bf16, so there 2^-8 of |value| more.
//
// The folded RMSNorm (knob gemv_norm): as a consumer the GEMV gets random partial sums of x^2 per
// input row (and, in some cases, a row index per token, as the lm_head's logit rows) and must scale
// by 1/sqrt(sum / n_in + eps), computed in float64 on the host (1e-6 relative more); as a producer
// the accumulate epilogue must also write bf16(y * norm_w) (held to the bf16 rounding of the host
// value, 2^-8, plus the bound times |norm_w|) and per 16-row tile the sum of y^2 of its own output
// (1e-5 relative).
//
// L2 prefetch (gemv.cuh, l2_prefetch.h): every case runs with the plugin's gemv_l2_ahead and
// gemv_evict_first; cases with `prefetch` also hand the launch L2 prefetch ranges (unaligned, odd
// sizes, over its own weights and input) that must leave the results unchanged. The host-side
// plan (WeightStream) is checked without a device: successive windows ask for no weight byte
// twice, only bytes past the asking launch's front, all of them past the first front when the
// window reaches the end, within kMaxRanges ranges, gate and up side by side.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../forward/cuda/baseline/gemv.cuh"
#include "../../forward/cuda/baseline/l2_prefetch.h"
#include "cuda_test_util.h"

namespace {

using namespace hp_cuda_test;
namespace gemv = hp_cuda_gemv;

struct Bf16Buffer {
    std::vector<uint16_t> host;
    std::vector<float> value;  // the same numbers as float
};
Bf16Buffer random_bf16(std::mt19937 &rng, size_t n, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    Bf16Buffer b;
    for (size_t i = 0; i < n; ++i) {
        b.host.push_back(to_bf16_bits(normal(rng)));
        b.value.push_back(from_bf16_bits(b.host.back()));
    }
    return b;
}

// Which decode GEMV runs a case: the plugin's choice (gemv::launch), or one kernel explicitly.
enum class Kernel { automatic, cluster, staged, skinny, skinny_wgmma };

struct Case {
    int n_in, n_token, epilogue;
    std::vector<int> n_out;  // one entry per segment
    bool bias = true;
    bool misaligned = false;  // x and w one element past a 16-byte boundary: the element-load path
    bool norm_in = false;     // scale by 1/rms from random partial sums of x^2 (13 per row)
    bool rows = false;        // with norm_in: token t reads input row rows[t] of a larger, shuffled set
    bool norm_out = false;    // kAccumulate: also write bf16(y * norm_w) and the tiles' sums of y^2
    bool prefetch = false;    // L2 prefetch ranges over the launch's own weights and input
    Kernel kernel = Kernel::automatic;
};

std::string describe(const Case &c) {
    std::string text = "n_in " + std::to_string(c.n_in) + ", n_token " + std::to_string(c.n_token) + ", epilogue " +
                       std::to_string(c.epilogue) + ", n_out";
    for (int n : c.n_out) text += " " + std::to_string(n);
    return text + (c.misaligned ? ", misaligned" : "") + (c.bias ? ", bias" : "") + (c.norm_in ? ", norm in" : "") + (c.rows ? ", rows" : "") +
           (c.norm_out ? ", norm out" : "") + (c.prefetch ? ", prefetch" : "") +
           (c.kernel == Kernel::cluster ? ", clustered kernel"
            : c.kernel == Kernel::staged ? ", staged kernel"
            : c.kernel == Kernel::skinny ? ", skinny GEMM (mma.sync)"
            : c.kernel == Kernel::skinny_wgmma ? ", skinny GEMM (wgmma)"
                                         : "");
}

void run_case(const Case &c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    std::mt19937 rng(seed);
    const int n_seg = int(c.n_out.size());
    const bool silu = c.epilogue == gemv::kSiluMul;
    const size_t off = c.misaligned ? 1 : 0;
    // Input rows: n_token, or more with a shuffled row per token; partial sums of x^2 per row.
    const int n_rows = c.rows ? c.n_token + 5 : c.n_token, n_sum_sq = 13;
    const Bf16Buffer x = random_bf16(rng, size_t(n_rows) * c.n_in, 1.0f);
    std::vector<int32_t> rows(static_cast<size_t>(c.n_token));
    std::iota(rows.begin(), rows.end(), 0);
    if (c.rows) {
        std::vector<int32_t> all(static_cast<size_t>(n_rows));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::copy(all.begin(), all.begin() + c.n_token, rows.begin());
    }
    std::vector<float> sum_sq_in(size_t(n_rows) * n_sum_sq), inv_rms(size_t(c.n_token), 1.0f);
    const float eps = 1e-5f;
    std::uniform_real_distribution<float> positive(0.0f, 4.0f * c.n_in / n_sum_sq);
    for (float &v : sum_sq_in) v = positive(rng);
    if (c.norm_in) {
        for (int t = 0; t < c.n_token; ++t) {
            double total = 0;
            for (int i = 0; i < n_sum_sq; ++i) total += sum_sq_in[size_t(rows[size_t(t)]) * n_sum_sq + i];
            inv_rms[size_t(t)] = float(1.0 / std::sqrt(total / c.n_in + eps));
        }
    }
    std::vector<Bf16Buffer> w(n_seg), w2(n_seg);
    std::vector<std::vector<float>> bias(n_seg), bias2(n_seg), y0(n_seg);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    gemv::Params p;
    p.n_in = c.n_in;
    p.n_token = c.n_token;
    p.n_segment = n_seg;
    p.x = reinterpret_cast<const __nv_bfloat16 *>(upload(x.host, off));
    if (c.norm_in) {
        p.x_rows = c.rows ? upload(rows) : nullptr;
        p.x_sum_sq = upload(sum_sq_in);
        p.n_sum_sq = n_sum_sq;
        p.norm_eps = eps;
    }
    const int n_tile = (c.n_out[0] + 15) / 16;
    Bf16Buffer norm_w;
    if (c.norm_out) {
        norm_w = random_bf16(rng, size_t(c.n_out[0]), 1.0f);
        p.norm_out.h = reinterpret_cast<__nv_bfloat16 *>(upload(std::vector<uint16_t>(size_t(c.n_token) * c.n_out[0], 0x7fc0)));
        p.norm_out.w = upload(norm_w.host);
        p.norm_out.w_dtype = HP_DTYPE_BF16;
        p.norm_out.sum_sq = upload(std::vector<float>(size_t(c.n_token) * n_tile, NAN));
    }
    std::vector<void *> outputs(n_seg);
    for (int s = 0; s < n_seg; ++s) {
        const int n_out = c.n_out[s];
        w[s] = random_bf16(rng, size_t(n_out) * c.n_in, 0.05f);
        gemv::Segment &seg = p.segment[s];
        seg.n_out = n_out;
        seg.w = reinterpret_cast<const __nv_bfloat16 *>(upload(w[s].host, off));
        if (silu) {
            w2[s] = random_bf16(rng, size_t(n_out) * c.n_in, 0.05f);
            seg.w2 = reinterpret_cast<const __nv_bfloat16 *>(upload(w2[s].host, off));
        }
        bias[s].assign(size_t(n_out), 0.0f);
        bias2[s].assign(size_t(n_out), 0.0f);
        if (c.bias) {
            for (float &b : bias[s]) b = uniform(rng);
            for (float &b : bias2[s]) b = uniform(rng);
            seg.bias = upload(bias[s]);
            seg.bias2 = upload(bias2[s]);
            seg.bias_dtype = seg.bias2_dtype = HP_DTYPE_F32;
        }
        const size_t n_y = size_t(c.n_token) * n_out;
        if (silu) {
            seg.y = upload(std::vector<uint16_t>(n_y, 0x7fc0));  // bf16 NaN
        } else if (c.epilogue == gemv::kAccumulate) {
            y0[s].resize(n_y);
            for (float &v : y0[s]) v = uniform(rng);
            seg.y = upload(y0[s]);
        } else {
            seg.y = upload(std::vector<float>(n_y, NAN));
        }
        ASSERT_NE(seg.y, nullptr);
        outputs[s] = seg.y;
    }
    if (c.prefetch) {  // odd sizes, unaligned starts: the kernel trims them to 16-byte boundaries
        for (int s = 0; s < n_seg && 2 * s + 1 < gemv::L2Prefetch::kMaxRanges; ++s) {
            p.prefetch.ptr[2 * s] = reinterpret_cast<const char *>(p.segment[s].w) + 3;
            p.prefetch.bytes[2 * s] = uint32_t(size_t(c.n_out[s]) * c.n_in * 2 - 5);
            p.prefetch.ptr[2 * s + 1] = p.segment[s].w2;
            p.prefetch.bytes[2 * s + 1] = p.segment[s].w2 ? uint32_t(size_t(c.n_out[s]) * c.n_in * 2) : 0;
        }
        p.prefetch.ptr[gemv::L2Prefetch::kMaxRanges - 1] = p.x;
        p.prefetch.bytes[gemv::L2Prefetch::kMaxRanges - 1] = uint32_t(size_t(n_rows) * c.n_in * 2);
    }
    auto launch_as = [&](auto epilogue) {
        constexpr int EPI = decltype(epilogue)::value;
        if (c.kernel == Kernel::cluster) gemv::launch_cluster<EPI>(p, nullptr);
        else if (c.kernel == Kernel::staged) gemv::launch_staged<EPI>(p, nullptr);
        else if (c.kernel == Kernel::skinny) gemv::launch_skinny<EPI>(p, nullptr, gemv::SkinnyMma::kMmaSync);
        else if (c.kernel == Kernel::skinny_wgmma) gemv::launch_skinny<EPI>(p, nullptr, gemv::SkinnyMma::kWgmma);
        else gemv::launch<EPI>(p, nullptr);
    };
    auto launch = [&] {
        if (c.epilogue == gemv::kStore) launch_as(std::integral_constant<int, gemv::kStore>{});
        else if (c.epilogue == gemv::kAccumulate) launch_as(std::integral_constant<int, gemv::kAccumulate>{});
        else launch_as(std::integral_constant<int, gemv::kSiluMul>{});
    };
    if (c.kernel == Kernel::staged) ASSERT_TRUE(gemv::staged_fits(p, c.epilogue)) << "the case is not one the staged kernel takes";
    if (c.kernel == Kernel::skinny || c.kernel == Kernel::skinny_wgmma) ASSERT_TRUE(gemv::skinny_fits(p, c.epilogue)) << "the case is not one the skinny GEMM takes";
    launch();
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    for (int s = 0; s < n_seg; ++s) {
        const int n_out = c.n_out[s];
        const size_t n_y = size_t(c.n_token) * n_out;
        std::vector<float> got(n_y);
        std::vector<uint16_t> got_bf16(n_y);
        if (silu) {
            CHECK_CUDA(cudaMemcpy(got_bf16.data(), outputs[s], n_y * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n_y; ++i) got[i] = from_bf16_bits(got_bf16[i]);
        } else {
            CHECK_CUDA(cudaMemcpy(got.data(), outputs[s], n_y * 4, cudaMemcpyDeviceToHost));
        }
        int bad = 0;
        for (int t = 0; t < c.n_token; ++t) {
            for (int o = 0; o < n_out; ++o) {
                double dot = 0, mass = 0, dot2 = 0, mass2 = 0;
                for (int i = 0; i < c.n_in; ++i) {
                    const double xv = x.value[size_t(rows[size_t(t)]) * c.n_in + i];
                    const double wv = w[s].value[size_t(o) * c.n_in + i];
                    dot += wv * xv;
                    mass += std::fabs(wv * xv);
                    if (silu) {
                        const double uv = w2[s].value[size_t(o) * c.n_in + i];
                        dot2 += uv * xv;
                        mass2 += std::fabs(uv * xv);
                    }
                }
                const size_t at = size_t(t) * n_out + o;
                const double scale = inv_rms[size_t(t)];
                double expected = dot * scale + bias[s][o], bound = (5e-5 + 1e-6) * mass * scale + 1e-6;
                dot2 *= scale;
                mass2 *= scale;
                mass *= scale;
                if (c.epilogue == gemv::kAccumulate) expected += y0[s][at];
                if (silu) {
                    const double g = expected, u = dot2 + bias2[s][o];
                    expected = g / (1.0 + std::exp(-g)) * u;
                    bound = 5e-5 * (mass * std::fabs(u) + mass2 * std::fabs(g)) + std::ldexp(std::fabs(expected), -8) + 1e-6;
                }
                const double got_value = got[at];
                if (!(std::fabs(got_value - expected) <= bound) && bad++ < 5) {
                    ADD_FAILURE() << "segment " << s << " token " << t << " row " << o << ": got " << got_value << ", expected " << expected
                                  << " (bound " << bound << ")";
                }
            }
        }
        EXPECT_EQ(bad, 0) << "segment " << s << ": " << bad << " of " << n_y << " outputs off";
        if (c.norm_out) {  // against the kernel's own y: the bf16 operand and the tiles' sums of y^2
            std::vector<uint16_t> h(n_y);
            std::vector<float> tile_sum(size_t(c.n_token) * n_tile);
            CHECK_CUDA(cudaMemcpy(h.data(), p.norm_out.h, n_y * 2, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(tile_sum.data(), p.norm_out.sum_sq, tile_sum.size() * 4, cudaMemcpyDeviceToHost));
            int bad_h = 0, bad_sum = 0;
            for (int t = 0; t < c.n_token; ++t) {
                for (int tile = 0; tile < n_tile; ++tile) {
                    double squares = 0;
                    for (int o = tile * 16; o < std::min(n_out, tile * 16 + 16); ++o) {
                        const double y = got[size_t(t) * n_out + o], expected = y * norm_w.value[size_t(o)];
                        squares += y * y;
                        const double h_value = from_bf16_bits(h[size_t(t) * n_out + o]);
                        if (!(std::fabs(h_value - expected) <= std::ldexp(std::fabs(expected), -8) + 1e-30) && bad_h++ < 3) {
                            ADD_FAILURE() << "norm operand token " << t << " row " << o << ": got " << h_value << ", expected " << expected;
                        }
                    }
                    const double got_sum = tile_sum[size_t(t) * n_tile + tile];
                    if (!(std::fabs(got_sum - squares) <= 1e-5 * squares + 1e-30) && bad_sum++ < 3) {
                        ADD_FAILURE() << "tile sum of squares token " << t << " tile " << tile << ": got " << got_sum << ", expected " << squares;
                    }
                }
            }
            EXPECT_EQ(bad_h + bad_sum, 0);
        }
        // A second run (store and SwiGLU rewrite their output) must give the same bits.
        if (c.epilogue != gemv::kAccumulate) {
            std::vector<char> first(n_y * (silu ? 2 : 4)), second(first.size());
            CHECK_CUDA(cudaMemcpy(first.data(), outputs[s], first.size(), cudaMemcpyDeviceToHost));
            launch();
            CHECK_CUDA(cudaDeviceSynchronize());
            CHECK_CUDA(cudaMemcpy(second.data(), outputs[s], second.size(), cudaMemcpyDeviceToHost));
            EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size()), 0) << "segment " << s << ": runs differ";
        }
    }
    cudaFree(const_cast<void *>(static_cast<const void *>(reinterpret_cast<const char *>(p.x) - off * 2)));
    cudaFree(const_cast<int32_t *>(p.x_rows));
    cudaFree(const_cast<float *>(p.x_sum_sq));
    cudaFree(p.norm_out.h);
    cudaFree(const_cast<void *>(p.norm_out.w));
    cudaFree(p.norm_out.sum_sq);
    for (int s = 0; s < n_seg; ++s) {
        cudaFree(const_cast<void *>(static_cast<const void *>(reinterpret_cast<const char *>(p.segment[s].w) - off * 2)));
        if (p.segment[s].w2) cudaFree(const_cast<void *>(static_cast<const void *>(reinterpret_cast<const char *>(p.segment[s].w2) - off * 2)));
        cudaFree(const_cast<void *>(p.segment[s].bias));
        cudaFree(const_cast<void *>(p.segment[s].bias2));
        cudaFree(outputs[s]);
    }
}

// Runs a case on the clustered kernel, where it takes the shape (one token, n_in a power of two
// from 2048 to 16384, aligned operands) on the staged kernel, and where it takes it (n_in a multiple
// of 8, aligned operands) on the skinny GEMM, with mma.sync and (on a compute capability 9.0 device
// in a build with sm_90a) with wgmma: all against the same host math.
void run_kernels(Case c, uint32_t seed) {
    c.kernel = Kernel::cluster;
    run_case(c, seed);
    if (c.n_token == 1 && c.n_in >= 2048 && c.n_in <= 16384 && (c.n_in & (c.n_in - 1)) == 0 && !c.misaligned) {
        c.kernel = Kernel::staged;
        run_case(c, seed);
    }
    if (c.n_in % 8 == 0 && !c.misaligned && !(c.norm_out && c.n_out.size() > 1)) {
        c.kernel = Kernel::skinny;
        run_case(c, seed);
        if (gemv::skinny_wgmma_available()) {  // elsewhere the path does not run; SkinnyGemmAtDecodeBatchShapes insists on a 9.0 device
            c.kernel = Kernel::skinny_wgmma;
            run_case(c, seed);
        }
    }
}

TEST(CudaGemv, StoreMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 3, 8, 17, 64}) {
        for (int n_in : {2048, 1000, 2050, 7}) {
            run_kernels({n_in, n_token, gemv::kStore, {1003}, n_token % 2 == 1}, seed++);
        }
    }
    run_kernels({4096, 2, gemv::kStore, {1}, true}, seed++);
    // Several tiles per staged block, partial tiles at the blocks' edges, the stage ring wrapping.
    for (int n_token : {1, 8}) run_kernels({2048, n_token, gemv::kStore, {5003}, true}, seed++);
    // Rows longer than a stage (column slices), and two rows per stage.
    run_kernels({16384, 1, gemv::kStore, {300}, true}, seed++);
    run_kernels({4096, 1, gemv::kStore, {2000}, false}, seed++);
}

TEST(CudaGemv, AccumulateMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 3, 8, 17, 33}) {
        for (int n_in : {8192, 1000, 2050}) run_kernels({n_in, n_token, gemv::kAccumulate, {517}, true}, seed++);
    }
}

TEST(CudaGemv, SiluMulMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 2, 5, 8, 17}) {
        for (int n_in : {2048, 1000, 2050}) run_kernels({n_in, n_token, gemv::kSiluMul, {333}, n_token != 2}, seed++);
    }
    run_kernels({8192, 1, gemv::kSiluMul, {700}, true}, seed++);  // gate and up rows sliced across stages
}

TEST(CudaGemv, ThreeSegmentsMatchHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 4, 9}) {
        run_kernels({2048, n_token, gemv::kStore, {2048, 512, 512}, false}, seed++);
        run_kernels({1000, n_token, gemv::kStore, {61, 1, 130}, true}, seed++);
    }
}

TEST(CudaGemv, FoldedNormMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 3, 8, 17, 33, 64}) {
        for (int n_in : {2048, 1000, 7}) {
            Case in{n_in, n_token, gemv::kStore, {1003}, n_token % 2 == 1};
            in.norm_in = true;
            in.rows = n_in == 2048 && n_token <= 8;
            run_kernels(in, seed++);
        }
        Case out{2048, n_token, gemv::kAccumulate, {2048}, true};
        out.norm_out = true;
        run_kernels(out, seed++);
        Case odd{1000, n_token, gemv::kAccumulate, {517}, n_token % 2 == 0};
        odd.norm_out = true;
        run_kernels(odd, seed++);
    }
    for (int n_token : {1, 5, 8}) {
        Case qkv{2048, n_token, gemv::kStore, {2048, 512, 512}, false};
        qkv.norm_in = true;
        run_kernels(qkv, seed++);
        Case swiglu{2048, n_token, gemv::kSiluMul, {333}, true};
        swiglu.norm_in = true;
        run_kernels(swiglu, seed++);
        Case head{2048, n_token, gemv::kStore, {77}, false, true};
        head.norm_in = true;
        head.rows = true;
        run_kernels(head, seed++);
    }
}

// The skinny GEMM at the shapes of a 16..64-token decode step of a llama-sized model (every case
// also runs on the clustered kernel): q/k/v in one launch with the folded norm, gate/up, the
// residual GEMVs writing the next norm's operand, logit rows; and inputs that leave the last blocks
// of a cluster with a partial chunk or none (2112 = 33 chunks of 64 over 8 blocks).
TEST(CudaGemv, SkinnyGemmAtDecodeBatchShapes) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
#if defined(HOTPASS_CUDA_SM90A)
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major == 9 && minor == 0 && gemv::kSkinnyWarps % 4 == 0 && gemv::kSkinnyChunk == 64) {
        EXPECT_TRUE(gemv::skinny_wgmma_available()) << "sm_90a build on a 9.0 device: the wgmma path must run";
    }
#endif
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {16, 29, 64}) {
        Case qkv{2048, n_token, gemv::kStore, {2048, 512, 512}, false};
        qkv.norm_in = true;
        run_kernels(qkv, seed++);
        Case swiglu{2048, n_token, gemv::kSiluMul, {1000}, true};
        swiglu.norm_in = true;
        run_kernels(swiglu, seed++);
        Case down{8192, n_token, gemv::kAccumulate, {517}, n_token != 16};
        down.norm_out = true;
        run_kernels(down, seed++);
        Case head{2048, n_token, gemv::kStore, {300}, false, false, true, true};
        run_kernels(head, seed++);
        run_kernels({2112, n_token, gemv::kStore, {40}, true}, seed++);
        run_kernels({264, n_token, gemv::kAccumulate, {130}, true}, seed++);
    }
}

// The q/k/v launch's head epilogue (HeadOut, knob skinny_head): one launch must leave q roped (and
// normed where the model has q/k norm) in segment 0's output and exactly the step's K/V rows in the
// paged cache, everything else in the cache untouched. Against float64 host math: the projection
// (and the folded input norm), bias, the head's RMSNorm, RoPE at each token's position.
struct HeadCase {
    int n_in, n_token, d_head, n_head, n_head_kv;
    bool qk_norm, norm_in;
    hp_dtype kv_dtype;
    gemv::SkinnyMma mma;
};

void run_head_case(const HeadCase &c, uint32_t seed) {
    SCOPED_TRACE("n_in " + std::to_string(c.n_in) + ", n_token " + std::to_string(c.n_token) + ", d_head " + std::to_string(c.d_head) +
                 ", heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + (c.qk_norm ? ", q/k norm" : "") +
                 (c.norm_in ? ", norm in" : "") + (c.kv_dtype == HP_DTYPE_F32 ? ", f32 cache" : ", bf16 cache") +
                 (c.mma == gemv::SkinnyMma::kWgmma ? ", wgmma" : c.mma == gemv::SkinnyMma::kMmaSync ? ", mma.sync" : ""));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const int d = c.d_head, half = d / 2, n_out[3] = {c.n_head * d, c.n_head_kv * d, c.n_head_kv * d};
    const Bf16Buffer x = random_bf16(rng, size_t(c.n_token) * c.n_in, 1.0f);
    const int n_sum_sq = 13;
    std::vector<float> sum_sq(size_t(c.n_token) * n_sum_sq), inv_rms(size_t(c.n_token), 1.0f);
    std::uniform_real_distribution<float> positive(0.0f, 4.0f * c.n_in / n_sum_sq);
    for (float &v : sum_sq) v = positive(rng);
    if (c.norm_in) {
        for (int t = 0; t < c.n_token; ++t) {
            double total = 0;
            for (int i = 0; i < n_sum_sq; ++i) total += sum_sq[size_t(t) * n_sum_sq + i];
            inv_rms[size_t(t)] = float(1.0 / std::sqrt(total / c.n_in + 1e-5));
        }
    }
    // Sequences: token t is sequence seq[t] (shuffled), at a random position; paged blocks of 16
    // tokens, block tables a shuffled pool.
    const int block_tokens = 16, max_blocks = 64, n_block = c.n_token * max_blocks;
    std::vector<int32_t> seq(static_cast<size_t>(c.n_token)), positions(static_cast<size_t>(c.n_token)), tables(size_t(c.n_token) * max_blocks),
        pool(static_cast<size_t>(n_block));
    std::iota(seq.begin(), seq.end(), 0);
    std::shuffle(seq.begin(), seq.end(), rng);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::copy(pool.begin(), pool.end(), tables.begin());
    std::uniform_int_distribution<int> any_position(0, max_blocks * block_tokens - 1);
    for (int &position : positions) position = any_position(rng);
    positions[0] = 0;
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i) inv_freq[size_t(i)] = float(std::pow(10000.0, -2.0 * i / d));

    gemv::Params p;
    p.n_in = c.n_in;
    p.n_token = c.n_token;
    p.n_segment = 3;
    p.x = reinterpret_cast<const __nv_bfloat16 *>(upload(x.host));
    if (c.norm_in) {
        p.x_sum_sq = upload(sum_sq);
        p.n_sum_sq = n_sum_sq;
        p.norm_eps = 1e-5f;
    }
    Bf16Buffer w[3], norm_w[2];
    std::vector<float> bias[3];
    for (int s = 0; s < 3; ++s) {
        w[s] = random_bf16(rng, size_t(n_out[s]) * c.n_in, 0.05f);
        bias[s].resize(size_t(n_out[s]));
        for (float &b : bias[s]) b = uniform(rng);
        p.segment[s].w = reinterpret_cast<const __nv_bfloat16 *>(upload(w[s].host));
        p.segment[s].n_out = n_out[s];
        p.segment[s].bias = upload(bias[s]);
        p.segment[s].bias_dtype = HP_DTYPE_F32;
        // k and v land in the cache: their outputs stay NaN
        p.segment[s].y = upload(std::vector<float>(size_t(c.n_token) * n_out[s], NAN));
    }
    const size_t row_width = size_t(c.n_head_kv) * d, cache_elements = size_t(n_block) * block_tokens * row_width;
    const size_t element = c.kv_dtype == HP_DTYPE_F32 ? 4 : 2;
    std::vector<char> poison(cache_elements * element, char(0x7f));  // 0x7f7f...: ~3.4e38, a value no case writes
    gemv::HeadOut &h = p.head;
    h.d_head = d;
    h.n_head_kv = c.n_head_kv;
    h.eps = 1e-6f;
    h.inv_freq = upload(inv_freq);
    if (c.qk_norm) {
        for (auto &n : norm_w) n = random_bf16(rng, size_t(d), 1.0f);
        h.norm_dtype = HP_DTYPE_BF16;
        h.q_norm = upload(norm_w[0].host);
        h.k_norm = upload(norm_w[1].host);
    }
    h.positions = upload(positions);
    h.token_seq = upload(seq);
    h.block_tables = upload(tables);
    h.block_tokens = block_tokens;
    h.max_blocks = max_blocks;
    h.kv_dtype = c.kv_dtype;
    h.k_cache = upload(poison);
    h.v_cache = upload(poison);
    auto release = [&] {
        for (const void *ptr : {static_cast<const void *>(p.x), static_cast<const void *>(p.x_sum_sq), static_cast<const void *>(h.inv_freq), h.q_norm,
                                h.k_norm, static_cast<const void *>(h.positions), static_cast<const void *>(h.token_seq),
                                static_cast<const void *>(h.block_tables), static_cast<const void *>(h.k_cache), static_cast<const void *>(h.v_cache)}) {
            cudaFree(const_cast<void *>(ptr));
        }
        for (const gemv::Segment &segment : p.segment) {
            cudaFree(const_cast<__nv_bfloat16 *>(segment.w));
            cudaFree(const_cast<void *>(segment.bias));
            cudaFree(segment.y);
        }
    };
    ASSERT_TRUE(h.k_cache && h.v_cache && h.block_tables && p.segment[2].y);
    if (c.mma == gemv::SkinnyMma::kByKnob && !gemv::skinny_head_fits(p)) {
        // With the default knobs it must (the plugin relies on it); other knob values may send the
        // launch elsewhere (skinny_min_tokens, gemv_staged), and then the head kernel runs.
        EXPECT_FALSE(HP_CUDA_SKINNY_MIN_TOKENS <= c.n_token && HP_CUDA_GEMV_STAGED == 0) << "the plugin's launch would not take the head epilogue";
        release();
        return;
    }
    if (c.mma == gemv::SkinnyMma::kByKnob) gemv::launch<gemv::kStore>(p, nullptr);
    else gemv::launch_skinny<gemv::kStore>(p, nullptr, c.mma);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());

    std::vector<float> q(size_t(c.n_token) * n_out[0]);
    std::vector<char> k_cache(poison.size()), v_cache(poison.size());
    CHECK_CUDA(cudaMemcpy(q.data(), p.segment[0].y, q.size() * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(k_cache.data(), h.k_cache, k_cache.size(), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(v_cache.data(), h.v_cache, v_cache.size(), cudaMemcpyDeviceToHost));
    auto cache_value = [&](const std::vector<char> &cache, size_t i) {
        if (c.kv_dtype == HP_DTYPE_F32) {
            float v;
            std::memcpy(&v, cache.data() + i * 4, 4);
            return double(v);
        }
        uint16_t bits;
        std::memcpy(&bits, cache.data() + i * 2, 2);
        return double(from_bf16_bits(bits));
    };
    std::vector<char> written(cache_elements, char(0));
    int bad = 0;
    for (int t = 0; t < c.n_token; ++t) {
        const int position = positions[size_t(t)];
        const size_t slot = size_t(tables[size_t(seq[size_t(t)]) * max_blocks + position / block_tokens]) * block_tokens + position % block_tokens;
        for (int s = 0; s < 3; ++s) {
            for (int head = 0; head < n_out[s] / d; ++head) {
                // the head's values after bias (and error bounds), then its norm
                std::vector<double> value(static_cast<size_t>(d)), bound(static_cast<size_t>(d));
                for (int i = 0; i < d; ++i) {
                    const int row = head * d + i;
                    double dot = 0, mass = 0;
                    for (int k = 0; k < c.n_in; ++k) {
                        const double product = double(w[s].value[size_t(row) * c.n_in + k]) * x.value[size_t(t) * c.n_in + k];
                        dot += product;
                        mass += std::fabs(product);
                    }
                    value[size_t(i)] = dot * inv_rms[size_t(t)] + bias[s][size_t(row)];
                    bound[size_t(i)] = (5e-5 + 1e-6) * mass * inv_rms[size_t(t)] + 1e-6;
                }
                if (s < 2 && c.qk_norm) {
                    // 1/rms moves by at most |bound| / |value| relative (Cauchy-Schwarz), plus rsqrtf's rounding
                    double squares = 0, bound_squares = 0;
                    for (int i = 0; i < d; ++i) squares += value[size_t(i)] * value[size_t(i)], bound_squares += bound[size_t(i)] * bound[size_t(i)];
                    const double scale = 1.0 / std::sqrt(squares / d + 1e-6), scale_error = std::sqrt(bound_squares / squares) + 1e-6;
                    for (int i = 0; i < d; ++i) {
                        const double nw = std::fabs(norm_w[s].value[size_t(i)]);
                        bound[size_t(i)] = (bound[size_t(i)] + std::fabs(value[size_t(i)]) * scale_error) * scale * nw + 1e-6;
                        value[size_t(i)] *= scale * norm_w[s].value[size_t(i)];
                    }
                }
                std::vector<double> expected(value), limit(bound);
                if (s < 2) {
                    for (int i = 0; i < half; ++i) {
                        const double angle = double(position) * inv_freq[size_t(i)], first = value[size_t(i)], second = value[size_t(i + half)];
                        expected[size_t(i)] = first * std::cos(angle) - second * std::sin(angle);
                        expected[size_t(i + half)] = second * std::cos(angle) + first * std::sin(angle);
                        limit[size_t(i)] = limit[size_t(i + half)] = bound[size_t(i)] + bound[size_t(i + half)] + 1e-6 * (std::fabs(first) + std::fabs(second));
                    }
                }
                for (int i = 0; i < d; ++i) {
                    double got, allowed = limit[size_t(i)];
                    if (s == 0) {
                        got = q[size_t(t) * n_out[0] + size_t(head * d + i)];
                    } else {
                        const size_t at = slot * row_width + size_t(head * d + i);
                        written[at] = 1;
                        got = cache_value(s == 1 ? k_cache : v_cache, at);
                        if (c.kv_dtype != HP_DTYPE_F32) allowed += std::ldexp(std::fabs(expected[size_t(i)]), -8);
                    }
                    if (!(std::fabs(got - expected[size_t(i)]) <= allowed) && bad++ < 5) {
                        ADD_FAILURE() << "segment " << s << " token " << t << " head " << head << " element " << i << ": got " << got << ", expected "
                                      << expected[size_t(i)] << " (bound " << allowed << ")";
                    }
                }
            }
        }
    }
    EXPECT_EQ(bad, 0);
    // Every other cache element keeps its poison bits; k and v outputs are not written.
    size_t stray = 0;
    for (size_t i = 0; i < cache_elements; ++i) {
        if (written[i]) continue;
        stray += std::memcmp(k_cache.data() + i * element, poison.data(), element) != 0;
        stray += std::memcmp(v_cache.data() + i * element, poison.data(), element) != 0;
    }
    EXPECT_EQ(stray, 0u) << "cache elements written outside the step's rows";
    for (int s = 1; s < 3; ++s) {
        std::vector<float> y(size_t(c.n_token) * n_out[s]);
        CHECK_CUDA(cudaMemcpy(y.data(), p.segment[s].y, y.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); })) << "segment " << s << "'s output written";
    }
    release();
}

TEST(CudaGemv, SkinnyHeadEpilogueMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    if (!gemv::kSkinnyHeadRoom) GTEST_SKIP() << "knob skinny_head 0 (or blocks too large for it): the head kernel runs";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    const int rows = gemv::skinny_rows_of(gemv::kStore);
    // Heads that divide a block's rows: llama-3.2-1b's d_head 64 (32 / 8 heads), and 32 with head
    // counts that leave a block half empty; qwen3's q/k norm; f32 and bf16 caches; folded input norm.
    std::vector<HeadCase> cases;
    for (int n_token : {1, 3, 8, 17, 32}) {
        cases.push_back({2048, n_token, 64, 32, 8, false, n_token % 2 == 1, HP_DTYPE_BF16, gemv::SkinnyMma::kByKnob});
        cases.push_back({520, n_token, 32, 5, 3, true, true, n_token == 8 ? HP_DTYPE_F32 : HP_DTYPE_BF16, gemv::SkinnyMma::kByKnob});
    }
    cases.push_back({1024, 8, 64, 16, 4, true, false, HP_DTYPE_BF16, gemv::SkinnyMma::kMmaSync});
    if (gemv::skinny_wgmma_available()) cases.push_back({1024, 8, 64, 16, 4, true, false, HP_DTYPE_BF16, gemv::SkinnyMma::kWgmma});
    for (const HeadCase &c : cases) {
        if (rows % c.d_head != 0) continue;
        run_head_case(c, seed++);
    }
    // A head longer than a block's rows: the launch keeps the head kernel.
    gemv::Params p;
    p.n_in = 2048;
    p.n_token = 1;
    p.n_segment = 3;
    p.head.d_head = 2 * rows;
    for (gemv::Segment &segment : p.segment) segment.n_out = 4 * rows;
    EXPECT_FALSE(gemv::skinny_head_fits(p));
}

TEST(CudaGemv, L2PrefetchRangesLeaveResultsUnchanged) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int n_token : {1, 8, 33}) {
        for (int epilogue : {gemv::kStore, gemv::kAccumulate, gemv::kSiluMul}) {
            Case c{epilogue == gemv::kAccumulate ? 8192 : 2048, n_token, epilogue, {epilogue == gemv::kStore ? 1003 : 517}, true};
            c.prefetch = true;
            c.norm_in = epilogue != gemv::kAccumulate;
            run_kernels(c, seed++);
        }
        Case qkv{2056, n_token, gemv::kStore, {2048, 512, 520}, false};
        qkv.prefetch = true;
        run_kernels(qkv, seed++);
        Case odd{1000, n_token, gemv::kStore, {77}, true, true};  // element path: no per-iteration prefetch
        odd.prefetch = true;
        run_kernels(odd, seed++);
    }
}

// The plan of l2_prefetch.h: windows asked for in step order ask for each byte at most once.
TEST(CudaGemv, WeightStreamAsksForEachByteOnce) {
    namespace base = hp_cuda_baseline;
    std::vector<char> arena(size_t(1) << 20);
    char *at = arena.data();
    auto take = [&](size_t bytes) { char *ptr = at; at += bytes; return ptr; };
    struct Weight { const char *ptr, *ptr2; uint64_t bytes; };
    std::vector<Weight> weights;
    base::WeightStream stream;
    std::vector<uint64_t> fronts;
    for (int layer = 0; layer < 3; ++layer) {  // q, k, v (contiguous), o, gate/up (elsewhere), down
        for (size_t bytes : {4096u, 1024u, 1024u, 4096u}) weights.push_back({take(bytes), nullptr, bytes});
        const char *gate = take(16384);
        take(512);
        weights.push_back({gate, take(16384), 16384});
        weights.push_back({take(8192), nullptr, 8192});
        for (size_t w = weights.size() - 6; w < weights.size(); ++w) {
            stream.add(weights[w].ptr, weights[w].bytes, weights[w].ptr2);
            if (w != weights.size() - 6 && w != weights.size() - 5) fronts.push_back(stream.size());
        }
    }
    weights.push_back({take(65536), nullptr, 65536});
    stream.add(weights.back().ptr, weights.back().bytes);
    fronts.push_back(stream.size());
    // Which stream offset each weight byte has (-1: none), to check the windows against the fronts.
    std::vector<int64_t> offset(arena.size(), -1);
    for (size_t w = 0, at_stream = 0; w < weights.size(); ++w) {
        for (uint64_t i = 0; i < weights[w].bytes; ++i) {
            offset[size_t(weights[w].ptr - arena.data()) + i] = int64_t(at_stream + (weights[w].ptr2 ? 2 * i : i));
            if (weights[w].ptr2) offset[size_t(weights[w].ptr2 - arena.data()) + i] = int64_t(at_stream + 2 * i + 1);
        }
        at_stream += weights[w].ptr2 ? 2 * weights[w].bytes : weights[w].bytes;
    }
    for (uint64_t lookahead : {uint64_t(0), uint64_t(3000), uint64_t(20000), uint64_t(1) << 30}) {
        SCOPED_TRACE("lookahead " + std::to_string(lookahead));
        std::vector<int> seen(arena.size(), 0);
        stream.restart();
        uint64_t asked = 0;
        auto take_window = [&](uint64_t front, uint64_t ahead) {
            const gemv::L2Prefetch prefetch = stream.next(front, ahead);
            for (int r = 0; r < gemv::L2Prefetch::kMaxRanges; ++r) {
                const char *ptr = static_cast<const char *>(prefetch.ptr[r]);
                for (uint32_t i = 0; ptr && i < prefetch.bytes[r]; ++i) {
                    const size_t byte = size_t(ptr - arena.data()) + i;
                    ++seen[byte];
                    EXPECT_GE(offset[byte] + 1, int64_t(front)) << "a byte before the front";
                    EXPECT_LT(offset[byte], int64_t(front + ahead) + 1) << "a byte past the window";
                }
                asked += ptr ? prefetch.bytes[r] : 0;
            }
        };
        for (uint64_t front : fronts) {
            take_window(front, lookahead + 777);  // an idle kernel's window, then the GEMV's
            take_window(front, lookahead);
        }
        for (int pass = 0; pass < 64 && lookahead > stream.size(); ++pass) take_window(fronts.front(), lookahead);  // windows stopped at kMaxRanges
        for (size_t byte = 0; byte < arena.size(); ++byte) ASSERT_LE(seen[byte], 1) << "byte " << byte << " asked for twice";
        if (lookahead > stream.size()) EXPECT_EQ(asked, stream.size() - fronts.front());  // everything past the first front
    }
    // A window starts at the front and ends where asked, gate and up advancing together.
    stream.restart();
    const gemv::L2Prefetch first = stream.next(4096 + 2048, 4096 + 1000);  // o, then 1000 stream bytes of gate/up
    ASSERT_EQ(first.ptr[0], weights[3].ptr);
    EXPECT_EQ(first.bytes[0], 4096u + 500u);  // o and the start of gate are contiguous: one range
    EXPECT_EQ(first.ptr[1], weights[4].ptr2);
    EXPECT_EQ(first.bytes[1], 500u);
    EXPECT_EQ(first.ptr[2], nullptr);
}

TEST(CudaGemv, UnalignedOperandsTakeTheElementPath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    for (int epilogue : {gemv::kStore, gemv::kAccumulate, gemv::kSiluMul}) {
        Case c{2048, 3, epilogue, {77}, true, true};
        run_kernels(c, seed++);
    }
}

}  // namespace
