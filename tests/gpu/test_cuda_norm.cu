// The CUDA baseline's RMSNorm launches (forward/cuda/baseline/kernels.cuh launch_rms_norm: knob norm_vec 0, the
// scalar rms_norm_bf16_kernel; 1, rms_norm_rows_kernel with the row in registers; 2, that kernel also doing the
// embedding lookup and the token -> sequence map for the first layer's norm) against float64 math on the host over
// the same inputs: fresh random rows and norm weights (bf16, f16, f32) per case, row lengths that give the vector
// kernel 1, 2, 4 and 8 chunks a thread, partial last chunks, its limit (32 elements a thread) and past it, lengths
// that are not a multiple of 4 and rows one float off 16-byte alignment (both taken by the scalar kernel), gathered
// rows (the lm_head's logit rows), 1 to 64 rows, and the residual add of a projection split along its inputs (knob
// gemm_split_k: x += bias + 2 or 4 partial products before the norm, in the norm's launch or, in mode 0 and where
// the vector kernel cannot go, by add_partials_kernel). Outputs, x (when the embedding fills it) and token_seq are
// poisoned first, so an unwritten element fails; a second run must give the same bits. Every mode's output is also
// compared with mode 0's (the plain kernel) on the same inputs. Built with the plugin's knob values.
//
// Tolerance: the output is rounded to bf16 (2^-9 relative) after a float32 sum of squares and rsqrtf (a few ulp of
// float32), so each element is held to 2^-8 |ref| (+ 1e-30); two modes differ at most by one rounding of bf16 each
// way, 2^-7 |ref|. The embedding rows written to x must be the table's values exactly; x after a residual add is
// held to 2^-20 of the sum of its terms' magnitudes (float32 sums of up to 6 terms) against float64, and the output
// also to that error carried through the norm (scale x |weight| x it).
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
    int n;                                 // row length (d_model)
    int n_row;                             // rows normalised
    hp_dtype w_dtype = HP_DTYPE_BF16;      // of the norm weight
    bool rows = false;                     // gather rows[r] out of 2 n_row + 3 rows of x (the logit rows)
    bool misaligned = false;               // x one float past a 16-byte boundary
    bool embed = false;                    // the first layer's norm: x from an embedding table, token_seq written
    hp_dtype table_dtype = HP_DTYPE_BF16;  // of the embedding table
    int n_partial = 0;                     // > 0: x += bias + that many partial products first (NormResidual)
    bool bias = false;                     // with n_partial: a bf16 bias
};

std::string describe(const Case &c) {
    return "n " + std::to_string(c.n) + ", rows " + std::to_string(c.n_row) + ", weight dtype " + std::to_string(int(c.w_dtype)) +
           (c.rows ? ", gathered rows" : "") + (c.misaligned ? ", misaligned x" : "") +
           (c.embed ? ", embedding (table dtype " + std::to_string(int(c.table_dtype)) + ")" : "") +
           (c.n_partial ? ", residual of " + std::to_string(c.n_partial) + " partials" + (c.bias ? " and a bias" : "") : "");
}

// Random values stored as `dtype`, and the same numbers as float.
struct Stored {
    std::vector<uint8_t> bytes;
    std::vector<float> value;
};
Stored random_stored(std::mt19937 &rng, hp_dtype dtype, size_t n, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    Stored s;
    const size_t size = dtype == HP_DTYPE_F32 ? 4 : 2;
    s.bytes.resize(n * size);
    for (size_t i = 0; i < n; ++i) {
        const float v = normal(rng);
        if (dtype == HP_DTYPE_F32) {
            std::memcpy(&s.bytes[i * 4], &v, 4);
            s.value.push_back(v);
        } else {
            const uint16_t bits = dtype == HP_DTYPE_F16 ? to_f16_bits(v) : to_bf16_bits(v);
            std::memcpy(&s.bytes[i * 2], &bits, 2);
            s.value.push_back(dtype == HP_DTYPE_F16 ? from_f16_bits(bits) : from_bf16_bits(bits));
        }
    }
    return s;
}

struct Result {
    std::vector<uint16_t> out;       // bf16 bits, n_row x n
    std::vector<float> x;            // x after the launch (embedding cases: filled by it)
    std::vector<int32_t> token_seq;  // embedding cases
};

constexpr float kEps = 1e-5f;

