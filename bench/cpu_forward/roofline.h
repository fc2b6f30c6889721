// Ceilings and a library peer measured in the same run as the forward passes:
// read bandwidth and FMA peaks of this machine, and OpenBLAS on an f32 copy of a model's matmuls.
#pragma once

#include <utility>
#include <vector>

// Streaming read of 1 GiB split over n_thread threads (AVX-512 loads): median of 7, GB/s. The
// buffer is 2 MiB-aligned and advised as transparent huge pages (huge_pages) or as never huge
// (MADV_NOHUGEPAGE: 4 KiB pages); the forward passes' ceiling is the faster of the two.
double read_bandwidth_gbs(int n_thread, bool huge_pages);
// AVX-512 f32 fmadd (bf16 = false) or AVX512-BF16 vdpbf16ps (bf16 = true) with 12 independent
// chains per thread: median of 5, GFLOP/s (an FMA is 2 flops).
double fma_peak_gflops(int n_thread, bool bf16);

// The plain library path: every matmul of one forward step as cblas_sgemv (1 token) or
// cblas_sgemm (y[tokens][out] = x W^T) on f32 weights of the model's shapes (on huge pages, as the
// baseline's weights are).
class BlasPeer {
public:
    explicit BlasPeer(const std::vector<std::pair<int, int>> &shapes);  // (out, in) per matmul
    double tokens_per_s(int n_thread, int n_token);                      // median of 3 (1 for >= 128)

private:
    std::vector<std::pair<int, int>> shapes_;
    std::vector<float *> weights_;  // [out][in] each, on 2 MiB-aligned huge pages; live until exit
    int max_in_ = 0, max_out_ = 0;
};
