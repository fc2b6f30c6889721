// Single-thread kernel figures of forward/cpu/baseline (compiled together with its gemv.cpp,
// gemm.cpp and matmul.cpp and the same -D knobs), for tuning the knobs' defaults:
//   kernel_bench gemv TOKENS [OUT IN]  decode kernel on bf16 weights [OUT][IN] (4096 x 1024): weight GB/s
//   kernel_bench gemm TOKENS [OUT IN]  blocked GEMM on two bf16 weights [OUT][IN]: GFLOP/s
//   kernel_bench read 0          plain AVX-512 read of the same 512 MiB: GB/s (the ceiling of gemv)
//   kernel_bench model 1 / model 0   llama-300m's matmuls of one decode step (16 x q, k, v, o, gate,
//                                up, down, then lm_head; 552 MB) with the decode kernel / a plain read
// KB_MIB=N sets the MiB of distinct matrices (default 512: from DRAM; 16: from L3). Weights are
// page-aligned, as the engine's tensors are; KB_HUGE=1 puts each on a 2 MiB boundary and advises
// transparent huge pages (MADV_HUGEPAGE), as open_model() does for presets. Times are thread CPU seconds (the host is shared; CPU time is steadier than wall time); each
// prints the median of 9 repetitions.
#include <immintrin.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../forward/cpu/baseline/matmul.h"

namespace {
double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
// `bytes` of weights, page-aligned (2 MiB-aligned and advised as huge pages with KB_HUGE=1), filled
// with bf16 values in [1, 2); never freed (the process is short).
uint16_t *weight_memory(size_t bytes) {
    const bool huge = std::getenv("KB_HUGE") && std::atoi(std::getenv("KB_HUGE")) != 0;
    const size_t align = huge ? size_t(2) << 20 : 4096;
    void *reserved = mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reserved == MAP_FAILED) std::abort();
    auto *start = reinterpret_cast<uint16_t *>((reinterpret_cast<uintptr_t>(reserved) + align - 1) & ~uintptr_t(align - 1));
    if (huge) madvise(start, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < bytes / 2; ++i) start[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 256);
    return start;
}