// One case through launch_rms_norm in `mode`, twice (the second run must give the same bits); also checks every
// output against float64 host math. Returns what the first run wrote.
Result run_mode(const Case &c, int mode, uint32_t seed) {
    std::mt19937 rng(seed);
    const int n_x = c.rows ? 2 * c.n_row + 3 : c.n_row;
    const Stored weight = random_stored(rng, c.w_dtype, size_t(c.n), 1.0f);
    std::vector<float> x_host(size_t(n_x) * c.n);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float &v : x_host) v = normal(rng);
    std::vector<int32_t> rows(c.n_row);
    if (c.rows) {
        std::vector<int32_t> all(n_x);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::copy(all.begin(), all.begin() + c.n_row, rows.begin());
    }
    // Embedding: a table of 37 rows, token ids into it (repeats allowed), sequences of 1-3 tokens.
    const int n_vocab = 37;
    const Stored table = random_stored(rng, c.table_dtype, size_t(n_vocab) * c.n, 2.0f);
    std::vector<int32_t> token_ids(c.n_row), seq_token_start{0}, expect_seq(c.n_row);
    std::uniform_int_distribution<int> token(0, n_vocab - 1), length(1, 3);
    for (int &t : token_ids) t = token(rng);
    while (seq_token_start.back() < c.n_row) seq_token_start.push_back(std::min(c.n_row, seq_token_start.back() + length(rng)));
    const int n_seq = int(seq_token_start.size()) - 1;
    for (int s = 0; s < n_seq; ++s) {
        for (int t = seq_token_start[size_t(s)]; t < seq_token_start[size_t(s) + 1]; ++t) expect_seq[size_t(t)] = s;
    }
    std::vector<float> partials(size_t(c.n_partial) * c.n_row * c.n);
    for (float &v : partials) v = normal(rng);
    const Stored bias = random_stored(rng, HP_DTYPE_BF16, size_t(c.n), 1.0f);
    if (c.embed) {
        for (int r = 0; r < c.n_row; ++r) {
            for (int i = 0; i < c.n; ++i) x_host[size_t(r) * c.n + i] = std::nanf("");  // the launch must fill every element
        }
    }

    Result result;
    const size_t x_offset = c.misaligned ? 1 : 0;
    float *x = upload(x_host, x_offset);
    void *w = upload(weight.bytes);
    void *t = upload(table.bytes);
    int32_t *d_rows = upload(rows), *d_tokens = upload(token_ids), *d_starts = upload(seq_token_start);
    std::vector<int32_t> poison_seq(size_t(c.n_row), -1);
    int32_t *d_seq = upload(poison_seq);
    float *d_partials = upload(partials.empty() ? std::vector<float>(1, 0.0f) : partials);
    void *d_bias = upload(bias.bytes);
    std::vector<uint16_t> poison_out(size_t(c.n_row) * c.n, 0x7fc1);  // NaN
    uint16_t *out = upload(poison_out);
    EXPECT_TRUE(x && w && t && d_rows && d_tokens && d_starts && d_seq && out && d_partials && d_bias);
    if (!(x && w && t && d_rows && d_tokens && d_starts && d_seq && out && d_partials && d_bias)) return result;
    base::NormResidual residual;
    residual.partials = d_partials;
    residual.n_partial = c.n_partial;
    residual.bias_dtype = HP_DTYPE_BF16;
    residual.bias = c.bias ? d_bias : nullptr;

    base::NormEmbed embed;
    embed.token_ids = d_tokens;
    embed.dtype = c.table_dtype;
    embed.table = t;
    embed.seq_token_start = d_starts;
    embed.n_seq = n_seq;
    embed.token_seq = d_seq;
    std::vector<uint16_t> first;
    for (int run = 0; run < 2; ++run) {
        cudaMemcpy(out, poison_out.data(), poison_out.size() * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(d_seq, poison_seq.data(), poison_seq.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(x, x_host.data(), x_host.size() * 4, cudaMemcpyHostToDevice);
        EXPECT_TRUE(base::launch_rms_norm(mode, nullptr, x, c.rows ? d_rows : nullptr, c.n_row, c.n, reinterpret_cast<__nv_bfloat16 *>(out),
                                          c.w_dtype, w, kEps, c.embed ? &embed : nullptr, c.n_partial ? &residual : nullptr));
        EXPECT_EQ(cudaGetLastError(), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint16_t> got(poison_out.size());
        cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost);
        if (run == 0) {
            first = got;
            result.x.resize(x_host.size());
            cudaMemcpy(result.x.data(), x, x_host.size() * 4, cudaMemcpyDeviceToHost);
            result.token_seq.resize(size_t(c.n_row));
            cudaMemcpy(result.token_seq.data(), d_seq, size_t(c.n_row) * 4, cudaMemcpyDeviceToHost);
        } else {
            EXPECT_TRUE(got == first) << "mode " << mode << ": a second run gave other bits";
        }
    }
    result.out = first;
    cudaFree(x - x_offset);
    cudaFree(w);
    cudaFree(t);
    cudaFree(d_rows);
    cudaFree(d_tokens);
    cudaFree(d_starts);
    cudaFree(d_seq);
    cudaFree(d_partials);
    cudaFree(d_bias);
    cudaFree(out);

    // Host math over the row each output row reads.
    int bad = 0;
    for (int r = 0; r < c.n_row && bad < 5; ++r) {
        std::vector<double> row(static_cast<size_t>(c.n));
        std::vector<double> magnitude(static_cast<size_t>(c.n));
        for (int i = 0; i < c.n; ++i) {
            row[size_t(i)] = c.embed ? table.value[size_t(token_ids[size_t(r)]) * c.n + i] : x_host[size_t(c.rows ? rows[size_t(r)] : r) * c.n + i];
            magnitude[size_t(i)] = std::fabs(row[size_t(i)]);
            if (c.n_partial == 0) continue;
            if (c.bias) row[size_t(i)] += bias.value[size_t(i)], magnitude[size_t(i)] += std::fabs(bias.value[size_t(i)]);
            for (int s = 0; s < c.n_partial; ++s) {
                const double p = partials[(size_t(s) * c.n_row + r) * c.n + i];
                row[size_t(i)] += p;
                magnitude[size_t(i)] += std::fabs(p);
            }
        }
        double sum_sq = 0.0;
        for (double v : row) sum_sq += v * v;
        const double scale = 1.0 / std::sqrt(sum_sq / c.n + double(kEps));
        for (int i = 0; i < c.n && bad < 5; ++i) {
            const double ref = row[size_t(i)] * scale * weight.value[size_t(i)];
            const double got = from_bf16_bits(result.out[size_t(r) * c.n + i]);
            // After a residual add the kernel normalises its float32 x, within 2^-20 of the terms' magnitudes of the host's.
            const double x_error = c.n_partial ? scale * std::fabs(weight.value[size_t(i)]) * std::ldexp(magnitude[size_t(i)], -20) : 0.0;
            if (!(std::fabs(got - ref) <= std::ldexp(std::fabs(ref), -8) + x_error + 1e-30)) {
                ADD_FAILURE() << describe(c) << ", mode " << mode << ": row " << r << " element " << i << " = " << got << ", host " << ref;
                ++bad;
            }
            if (c.n_partial && !(std::fabs(result.x[size_t(r) * c.n + i] - row[size_t(i)]) <= std::ldexp(magnitude[size_t(i)], -20))) {
                ADD_FAILURE() << describe(c) << ", mode " << mode << ": x row " << r << " element " << i << " = " << result.x[size_t(r) * c.n + i]
                              << " after the residual add, host " << row[size_t(i)];
                ++bad;
            }
            if (c.embed && result.x[size_t(r) * c.n + i] != float(row[size_t(i)])) {
                ADD_FAILURE() << describe(c) << ", mode " << mode << ": x row " << r << " element " << i << " = " << result.x[size_t(r) * c.n + i]
                              << ", the table's " << row[size_t(i)];
                ++bad;
            }
        }
    }
    if (c.embed) EXPECT_EQ(result.token_seq, expect_seq) << describe(c) << ", mode " << mode << ": token_seq";
    return result;
}

void check_case(const Case &c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    const Result plain = run_mode(c, 0, seed);
    for (int mode = 1; mode <= 2; ++mode) {
        const Result fast = run_mode(c, mode, seed);
        ASSERT_EQ(fast.out.size(), plain.out.size());
        int bad = 0;
        for (size_t i = 0; i < plain.out.size() && bad < 5; ++i) {
            const double a = from_bf16_bits(plain.out[i]), b = from_bf16_bits(fast.out[i]);
            if (!(std::fabs(a - b) <= std::ldexp(std::fabs(a), -7) + 1e-30)) {
                ADD_FAILURE() << "mode " << mode << " against mode 0 at element " << i << ": " << b << " against " << a;
                ++bad;
            }
        }
    }
}

// Which kernel the launches take, on the host: the vector kernel's chunks a thread, 0 for the scalar kernel.
TEST(CudaNorm, RowChunksPickTheKernel) {
    alignas(16) static float x[8];
    alignas(16) static uint16_t out[8];
    EXPECT_EQ(base::norm_row_chunks(2048, 256, x, out), 2);
    EXPECT_EQ(base::norm_row_chunks(1024, 256, x, out), 1);
    EXPECT_EQ(base::norm_row_chunks(4, 256, x, out), 1);
    EXPECT_EQ(base::norm_row_chunks(1028, 256, x, out), 2);
    EXPECT_EQ(base::norm_row_chunks(3072, 256, x, out), 4);  // 3 chunks needed: rounded up to a template's 4
    EXPECT_EQ(base::norm_row_chunks(8192, 256, x, out), 8);
    EXPECT_EQ(base::norm_row_chunks(8196, 256, x, out), 0);  // more than 32 elements a thread
    EXPECT_EQ(base::norm_row_chunks(32768, 1024, x, out), 8);
    EXPECT_EQ(base::norm_row_chunks(2046, 256, x, out), 0);  // not a multiple of 4
    EXPECT_EQ(base::norm_row_chunks(0, 256, x, out), 0);
    EXPECT_EQ(base::norm_row_chunks(2048, 256, x + 1, out), 0);  // x rows off 16 bytes
    EXPECT_EQ(base::norm_row_chunks(2048, 256, x, out + 1), 0);  // out rows off 8 bytes
}

// What launch_rms_norm cannot do it refuses before launching anything (so no device is needed): the embedding or a
// residual add with gathered rows (it would fill or add rows 0..n_row-1, not the gathered ones), or both at once.
TEST(CudaNorm, RefusesGatheredRowsWithAnEmbeddingOrAResidual) {
    const base::NormEmbed embed;
    const base::NormResidual residual;
    const int32_t *rows = reinterpret_cast<const int32_t *>(16);  // never read: refused first
    for (int mode = 0; mode <= 2; ++mode) {
        EXPECT_FALSE(base::launch_rms_norm(mode, nullptr, nullptr, rows, 4, 2048, nullptr, HP_DTYPE_BF16, nullptr, kEps, &embed, nullptr));
        EXPECT_FALSE(base::launch_rms_norm(mode, nullptr, nullptr, rows, 4, 2048, nullptr, HP_DTYPE_BF16, nullptr, kEps, nullptr, &residual));
        EXPECT_FALSE(base::launch_rms_norm(mode, nullptr, nullptr, nullptr, 4, 2048, nullptr, HP_DTYPE_BF16, nullptr, kEps, &embed, &residual));
        EXPECT_TRUE(base::launch_rms_norm(mode, nullptr, nullptr, rows, 0, 2048, nullptr, HP_DTYPE_BF16, nullptr, kEps));  // no rows: nothing to do
    }
}

TEST(CudaNorm, EveryModeMatchesHostMath) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const int t = HP_CUDA_NORM_THREADS;
    std::vector<Case> cases = {
        {2048, 1},                                // llama-3.2-1b's batch-1 step: 2 chunks a thread at 256 threads
        {2048, 64},                               // batch 64
        {2048, 3, HP_DTYPE_F16},
        {4 * t, 5, HP_DTYPE_F32},                 // exactly one chunk a thread
        {4 * t + 4, 2},                           // a second chunk for thread 0 alone
        {3 * 4 * t - 8, 4},                       // 3 chunks needed: the 4-chunk kernel with a partial third and an empty fourth
        {8 * 4 * t, 2},                           // the vector kernel's limit
        {8 * 4 * t + 4, 2},                       // past it: the scalar kernel in every mode
        {100, 7},                                 // fewer elements than threads
        {4, 1},
        {102, 3},                                 // not a multiple of 4: the scalar kernel
        {2048, 9, HP_DTYPE_BF16, true},           // gathered rows
        {896, 5, HP_DTYPE_F32, true},
        {2048, 4, HP_DTYPE_BF16, false, true},    // misaligned x: the scalar kernel
        {2048, 1, HP_DTYPE_BF16, false, false, true},  // the first layer's norm with the embedding, batch 1
        {2048, 64, HP_DTYPE_BF16, false, false, true},
        {896, 11, HP_DTYPE_F16, false, false, true, HP_DTYPE_F32},
        {102, 6, HP_DTYPE_BF16, false, false, true},   // the embedding where the vector kernel cannot go
        {2048, 3, HP_DTYPE_BF16, false, true, true, HP_DTYPE_F16},
        {2048, 64, HP_DTYPE_BF16, false, false, false, HP_DTYPE_BF16, 2, false},  // llama-3.2-1b's o_proj / down_proj at batch 64
        {2048, 33, HP_DTYPE_BF16, false, false, false, HP_DTYPE_BF16, 4, true},
        {896, 7, HP_DTYPE_F32, false, false, false, HP_DTYPE_BF16, 2, true},
        {8 * 4 * t + 4, 3, HP_DTYPE_BF16, false, false, false, HP_DTYPE_BF16, 2, true},  // past the vector kernel: add_partials_kernel
        {2048, 5, HP_DTYPE_BF16, false, true, false, HP_DTYPE_BF16, 4, true},           // misaligned x: add_partials_kernel
    };
    uint32_t seed = 11;
    for (const Case &c : cases) check_case(c, seed++);
}

}  // namespace
