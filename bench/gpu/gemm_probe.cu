// How far is cuBLAS's default choice from its best for the projections of a decode step above the decode kernels'
// limit (forward/cuda/baseline: steps of more than gemv_max_tokens tokens run cuBLAS)? For each projection of a
// model shape at each token count, times cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_GEMM_DEFAULT (what the
// plugin calls) against every algorithm cublasLtMatmulAlgoGetHeuristic offers for the same problem (up to 32), and
// reports the default, the heuristic's first choice and the fastest, with the fastest's configuration. Then the
// residual projections split along their inputs (knob gemm_split_k) and q/k/v three ways (knob gemm_qkv; below).
//
// The weights are bf16 and rotate through enough copies (at least 512 MB a shape) that every launch reads them from
// HBM, as a decode step does; the input (bf16) and output (f32) stay in L2, as they do there. Each time is the median
// over 7 batches of 20 back-to-back launches (a batch's events around them, divided by 20), so launch gaps count as
// they would between a step's kernels without programmatic launch. Bandwidth: weight bytes per launch / time.
//
// usage: hotpass_bench_gpu_gemm_probe [--tokens 33,64,128] [--d-model 2048] [--d-ff 8192] [--n-head 32]
//                                      [--n-head-kv 8] [--d-head 64] [--vocab 128256]   (defaults: llama-3.2-1b)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                                              \
    do {                                                                                         \
        const auto status_ = (call);                                                             \
        if (status_ != decltype(status_)(0)) {                                                   \
            std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, int(status_)); \
            std::exit(1);                                                                        \
        }                                                                                        \
    } while (0)

struct Shape {
    const char *name;
    int n_out, n_in, batch;  // batch 2: a strided pair (k/v, gate/up), as gemm_pair launches it
    float beta;              // 1: the residual accumulates (o_proj, down_proj)
};

struct Timing {
    float us = 0.0f;
    bool ok = false;
};

__global__ void fill_kernel(__nv_bfloat16 *data, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        data[i] = __float2bfloat16(float(h % 2001) / 1000.0f - 1.0f);
    }
}

// The operands of one section: n_copy copies of w_elems weights (enough copies for at least 512 MB, so that every
// launch reads its copy from HBM), an input of x_elems and an output of y_elems floats (zeroed), filled on `stream`
// with values from `seed`. Freed at the end of the section.
struct RotatingOperands {
    size_t w_elems = 0;
    int n_copy = 0;
    __nv_bfloat16 *w = nullptr, *x = nullptr;
    float *y = nullptr;

    RotatingOperands(cudaStream_t stream, size_t w_elems_, size_t x_elems, size_t y_elems, uint32_t seed) : w_elems(w_elems_) {
        n_copy = int(std::max<size_t>(2, (size_t(512) << 20) / (w_elems * 2) + 1));
        CHECK(cudaMalloc(&w, w_elems * 2 * n_copy));
        CHECK(cudaMalloc(&x, x_elems * 2));
        CHECK(cudaMalloc(&y, y_elems * 4));
        fill_kernel<<<1024, 256, 0, stream>>>(w, w_elems * n_copy, seed);
        fill_kernel<<<64, 256, 0, stream>>>(x, x_elems, seed + 1);
        CHECK(cudaMemsetAsync(y, 0, y_elems * 4, stream));
    }
    RotatingOperands(const RotatingOperands &) = delete;
    RotatingOperands &operator=(const RotatingOperands &) = delete;
    ~RotatingOperands() {
        cudaFree(w);
        cudaFree(x);
        cudaFree(y);
    }
    const __nv_bfloat16 *copy(int i) const { return w + size_t(i) * w_elems; }
    double gb() const { return double(w_elems) * 2 / 1e9; }  // weight bytes a launch reads, in GB
};

// Median over 7 batches of 20 launches of `launch(copy)`, the copy rotating over n_copy weight copies.
template <class Launch>
Timing time_launches(cudaStream_t stream, int n_copy, Launch launch) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    Timing t;
    int copy = 0;
    for (int i = 0; i < 3; ++i) {
        if (!launch(copy++ % n_copy)) return t;
    }
    std::vector<float> per;
    bool launched = true;
    for (int b = 0; b < 7; ++b) {
        CHECK(cudaEventRecord(start, stream));
        for (int i = 0; i < 20; ++i) launched = launch(copy++ % n_copy) && launched;
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        per.push_back(ms * 1000.0f / 20.0f);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (!launched || cudaGetLastError() != cudaSuccess) return t;
    std::sort(per.begin(), per.end());
    t.us = per[per.size() / 2];
    t.ok = true;
    return t;
}

