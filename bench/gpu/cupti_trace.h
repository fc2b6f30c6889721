// The start and end time of every kernel the device runs between begin() and end(), from CUPTI's
// activity API (concurrent-kernel records: the timestamps Nsight Systems shows), for
// hotpass_bench_gpu_decode --timeline. libcupti is opened at run time (dlopen of libcupti.so.13,
// then libcupti.so), so the bench starts and runs without it and only --timeline needs it; CUDA's
// toolkit ships it (lib64 or extras/CUPTI), and so does PyTorch's wheel (nvidia-cuda-cupti).
// One trace at a time per process (CUPTI's buffers are process-wide).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hotpass/core/result.h"

namespace hp::bench_timeline {

struct KernelRecord {
    std::string mangled_name;
    int grid[3] = {0, 0, 0};
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t correlation = 0;  // the API call that launched it: one cuGraphLaunch for all kernels of a replay
};

class KernelTrace {
public:
    // Enables kernel records; an error says why (no libcupti, CUPTI refused).
    static Result<std::unique_ptr<KernelTrace>> begin();
    // Waits for the device, flushes and disables; the records in the order CUPTI delivered them.
    // Records CUPTI dropped (its buffers full) make this an error rather than a partial answer.
    Result<std::vector<KernelRecord>> end();
    ~KernelTrace();

    KernelTrace(const KernelTrace &) = delete;
    KernelTrace &operator=(const KernelTrace &) = delete;

private:
    KernelTrace() = default;
    bool active_ = false;
};

}  // namespace hp::bench_timeline
