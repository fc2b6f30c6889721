// The CUDA baseline's head kernel (forward/cuda/baseline/kernels.cuh head_kernel: bias, q/k RMSNorm, RoPE, K and V
// into the paged cache) reading q, k and v from one row [q | k | v] a token (knob gemm_qkv: the output of the q/k/v
// batch of cuBLAS GEMMs) against the same kernel reading them from three buffers (the layout every other path
// writes): fresh random q/k/v, biases and norm weights per case, GQA groups 1, 4 and 8, d_head 32, 64 and 128, 1 to
// 70 tokens of several sequences at random positions in shuffled paged blocks, bf16 and f16 caches. The same
// arithmetic on the same numbers: q (written to its own buffer, poisoned first) and the whole cache must come out
// bit-identical. Built with the plugin's knob values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../forward/cuda/baseline/kernels.cuh"
#include "cuda_test_util.h"

namespace {

using namespace hp_cuda_test;
namespace base = hp_cuda_baseline;

struct Case {
    int n_token, n_head, n_head_kv, d_head;
    hp_dtype kv_dtype = HP_DTYPE_BF16;
    bool bias = true, norm = true;
};

std::string describe(const Case &c) {
    return std::to_string(c.n_token) + " tokens, " + std::to_string(c.n_head) + " / " + std::to_string(c.n_head_kv) + " heads, d_head " +
           std::to_string(c.d_head) + (c.kv_dtype == HP_DTYPE_F16 ? ", f16 cache" : ", bf16 cache") + (c.bias ? ", biases" : "") +
           (c.norm ? ", q/k norms" : "");
}

void check_case(const Case &c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int d = c.d_head, q_w = c.n_head * d, kv_w = c.n_head_kv * d, width = q_w + 2 * kv_w;
    std::vector<float> qkv(size_t(c.n_token) * width);
    for (float &v : qkv) v = normal(rng);
    std::vector<float> q(size_t(c.n_token) * q_w), k(size_t(c.n_token) * kv_w), v(size_t(c.n_token) * kv_w);
    for (int t = 0; t < c.n_token; ++t) {
        std::copy_n(qkv.begin() + size_t(t) * width, q_w, q.begin() + size_t(t) * q_w);
        std::copy_n(qkv.begin() + size_t(t) * width + q_w, kv_w, k.begin() + size_t(t) * kv_w);
        std::copy_n(qkv.begin() + size_t(t) * width + q_w + kv_w, kv_w, v.begin() + size_t(t) * kv_w);
    }
    auto bf16_vector = [&](size_t n, float scale) {
        std::vector<uint16_t> out(n);
        for (uint16_t &b : out) b = to_bf16_bits(1.0f + scale * normal(rng));
        return out;
    };
    const std::vector<uint16_t> bq = bf16_vector(size_t(q_w), 0.2f), bk = bf16_vector(size_t(kv_w), 0.2f), bv = bf16_vector(size_t(kv_w), 0.2f);
    const std::vector<uint16_t> q_norm = bf16_vector(size_t(d), 0.3f), k_norm = bf16_vector(size_t(d), 0.3f);
    std::vector<float> inv_freq(size_t(d / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = 1.0f / std::pow(10000.0f, float(2 * i) / float(d));
    // Sequences of 1-8 tokens at consecutive positions from a random start; 16-token blocks shuffled over the cache.
    const int block_tokens = 16, max_blocks = 8;
    std::vector<int32_t> positions, token_seq;
    std::uniform_int_distribution<int> length(1, 8), start(0, max_blocks * block_tokens - 9);
    int n_seq = 0;
    while (int(positions.size()) < c.n_token) {
        const int first = start(rng), n = std::min(length(rng), c.n_token - int(positions.size()));
        for (int i = 0; i < n; ++i) {
            positions.push_back(first + i);
            token_seq.push_back(n_seq);
        }
        ++n_seq;
    }
    std::vector<int32_t> tables(size_t(n_seq) * max_blocks);
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng);
    const size_t cache_elements = tables.size() * block_tokens * size_t(kv_w);
    const std::vector<uint16_t> cache(cache_elements, 0x7fc1);  // NaN: the rows no token writes must stay so

    float *qkv_d = upload(qkv), *q_a = upload(q), *k_d = upload(k), *v_d = upload(v), *inv_freq_d = upload(inv_freq);
    float *q_b = upload(std::vector<float>(q.size(), std::nanf("")));
    uint16_t *bq_d = upload(bq), *bk_d = upload(bk), *bv_d = upload(bv), *q_norm_d = upload(q_norm), *k_norm_d = upload(k_norm);
    uint16_t *k_cache_a = upload(cache), *v_cache_a = upload(cache), *k_cache_b = upload(cache), *v_cache_b = upload(cache);
    int32_t *positions_d = upload(positions), *token_seq_d = upload(token_seq), *tables_d = upload(tables);
    ASSERT_TRUE(qkv_d && q_a && k_d && v_d && inv_freq_d && q_b && bq_d && bk_d && bv_d && q_norm_d && k_norm_d && k_cache_a && v_cache_a && k_cache_b &&
                v_cache_b && positions_d && token_seq_d && tables_d);
    base::HeadParams hp{c.n_head, c.n_head_kv, d, 1e-6f, HP_DTYPE_BF16, c.bias ? bq_d : nullptr, c.bias ? bk_d : nullptr, c.bias ? bv_d : nullptr,
                        HP_DTYPE_BF16, c.norm ? q_norm_d : nullptr, c.norm ? k_norm_d : nullptr, inv_freq_d, block_tokens, max_blocks};
    base::HeadParams packed = hp;
    packed.qkv = qkv_d;
    packed.qkv_stride = width;
    const dim3 grid(c.n_head + c.n_head_kv, c.n_token);
    const int threads = std::min(256, (d + 31) / 32 * 32);
    if (c.kv_dtype == HP_DTYPE_BF16) {
        base::head_kernel<HP_DTYPE_BF16><<<grid, threads>>>(hp, q_a, k_d, v_d, positions_d, token_seq_d, tables_d, k_cache_a, v_cache_a);
        base::head_kernel<HP_DTYPE_BF16><<<grid, threads>>>(packed, q_b, nullptr, nullptr, positions_d, token_seq_d, tables_d, k_cache_b, v_cache_b);
    } else {
        base::head_kernel<HP_DTYPE_F16><<<grid, threads>>>(hp, q_a, k_d, v_d, positions_d, token_seq_d, tables_d, k_cache_a, v_cache_a);
        base::head_kernel<HP_DTYPE_F16><<<grid, threads>>>(packed, q_b, nullptr, nullptr, positions_d, token_seq_d, tables_d, k_cache_b, v_cache_b);
    }
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> got_q_a(q.size()), got_q_b(q.size());
    std::vector<uint16_t> ka(cache_elements), va(cache_elements), kb(cache_elements), vb(cache_elements);
    CHECK_CUDA(cudaMemcpy(got_q_a.data(), q_a, q.size() * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(got_q_b.data(), q_b, q.size() * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(ka.data(), k_cache_a, cache_elements * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(va.data(), v_cache_a, cache_elements * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(kb.data(), k_cache_b, cache_elements * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(vb.data(), v_cache_b, cache_elements * 2, cudaMemcpyDeviceToHost));
    // Both must have written every token's rows (a q element or a cache row left at its poison would be NaN in one).
    EXPECT_EQ(std::memcmp(got_q_a.data(), got_q_b.data(), q.size() * 4), 0) << "q differs";
    EXPECT_TRUE(std::none_of(got_q_b.begin(), got_q_b.end(), [](float x) { return std::isnan(x); })) << "q not all written";
    EXPECT_TRUE(ka == kb) << "K cache differs";
    EXPECT_TRUE(va == vb) << "V cache differs";
    const size_t written = size_t(std::count_if(kb.begin(), kb.end(), [](uint16_t bits) { return bits != 0x7fc1; }));
    EXPECT_GT(written, size_t(0)) << "no K row written";
    for (void *ptr : {static_cast<void *>(qkv_d), static_cast<void *>(q_a), static_cast<void *>(k_d), static_cast<void *>(v_d),
                      static_cast<void *>(inv_freq_d), static_cast<void *>(q_b), static_cast<void *>(bq_d), static_cast<void *>(bk_d),
                      static_cast<void *>(bv_d), static_cast<void *>(q_norm_d), static_cast<void *>(k_norm_d), static_cast<void *>(k_cache_a),
                      static_cast<void *>(v_cache_a), static_cast<void *>(k_cache_b), static_cast<void *>(v_cache_b),
                      static_cast<void *>(positions_d), static_cast<void *>(token_seq_d), static_cast<void *>(tables_d)}) {
        cudaFree(ptr);
    }
}

TEST(CudaHead, PackedQkvRowsMatchSeparateBuffers) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const std::vector<Case> cases = {
        {33, 32, 8, 64},                       // llama-3.2-1b above the decode kernels' limit
        {64, 32, 8, 64, HP_DTYPE_BF16, false, false},
        {70, 32, 4, 128, HP_DTYPE_BF16, false, true},  // qwen3-30b-a3b's shape (q/k norms, no biases)
        {5, 4, 4, 32, HP_DTYPE_F16},           // no GQA
        {17, 16, 2, 128},
        {1, 8, 1, 64, HP_DTYPE_F16, true, false},
    };
    uint32_t seed = 3;
    for (const Case &c : cases) check_case(c, seed++);
}

}  // namespace