double plain_read(const uint16_t *w, int64_t n_byte) {
    const __m512i *p = reinterpret_cast<const __m512i *>(w);
    __m512i acc = _mm512_setzero_si512();
    for (int64_t i = 0; i < n_byte / 64; ++i) acc = _mm512_add_epi32(acc, _mm512_loadu_si512(p + i));
    return double(_mm512_reduce_add_epi32(acc));
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const std::string mode = argv[1];
    const int n_token = std::max(1, std::atoi(argv[2]));
    const int64_t n_out = argc > 3 ? std::atoll(argv[3]) : 4096, n_in = argc > 4 ? std::atoll(argv[4]) : 1024;
    // Distinct matrices of 512 MiB in all, so the weights come from memory, not cache.
    const int64_t total_mib = std::getenv("KB_MIB") ? std::atoll(std::getenv("KB_MIB")) : 512;  // 16: the weights stay in L3
    if (mode == "model") {  // llama-300m: d_model 1024, 16/4 heads of 64, d_ff 4096, 16 layers, vocab 32000
        std::vector<std::pair<int64_t, int64_t>> shapes;
        for (int layer = 0; layer < 16; ++layer) {
            for (auto shape : {std::pair<int64_t, int64_t>{1024, 1024}, {256, 1024}, {256, 1024}, {1024, 1024}, {4096, 1024},
                               {4096, 1024}, {1024, 4096}}) shapes.push_back(shape);
        }
        shapes.push_back({32000, 1024});
        std::vector<hp_tensor> tensors;
        double total_bytes = 0;
        for (auto [n_o, n_i] : shapes) {
            hp_tensor w{};
            w.dtype = HP_DTYPE_BF16;
            w.n_dim = 2;
            w.shape[0] = n_o;
            w.shape[1] = n_i;
            w.data = weight_memory(size_t(n_o * n_i * 2));
            tensors.push_back(w);
            total_bytes += double(n_o * n_i * 2);
        }
        std::vector<float> x(4096, 0.01f), y(32000);
        std::vector<float> x_split(size_t(hp_cpu::matmul_split_tokens() * 4096));
        hp_cpu::MatmulScratch scratch{nullptr, nullptr, x_split.data(), int64_t(x_split.size())};
        const hp_tensor none{};
        std::vector<double> results;
        for (int rep = 0; rep < 9; ++rep) {
            const double start = cpu_now();
            for (const hp_tensor &w : tensors) {
                if (n_token == 0) y[0] += float(plain_read(static_cast<const uint16_t *>(w.data), w.shape[0] * w.shape[1] * 2));
                else hp_cpu::gemv_rows(w, none, {x.data(), w.shape[1], nullptr, 1}, 0, w.shape[0], {y.data(), w.shape[0], false}, scratch);
            }
            results.push_back(total_bytes / (cpu_now() - start) / 1e9);
        }
        std::sort(results.begin(), results.end());
        std::printf("%.3f (%.3f-%.3f)\n", results[results.size() / 2], results.front(), results.back());
        return 0;
    }
    const int n_matrix = mode == "gemm" ? 2 : std::max(1, int((total_mib << 20) / (n_out * n_in * 2)));
    // Page-aligned, as the engine's weights are (each tensor is its own mapping).
    std::vector<std::unique_ptr<uint16_t, decltype(&std::free)>> weights;
    for (int m = 0; m < n_matrix; ++m) {
        const size_t bytes = (size_t(n_out * n_in) * 2 + 4095) / 4096 * 4096;
        weights.emplace_back(static_cast<uint16_t *>(std::aligned_alloc(4096, bytes)), &std::free);
        for (size_t i = 0; i < size_t(n_out * n_in); ++i) weights.back().get()[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 256);
    }
    std::vector<float> x(size_t(n_token * n_in), 0.01f), y(size_t(n_token * n_out));
    std::vector<float> w_pack(size_t(hp_cpu::matmul_w_pack_floats())), x_pack(size_t(hp_cpu::matmul_x_pack_floats()));
    std::vector<float> x_split(size_t(hp_cpu::matmul_split_tokens() * n_in));
    hp_cpu::MatmulScratch scratch{w_pack.data(), x_pack.data(), x_split.data(), int64_t(x_split.size())};
    const hp_tensor none{};
    std::vector<double> results;
    for (int rep = 0; rep < 9; ++rep) {
        const double start = cpu_now();
        for (int m = 0; m < n_matrix; ++m) {
            hp_tensor w{};
            w.dtype = HP_DTYPE_BF16;
            w.n_dim = 2;
            w.shape[0] = n_out;
            w.shape[1] = n_in;
            w.data = weights[size_t(m)].get();
            const hp_cpu::MatmulInput in{x.data(), n_in, nullptr, n_token};
            const hp_cpu::MatmulOutput out{y.data(), n_out, false};
            if (mode == "read") {
                const __m512i *p = reinterpret_cast<const __m512i *>(weights[size_t(m)].get());
                __m512i acc = _mm512_setzero_si512();
                for (int64_t i = 0; i < n_out * n_in * 2 / 64; ++i) acc = _mm512_add_epi32(acc, _mm512_loadu_si512(p + i));
                y[0] += float(_mm512_reduce_add_epi32(acc));
            } else if (mode == "gemv") hp_cpu::gemv_rows(w, none, in, 0, n_out, out, scratch);
            else hp_cpu::gemm_rows(w, none, in, 0, n_out, out, scratch);
        }
        const double seconds = cpu_now() - start;
        results.push_back(mode != "gemm" ? double(n_matrix) * n_out * n_in * 2 / seconds / 1e9
                                         : double(n_matrix) * n_out * n_in * n_token * 2 / seconds / 1e9);
    }
    std::sort(results.begin(), results.end());
    std::printf("%.3f\n", results[results.size() / 2]);
    return 0;
}
