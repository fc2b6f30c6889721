// Ceilings and a library peer for the CPU forward-pass benchmark; see roofline.h.
#include "roofline.h"

#include <cblas.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename Fn>
double median_of(int reps, Fn &&fn) {
    std::vector<double> values;
    for (int r = 0; r < reps; ++r) values.push_back(fn());
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

void run_threads(int n_thread, const std::function<void(int)> &fn) {
    std::vector<std::thread> threads;
    for (int t = 1; t < n_thread; ++t) threads.emplace_back(fn, t);
    fn(0);
    for (auto &thread : threads) thread.join();
}

}  // namespace

double read_bandwidth_gbs(int n_thread, bool huge_pages) {
    const size_t bytes = size_t(1) << 30, per = bytes / size_t(n_thread), huge = size_t(2) << 20;
    void *reserved = mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reserved == MAP_FAILED) return 0.0;
    char *buffer = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(reserved) + huge - 1) & ~uintptr_t(huge - 1));
    madvise(buffer, bytes, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(buffer, 1, bytes);
    std::vector<float> sink(size_t(n_thread) * 16);
    const double gbs = median_of(7, [&] {
        const double start = now();
        run_threads(n_thread, [&](int t) {
            const char *p = buffer + size_t(t) * per;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (size_t i = 0; i < per; i += 256) {
                a0 = _mm512_add_ps(a0, _mm512_load_ps(reinterpret_cast<const float *>(p + i)));
                a1 = _mm512_add_ps(a1, _mm512_load_ps(reinterpret_cast<const float *>(p + i + 64)));
                a2 = _mm512_add_ps(a2, _mm512_load_ps(reinterpret_cast<const float *>(p + i + 128)));
                a3 = _mm512_add_ps(a3, _mm512_load_ps(reinterpret_cast<const float *>(p + i + 192)));
            }
            _mm512_storeu_ps(&sink[size_t(t) * 16], _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        });
        return double(bytes) / (now() - start) / 1e9;
    });
    munmap(reserved, bytes + huge);
    return gbs;
}

namespace {
template <bool kBf16>
void fma_chains(long iters, float *sink) {
    __m512 acc[12];
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
    const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
    const __m512bh a16 = (__m512bh)_mm512_set1_epi16(0x3f80), b16 = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (long i = 0; i < iters; ++i) {
        for (int j = 0; j < 12; ++j) {
            if constexpr (kBf16) acc[j] = _mm512_dpbf16_ps(acc[j], a16, b16);
            else acc[j] = _mm512_fmadd_ps(acc[j], a, b);
        }
    }
    __m512 total = acc[0];
    for (int j = 1; j < 12; ++j) total = _mm512_add_ps(total, acc[j]);
    _mm512_storeu_ps(sink, total);
}
}  // namespace

double fma_peak_gflops(int n_thread, bool bf16) {
    volatile long iters_source = 20000000;
    const long iters = iters_source;
    std::vector<float> sink(size_t(n_thread) * 16);
    return median_of(5, [&] {
        const double start = now();
        run_threads(n_thread, [&](int t) {
            if (bf16) fma_chains<true>(iters, &sink[size_t(t) * 16]);
            else fma_chains<false>(iters, &sink[size_t(t) * 16]);
        });
        // fmadd: 16 lanes x 2 flops; vdpbf16ps: 16 lanes x 2 products x 2 flops
        const double flops = double(n_thread) * double(iters) * 12 * (bf16 ? 64.0 : 32.0);
        return flops / (now() - start) / 1e9;
    });
}

BlasPeer::BlasPeer(const std::vector<std::pair<int, int>> &shapes) : shapes_(shapes) {
    for (auto [out, in] : shapes_) {
        // On huge pages, as the baseline's preset weights are (SyntheticOptions::huge_pages).
        const size_t n = size_t(out) * size_t(in), bytes = n * sizeof(float), huge = size_t(2) << 20;
        void *reserved = mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (reserved == MAP_FAILED) std::abort();
        auto *w = reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(reserved) + huge - 1) & ~uintptr_t(huge - 1));
        madvise(w, bytes, MADV_HUGEPAGE);
        for (size_t i = 0; i < n; ++i) w[i] = float(int(i * 2654435761u >> 22) % 64 - 32) * 1e-3f;
        weights_.push_back(w);
        max_in_ = std::max(max_in_, in);
        max_out_ = std::max(max_out_, out);
    }
}

double BlasPeer::tokens_per_s(int n_thread, int n_token) {
    openblas_set_num_threads(n_thread);
    auto &shapes = shapes_;
    auto &weights = weights_;
    std::vector<float> x(size_t(n_token) * size_t(max_in_), 0.5f), y(size_t(n_token) * size_t(max_out_));
    const int reps = n_token >= 128 ? 1 : 3;
    return median_of(reps, [&] {
        const double start = now();
        for (size_t i = 0; i < shapes.size(); ++i) {
            const struct { int out, in; } s{shapes[i].first, shapes[i].second};
            if (n_token == 1) {
                cblas_sgemv(CblasRowMajor, CblasNoTrans, s.out, s.in, 1.0f, weights[i], s.in, x.data(), 1, 0.0f, y.data(), 1);
            } else {  // y[tokens][out] = x[tokens][in] W[out][in]^T
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_token, s.out, s.in, 1.0f, x.data(), s.in, weights[i], s.in,
                            0.0f, y.data(), s.out);
            }
        }
        return double(n_token) / (now() - start);
    });
}
