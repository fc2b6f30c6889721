// The device-neutral parts of the backend, and the CPU backend (host memory, host clock).
#include "hotpass/backend/backend.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "hotpass/core/hash.h"

namespace hp::backend {

std::string_view device_name(DeviceKind kind) { return kind == DeviceKind::cuda ? "cuda" : "cpu"; }

Result<DeviceKind> device_from_name(std::string_view name) {
    if (name == "cpu") return DeviceKind::cpu;
    if (name == "cuda") return DeviceKind::cuda;
    return error("unknown device '{}'; devices: cpu, cuda", name);
}

namespace {

class HostTimer final : public EventTimer {
public:
    void start() override { start_ = std::chrono::steady_clock::now(); }
    void stop() override { stop_ = std::chrono::steady_clock::now(); }
    Result<double> elapsed_ms() override { return std::chrono::duration<double, std::milli>(stop_ - start_).count(); }

private:
    std::chrono::steady_clock::time_point start_, stop_;
};

void store(DType dtype, void *out, uint64_t index, float value) {
    switch (dtype) {
        case DType::f32: static_cast<float *>(out)[index] = value; break;
        case DType::f16: static_cast<uint16_t *>(out)[index] = f32_to_f16(value); break;
        case DType::bf16: static_cast<uint16_t *>(out)[index] = f32_to_bf16(value); break;
    }
}

class CpuBackend final : public Backend {
public:
    CpuBackend() { info_.name = "cpu"; }
    DeviceKind kind() const override { return DeviceKind::cpu; }
    const DeviceInfo &info() const override { return info_; }
    void *alloc(size_t bytes, size_t alignment) override {
        alignment = std::max<size_t>(alignment, 64);
        if ((alignment & (alignment - 1)) != 0) return nullptr;
        const size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
        void *ptr = std::aligned_alloc(alignment, rounded);
        if (ptr) std::memset(ptr, 0, rounded);
        return ptr;
    }
    void free(void *ptr) override { std::free(ptr); }
    Status upload(void *dst, const void *src, size_t bytes) override {
        std::memcpy(dst, src, bytes);
        return Status::success();
    }
    Status download(void *dst, const void *src, size_t bytes) override {
        std::memcpy(dst, src, bytes);
        return Status::success();
    }
    Status memset(void *dst, int value, size_t bytes) override {
        std::memset(dst, value, bytes);
        return Status::success();
    }
    Status fill_normal(void *dst, DType dtype, uint64_t n, uint64_t key, float mean, float std) override {
        for (uint64_t i = 0; i < n; ++i) store(dtype, dst, i, std == 0.0f ? mean : mean + std * normal_at(key, i));
        return Status::success();
    }
    Status copy(void *dst, const void *src, size_t bytes) override {
        std::memmove(dst, src, bytes);
        return Status::success();
    }
    Result<uint64_t> checksum(const void *data, size_t bytes) override { return hash64(data, bytes); }
    Status flush_cache() override { return Status::success(); }
    Status synchronize() override { return Status::success(); }
    Status synchronize_device() override { return Status::success(); }
    Result<std::unique_ptr<Graph>> capture(const std::function<Status()> &) override {
        return error("graph capture is a CUDA feature; the CPU backend runs steps eagerly");
    }
    std::unique_ptr<EventTimer> create_timer() override { return std::make_unique<HostTimer>(); }
    void *stream() const override { return nullptr; }

private:
    DeviceInfo info_;
};

}  // namespace

// Defined in cuda_backend.cu, or in cuda_backend_stub.cpp when the build has no CUDA.
Result<std::unique_ptr<Backend>> create_cuda_backend(int device_index);

Result<std::unique_ptr<Backend>> create_backend(DeviceKind kind, int device_index) {
    if (kind == DeviceKind::cuda) return create_cuda_backend(device_index);
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>());
}

}  // namespace hp::backend
