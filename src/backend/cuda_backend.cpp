// The CUDA backend: device memory (cudaMalloc), one non-blocking stream, events, and preset
// weights generated on the device (synthetic_fill.cu). Host code only, so it may use fmt.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "hotpass/backend/backend.h"
#include "hotpass/backend/cuda_check.h"
#include "synthetic_fill.h"

namespace hp::backend {
namespace {

class CudaTimer final : public EventTimer {
public:
    explicit CudaTimer(cudaStream_t stream) : stream_(stream) {
        HP_CUDA_CHECK(cudaEventCreate(&start_));
        HP_CUDA_CHECK(cudaEventCreate(&stop_));
    }
    ~CudaTimer() override {
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    void start() override { HP_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
    void stop() override { HP_CUDA_CHECK(cudaEventRecord(stop_, stream_)); }
    Result<double> elapsed_ms() override {
        HP_TRY(cuda_status(cudaEventSynchronize(stop_), "event synchronize"));
        float ms = 0;
        HP_TRY(cuda_status(cudaEventElapsedTime(&ms, start_, stop_), "event elapsed time"));
        return double(ms);
    }

private:
    cudaStream_t stream_;
    cudaEvent_t start_{}, stop_{};
};

class CudaGraph final : public Graph {
public:
    CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
    ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
    Status launch() override { return cuda_status(cudaGraphLaunch(exec_, stream_), "graph launch"); }

private:
    cudaGraphExec_t exec_;
    cudaStream_t stream_;
};

class CudaBackend final : public Backend {
public:
    CudaBackend(int device, cudaStream_t stream, DeviceInfo info) : device_(device), stream_(stream), info_(std::move(info)) {}
    ~CudaBackend() override {
        if (flush_buffer_) cudaFree(flush_buffer_);
        if (checksum_out_) cudaFree(checksum_out_);
        cudaStreamDestroy(stream_);
    }
    DeviceKind kind() const override { return DeviceKind::cuda; }
    const DeviceInfo &info() const override { return info_; }

    void *alloc(size_t bytes, size_t alignment) override {
        if (alignment > 256 || (alignment & (alignment - 1)) != 0) return nullptr;  // cudaMalloc gives 256
        void *ptr = nullptr;
        if (cudaMalloc(&ptr, std::max<size_t>(bytes, 1)) != cudaSuccess) {
            cudaGetLastError();  // out of memory is not sticky; clear it
            return nullptr;
        }
        if (cudaMemsetAsync(ptr, 0, bytes, stream_) != cudaSuccess || cudaStreamSynchronize(stream_) != cudaSuccess) {
            cudaFree(ptr);
            return nullptr;
        }
        return ptr;
    }
    void free(void *ptr) override {
        if (ptr) cudaFree(ptr);
    }
    Status upload(void *dst, const void *src, size_t bytes) override {
        HP_TRY(cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload"));
        return synchronize();
    }
    Status download(void *dst, const void *src, size_t bytes) override {
        HP_TRY(cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download"));
        return synchronize();
    }
    Status memset(void *dst, int value, size_t bytes) override {
        HP_TRY(cuda_status(cudaMemsetAsync(dst, value, bytes, stream_), "memset"));
        return synchronize();
    }
    Status fill_normal(void *dst, DType dtype, uint64_t n, uint64_t key, float mean, float std) override {
        HP_TRY(cuda_status(launch_fill_normal(dst, int(dtype), n, key, mean, std, info_.n_sm, stream_), "fill_normal launch"));
        return synchronize();
    }
    Status copy(void *dst, const void *src, size_t bytes) override {
        HP_TRY(cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "device copy"));
        return synchronize();
    }
    Result<uint64_t> checksum(const void *data, size_t bytes) override {
        if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return error("checksum of a pointer that is not 16-byte aligned");
        if (!checksum_out_) HP_TRY(cuda_status(cudaMalloc(&checksum_out_, sizeof(unsigned long long)), "checksum buffer"));
        HP_TRY(cuda_status(launch_checksum(data, bytes, checksum_out_, info_.n_sm, stream_), "checksum launch"));
        unsigned long long sum = 0;
        HP_TRY(download(&sum, checksum_out_, sizeof sum));
        return uint64_t(sum);
    }
    Status flush_cache() override {
        const size_t bytes = std::max<size_t>(2 * info_.l2_bytes, size_t(8) << 20);
        if (!flush_buffer_) HP_TRY(cuda_status(cudaMalloc(&flush_buffer_, bytes), "cache-flush buffer"));
        return cuda_status(cudaMemsetAsync(flush_buffer_, ++flush_value_ & 0xff, bytes, stream_), "cache flush");
    }
    Status synchronize() override { return cuda_status(cudaStreamSynchronize(stream_), "stream synchronize"); }
    Status synchronize_device() override { return cuda_status(cudaDeviceSynchronize(), "device synchronize"); }
    Result<std::unique_ptr<Graph>> capture(const std::function<Status()> &body) override {
        HP_TRY(cuda_status(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture"));
        const Status ran = body();
        cudaGraph_t graph = nullptr;
        const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
        if (!ran.ok() || ended != cudaSuccess) {
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();  // capture errors are not sticky: clear them
            if (!ran.ok()) return error("capture: the step failed: {}", ran.error());
            return error("capture: {} ({}): the step synchronizes, allocates or reads device memory back",
                         cudaGetErrorName(ended), cudaGetErrorString(ended));
        }
        cudaGraphExec_t exec = nullptr;
        const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        if (instantiated != cudaSuccess) {
            cudaGetLastError();
            return error("graph instantiate: {}", cudaGetErrorString(instantiated));
        }
        return std::unique_ptr<Graph>(std::make_unique<CudaGraph>(exec, stream_));
    }
    std::unique_ptr<EventTimer> create_timer() override { return std::make_unique<CudaTimer>(stream_); }
    void *stream() const override { return stream_; }

private:
    int device_;
    cudaStream_t stream_;
    DeviceInfo info_;
    void *flush_buffer_ = nullptr;
    int flush_value_ = 0;
    unsigned long long *checksum_out_ = nullptr;
};

// Why no CUDA device answers, in the words a user can act on, or "" when cudaGetDeviceCount's
// status is another failure (then reported as it is).
std::string no_device_reason(cudaError_t counted) {
    constexpr int major = CUDART_VERSION / 1000, minor = CUDART_VERSION % 1000 / 10;
    if (counted == cudaErrorInsufficientDriver)
        return fmt::format("no NVIDIA driver for CUDA {}.{} or newer is loaded (cudaErrorInsufficientDriver: none is "
                           "installed, or an older one)", major, minor);
    if (counted == cudaErrorNoDevice)
        return "the NVIDIA driver sees no GPU (cudaErrorNoDevice; check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    return "";
}

}  // namespace

bool built_with_cuda() { return true; }

bool cuda_available() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return count > 0;
}

Result<std::unique_ptr<Backend>> create_cuda_backend(int device_index) {
    int count = 0;
    const cudaError_t counted = cudaGetDeviceCount(&count);
    if (const std::string reason = no_device_reason(counted); !reason.empty()) {
        cudaGetLastError();
        return error("no CUDA device: {}. `--device cpu` runs on the CPU.", reason);
    }
    HP_TRY(cuda_status(counted, "cudaGetDeviceCount"));
    if (device_index < 0 || device_index >= count) return error("CUDA device {} does not exist ({} present)", device_index, count);
    HP_TRY(cuda_status(cudaSetDevice(device_index), "cudaSetDevice"));
    HP_TRY(cuda_status(cudaFree(nullptr), "creating the CUDA context"));
    cudaDeviceProp props{};
    HP_TRY(cuda_status(cudaGetDeviceProperties(&props, device_index), "cudaGetDeviceProperties"));
    DeviceInfo info;
    info.name = props.name;
    info.n_sm = props.multiProcessorCount;
    info.memory_bytes = props.totalGlobalMem;
    info.l2_bytes = uint64_t(props.l2CacheSize);
    info.compute_capability = props.major * 10 + props.minor;
    // No persisting-L2 carve-out: timed steps must not keep weights resident in L2 across steps.
    // Best effort (a MIG slice or a sandbox may refuse); what is in force is reported.
    if (props.persistingL2CacheMaxSize > 0) {
        cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
        cudaCtxResetPersistingL2Cache();
        cudaGetLastError();
    }
    size_t persisting = 0;
    if (cudaDeviceGetLimit(&persisting, cudaLimitPersistingL2CacheSize) != cudaSuccess) cudaGetLastError();
    info.persisting_l2_bytes = persisting;
    cudaStream_t stream = nullptr;
    HP_TRY(cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device_index, stream, std::move(info)));
}

}  // namespace hp::backend