std::vector<int> parse_list(const char *text) {
    std::vector<int> out;
    for (const char *p = text; *p;) {
        out.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
    }
    return out;
}

int attr(const cublasLtMatmulAlgo_t &algo, cublasLtMatmulAlgoConfigAttributes_t what) {
    uint32_t value = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, what, &value, sizeof(value), &written) != CUBLAS_STATUS_SUCCESS) return -1;
    return int(value);
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<int> tokens = {33, 64, 128};
    int d_model = 2048, d_ff = 8192, n_head = 32, n_head_kv = 8, d_head = 64, vocab = 128256;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--tokens") tokens = parse_list(argv[i + 1]);
        else if (flag == "--d-model") d_model = std::atoi(argv[i + 1]);
        else if (flag == "--d-ff") d_ff = std::atoi(argv[i + 1]);
        else if (flag == "--n-head") n_head = std::atoi(argv[i + 1]);
        else if (flag == "--n-head-kv") n_head_kv = std::atoi(argv[i + 1]);
        else if (flag == "--d-head") d_head = std::atoi(argv[i + 1]);
        else if (flag == "--vocab") vocab = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "unknown flag %s\nusage: %s [--tokens 33,64,128] [--d-model N] [--d-ff N] [--n-head N] [--n-head-kv N] [--d-head N] [--vocab N]\n",
                         argv[i], argv[0]);
            return 2;
        }
    }
    const std::vector<Shape> shapes = {
        {"q", n_head * d_head, d_model, 1, 0.0f},       {"k/v", n_head_kv * d_head, d_model, 2, 0.0f},
        {"o", d_model, n_head * d_head, 1, 1.0f},       {"gate/up", d_ff, d_model, 2, 0.0f},
        {"down", d_model, d_ff, 1, 1.0f},               {"lm_head", vocab, d_model, 1, 0.0f},
    };
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("gemm probe on %s (%d SMs, L2 %d MB)\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cublasHandle_t blas;
    CHECK(cublasCreate(&blas));
    CHECK(cublasSetStream(blas, stream));
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt));
    const size_t workspace_bytes = size_t(32) << 20;  // as the plugin's cuBLAS workspace order of magnitude
    void *workspace = nullptr;
    CHECK(cudaMalloc(&workspace, workspace_bytes));
    CHECK(cublasSetWorkspace(blas, workspace, workspace_bytes));
    const int max_tokens = *std::max_element(tokens.begin(), tokens.end());

    for (const Shape &s : shapes) {
        const RotatingOperands ops(stream, size_t(s.n_out) * s.n_in * s.batch, size_t(max_tokens) * s.n_in, size_t(max_tokens) * s.n_out * s.batch, 1);
        const __nv_bfloat16 *x = ops.x;
        float *y = ops.y;
        for (int n : tokens) {
            const float alpha = 1.0f, beta = s.beta;
            const long long stride_w = (long long)s.n_out * s.n_in, stride_y = (long long)s.n_out * n;
            const Timing def = time_launches(stream, ops.n_copy, [&](int copy) {
                const __nv_bfloat16 *wc = ops.copy(copy);
                if (s.batch == 1) {
                    return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n_out, n, s.n_in, &alpha, wc, CUDA_R_16BF, s.n_in, x, CUDA_R_16BF, s.n_in,
                                        &beta, y, CUDA_R_32F, s.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                }
                return cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n_out, n, s.n_in, &alpha, wc, CUDA_R_16BF, s.n_in, stride_w, x,
                                                  CUDA_R_16BF, s.n_in, 0, &beta, y, CUDA_R_32F, s.n_out, stride_y, s.batch, CUBLAS_COMPUTE_32F,
                                                  CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });

            cublasLtMatmulDesc_t op;
            CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
            CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
            cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
            CHECK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_16BF, s.n_in, s.n_out, s.n_in));
            CHECK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_16BF, s.n_in, n, s.n_in));
            CHECK(cublasLtMatrixLayoutCreate(&c_layout, CUDA_R_32F, s.n_out, n, s.n_out));
            if (s.batch > 1) {
                const int32_t count = s.batch;
                const int64_t zero = 0, sw = stride_w, sy = stride_y;
                for (cublasLtMatrixLayout_t l : {a_layout, b_layout, c_layout}) {
                    CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
                }
                CHECK(cublasLtMatrixLayoutSetAttribute(a_layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sw, sizeof(sw)));
                CHECK(cublasLtMatrixLayoutSetAttribute(b_layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &zero, sizeof(zero)));
                CHECK(cublasLtMatrixLayoutSetAttribute(c_layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sy, sizeof(sy)));
            }
            cublasLtMatmulPreference_t pref;
            CHECK(cublasLtMatmulPreferenceCreate(&pref));
            CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
            cublasLtMatmulHeuristicResult_t result[32];
            int n_result = 0;
            if (cublasLtMatmulAlgoGetHeuristic(lt, op, a_layout, b_layout, c_layout, c_layout, pref, 32, result, &n_result) != CUBLAS_STATUS_SUCCESS) {
                n_result = 0;  // reported as "of 0" below
            }
            Timing first, best;
            int best_i = -1;
            for (int i = 0; i < n_result; ++i) {
                if (result[i].state != CUBLAS_STATUS_SUCCESS) continue;
                const Timing t = time_launches(stream, ops.n_copy, [&](int copy) {
                    const __nv_bfloat16 *wc = ops.copy(copy);
                    return cublasLtMatmul(lt, op, &alpha, wc, a_layout, x, b_layout, &beta, y, c_layout, y, c_layout, &result[i].algo, workspace,
                                          workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
                });
                if (i == 0) first = t;
                if (t.ok && (!best.ok || t.us < best.us)) {
                    best = t;
                    best_i = i;
                }
            }
            const double gb = ops.gb();
            std::printf("%-8s n_out %6d n_in %5d x%d tokens %4d: default %7.2f us (%4.0f GB/s); lt first %7.2f; lt best %7.2f us (%4.0f GB/s, #%d of %d",
                        s.name, s.n_out, s.n_in, s.batch, n, def.us, def.ok ? gb / (def.us * 1e-6) : 0.0, first.us, best.us,
                        best.ok ? gb / (best.us * 1e-6) : 0.0, best_i, n_result);
            if (best_i >= 0) {
                const cublasLtMatmulAlgo_t &a = result[best_i].algo;
                std::printf(": algo %d tile %d stages %d split-k %d reduction %d swizzle %d cluster %d",
                            attr(a, CUBLASLT_ALGO_CONFIG_ID), attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID), attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                            attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                            attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
            }
            std::printf(")\n");
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(a_layout);
            cublasLtMatrixLayoutDestroy(b_layout);
            cublasLtMatrixLayoutDestroy(c_layout);
            cublasLtMatmulDescDestroy(op);
        }
    }
    // o_proj and down_proj (the residual accumulating, beta 1, as the plugin launches them) against the same product
    // split along n_in into S slices as one strided batch (beta 0) into S partial outputs, which a kernel after it
    // would add into the residual (not timed here: the norm kernel that follows could do it).
    for (const Shape &s : shapes) {
        if (s.beta != 1.0f) continue;
        const RotatingOperands ops(stream, size_t(s.n_out) * s.n_in, size_t(max_tokens) * s.n_in, size_t(max_tokens) * s.n_out * 4, 5);
        const __nv_bfloat16 *x = ops.x;
        float *y = ops.y;
        const double gb = ops.gb();
        for (int n : tokens) {
            std::printf("%-8s n_out %6d n_in %5d tokens %4d, split along n_in:", s.name, s.n_out, s.n_in, n);
            for (int split : {1, 2, 4}) {
                if (s.n_in % (8 * split) != 0) continue;
                const int k = s.n_in / split;
                const float alpha = 1.0f, beta = split == 1 ? 1.0f : 0.0f;
                const Timing t = time_launches(stream, ops.n_copy, [&](int copy) {
                    const __nv_bfloat16 *wc = ops.copy(copy);
                    if (split == 1) {
                        return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n_out, n, s.n_in, &alpha, wc, CUDA_R_16BF, s.n_in, x, CUDA_R_16BF, s.n_in,
                                            &beta, y, CUDA_R_32F, s.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                    }
                    return cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n_out, n, k, &alpha, wc, CUDA_R_16BF, s.n_in, k, x, CUDA_R_16BF,
                                                      s.n_in, k, &beta, y, CUDA_R_32F, s.n_out, (long long)s.n_out * n, split, CUBLAS_COMPUTE_32F,
                                                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                });
                std::printf(" %d: %6.2f us (%4.0f GB/s)%s", split, t.us, t.ok ? gb / (t.us * 1e-6) : 0.0, split == 1 ? " (beta 1)" : "");
            }
            std::printf("\n");
        }
    }

    // q/k/v above the decode kernels' limit: as the plugin launches them (q, then k/v as a strided pair), as one GEMM
    // over a concatenated copy [wq; wk; wv], and as one pointer-array batch of n_head / n_head_kv + 2 GEMMs of the kv
    // width each (q's row blocks, k, v: no copy), the last two writing one [tokens][q + 2 kv] output.
    {
        const int q_w = n_head * d_head, kv_w = n_head_kv * d_head, all_w = q_w + 2 * kv_w, n_part = q_w / kv_w + 2;
        const RotatingOperands ops(stream, size_t(all_w) * d_model, size_t(max_tokens) * d_model, size_t(max_tokens) * all_w, 3);
        const int n_copy = ops.n_copy;
        const __nv_bfloat16 *x = ops.x;
        float *y = ops.y;
        // Pointer arrays per copy: A = the parts' weights, B = x, C = the parts' columns of y.
        std::vector<const void *> a_host, b_host;
        std::vector<void *> c_host;
        for (int copy = 0; copy < n_copy; ++copy) {
            for (int part = 0; part < n_part; ++part) {
                a_host.push_back(ops.copy(copy) + size_t(part) * kv_w * d_model);
                b_host.push_back(x);
                c_host.push_back(y + size_t(part) * kv_w);
            }
        }
        const void **a_dev = nullptr, **b_dev = nullptr;
        void **c_dev = nullptr;
        CHECK(cudaMalloc(&a_dev, a_host.size() * sizeof(void *)));
        CHECK(cudaMalloc(&b_dev, b_host.size() * sizeof(void *)));
        CHECK(cudaMalloc(&c_dev, c_host.size() * sizeof(void *)));
        CHECK(cudaMemcpy(a_dev, a_host.data(), a_host.size() * sizeof(void *), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(b_dev, b_host.data(), b_host.size() * sizeof(void *), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(c_dev, c_host.data(), c_host.size() * sizeof(void *), cudaMemcpyHostToDevice));
        const float alpha = 1.0f, beta = 0.0f;
        const double gb = ops.gb();
        for (int n : tokens) {
            const Timing now = time_launches(stream, n_copy, [&](int copy) {
                const __nv_bfloat16 *wq = ops.copy(copy), *wk = wq + size_t(q_w) * d_model;
                return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, q_w, n, d_model, &alpha, wq, CUDA_R_16BF, d_model, x, CUDA_R_16BF, d_model,
                                    &beta, y, CUDA_R_32F, q_w, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS &&
                       cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, kv_w, n, d_model, &alpha, wk, CUDA_R_16BF, d_model,
                                                  (long long)kv_w * d_model, x, CUDA_R_16BF, d_model, 0, &beta, y + size_t(n) * q_w, CUDA_R_32F,
                                                  kv_w, (long long)kv_w * n, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });
            const Timing concat = time_launches(stream, n_copy, [&](int copy) {
                return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, all_w, n, d_model, &alpha, ops.copy(copy), CUDA_R_16BF, d_model, x,
                                    CUDA_R_16BF, d_model, &beta, y, CUDA_R_32F, all_w, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });
            const Timing batched = time_launches(stream, n_copy, [&](int copy) {
                return cublasGemmBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, kv_w, n, d_model, &alpha, a_dev + size_t(copy) * n_part, CUDA_R_16BF,
                                           d_model, b_dev + size_t(copy) * n_part, CUDA_R_16BF, d_model, &beta, c_dev + size_t(copy) * n_part,
                                           CUDA_R_32F, all_w, n_part, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });
            std::printf("q/k/v    %d + 2 x %d rows, n_in %d, tokens %4d: q then the k/v pair %7.2f us (%4.0f GB/s); one GEMM over [wq; wk; wv] %7.2f "
                        "us (%4.0f GB/s); %d pointer-array batches of %d rows %7.2f us (%4.0f GB/s)\n",
                        q_w, kv_w, d_model, n, now.us, now.ok ? gb / (now.us * 1e-6) : 0.0, concat.us, concat.ok ? gb / (concat.us * 1e-6) : 0.0,
                        n_part, kv_w, batched.us, batched.ok ? gb / (batched.us * 1e-6) : 0.0);
        }
        cudaFree(a_dev);
        cudaFree(b_dev);
        cudaFree(c_dev);
    }
    cublasLtDestroy(lt);
    cublasDestroy(blas);
    cudaFree(workspace);
    return 0;
}
