// Backend: where an engine's memory lives and how it gets there. One interface for the CPU and
// CUDA: allocate/free, copy between host and device, fill with synthetic weights, synchronize,
// time with events. The engine sees only this header; CUDA types stay inside src/backend.
//
// Invariants: memory from alloc() is device memory for CUDA (host memory for the CPU), aligned to
// at least `alignment` (CUDA: 256 bytes), zero-filled; every copy/fill is ordered on stream() and
// complete when the call returns, so host buffers may be reused at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hotpass/core/dtype.h"
#include "hotpass/core/result.h"

namespace hp::backend {

enum class DeviceKind { cpu, cuda };

std::string_view device_name(DeviceKind kind);               // "cpu", "cuda"
Result<DeviceKind> device_from_name(std::string_view name);  // inverse of device_name

// What a device is: for reports and for sizing work.
struct DeviceInfo {
    std::string name;          // "NVIDIA H200", or "cpu"
    int n_sm = 0;              // multiprocessors (CUDA)
    uint64_t memory_bytes = 0; // total device memory
    uint64_t l2_bytes = 0;
    int compute_capability = 0;  // 90 for sm_90
    uint64_t persisting_l2_bytes = 0;  // the persisting-L2 carve-out (CUDA; set to 0 at creation)
};

// True when this build has CUDA and at least one device answers (GPU tests skip otherwise).
bool cuda_available();
// True when this build was compiled with the CUDA backend.
bool built_with_cuda();

// Wall time between two points on the backend's stream (CUDA events; a host clock on the CPU).
class EventTimer {
public:
    virtual ~EventTimer() = default;
    virtual void start() = 0;
    virtual void stop() = 0;
    virtual Result<double> elapsed_ms() = 0;  // waits for stop()
};

// Work captured from the backend's stream (a CUDA graph), replayed by launch().
class Graph {
public:
    virtual ~Graph() = default;
    // Enqueues one replay on the stream; does not wait for it.
    virtual Status launch() = 0;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual DeviceKind kind() const = 0;
    virtual const DeviceInfo &info() const = 0;

    // Zero-filled memory; nullptr when out of memory.
    virtual void *alloc(size_t bytes, size_t alignment = 256) = 0;
    virtual void free(void *ptr) = 0;
    virtual Status upload(void *device_dst, const void *host_src, size_t bytes) = 0;
    virtual Status download(void *host_dst, const void *device_src, size_t bytes) = 0;
    virtual Status memset(void *device_dst, int value, size_t bytes) = 0;
    // Element i of dst (n elements of dtype) = round(mean + std * normal_at(key, i)), the same
    // bits model::synthesize_tensor writes on the host; std == 0 writes `mean`.
    virtual Status fill_normal(void *device_dst, DType dtype, uint64_t n, uint64_t key, float mean, float std) = 0;
    // Device-to-device copy (memmove on the CPU; the ranges may not overlap on CUDA).
    virtual Status copy(void *device_dst, const void *device_src, size_t bytes) = 0;
    // A position-sensitive 64-bit checksum of device memory, computed where it lives (a kernel on
    // CUDA: the weights never cross the bus). `data` 16-byte aligned. The CPU and CUDA
    // checksums are different functions: compare values of one backend only.
    virtual Result<uint64_t> checksum(const void *device_data, size_t bytes) = 0;
    // Evicts the device cache's contents before a timed step, by writing a buffer twice the L2
    // size on the stream (CUDA); nothing on the CPU.
    virtual Status flush_cache() = 0;
    // Waits for the stream and reports any asynchronous error (a poisoned context included).
    virtual Status synchronize() = 0;
    // Waits for all work on the device, on any stream: the host-clock cross-check of event
    // timings (work that escaped the stream finishes only here).
    virtual Status synchronize_device() = 0;
    // Captures the work `body` enqueues on stream() into a graph. An error on the CPU (no
    // graphs), or when the body fails or does what capture forbids (synchronizing, allocating,
    // reading device memory back); the backend stays usable either way.
    virtual Result<std::unique_ptr<Graph>> capture(const std::function<Status()> &body) = 0;
    virtual std::unique_ptr<EventTimer> create_timer() = 0;
    // cudaStream_t for CUDA, nullptr for the CPU: the stream plugins are given.
    virtual void *stream() const = 0;
};

// The CPU backend (host memory) or the CUDA backend on device `device_index` (an error when the
// build has no CUDA or the device does not answer). Creating the CUDA backend creates its context.
Result<std::unique_ptr<Backend>> create_backend(DeviceKind kind, int device_index = 0);

}  // namespace hp::backend
