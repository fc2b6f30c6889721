// CUPTI kernel records through dlopen: see cupti_trace.h.
#include "cupti_trace.h"

#if HOTPASS_HAVE_CUPTI
#include <cupti_version.h>
#if !defined(CUPTI_API_VERSION) || CUPTI_API_VERSION < 130000  // CUpti_ActivityKernel10, libcupti.so.13
#undef HOTPASS_HAVE_CUPTI
#endif
#endif

#if !HOTPASS_HAVE_CUPTI
namespace hp::bench_timeline {
Result<std::unique_ptr<KernelTrace>> KernelTrace::begin() {
    return Error{"built without CUPTI 13's headers (cupti.h of CUDA 13 was not found with the CUDA toolkit)"};
}
Result<std::vector<KernelRecord>> KernelTrace::end() { return Error{"built without CUPTI"}; }
KernelTrace::~KernelTrace() = default;
}  // namespace hp::bench_timeline
#else

#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace hp::bench_timeline {
namespace {

// The CUPTI entry points used, resolved once from the library.
struct Cupti {
    void *library = nullptr;
    std::string load_error;
    CUptiResult (*activity_enable)(CUpti_ActivityKind) = nullptr;
    CUptiResult (*activity_disable)(CUpti_ActivityKind) = nullptr;
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
    CUptiResult (*flush_all)(uint32_t) = nullptr;
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **) = nullptr;
    CUptiResult (*dropped_records)(CUcontext, uint32_t, size_t *) = nullptr;
    CUptiResult (*result_string)(CUptiResult, const char **) = nullptr;

    std::string describe(CUptiResult result) const {
        const char *text = nullptr;
        if (result_string && result_string(result, &text) == CUPTI_SUCCESS && text) return text;
        return "CUPTI error " + std::to_string(int(result));
    }
};

template <typename F>
bool resolve(void *library, const char *symbol, F &out) {
    out = reinterpret_cast<F>(dlsym(library, symbol));
    return out != nullptr;
}

// Process-lifetime objects, never destroyed: CUPTI may deliver buffers from its own thread while
// the process tears CUDA down, after static destructors ran.
Cupti &cupti() {
    static Cupti &api = *new Cupti([] {
        Cupti a;
        for (const char *name : {"libcupti.so.13", "libcupti.so"}) {
            if ((a.library = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
        }
        if (!a.library) {
            a.load_error = std::string("cannot open libcupti.so.13 or libcupti.so (CUDA's toolkit has it in lib64 or extras/CUPTI/lib64; "
                                       "put that folder on LD_LIBRARY_PATH): ") + dlerror();
            return a;
        }
        const bool ok = resolve(a.library, "cuptiActivityEnable", a.activity_enable) && resolve(a.library, "cuptiActivityDisable", a.activity_disable) &&
                        resolve(a.library, "cuptiActivityRegisterCallbacks", a.register_callbacks) &&
                        resolve(a.library, "cuptiActivityFlushAll", a.flush_all) && resolve(a.library, "cuptiActivityGetNextRecord", a.next_record) &&
                        resolve(a.library, "cuptiActivityGetNumDroppedRecords", a.dropped_records) &&
                        resolve(a.library, "cuptiGetResultString", a.result_string);
        if (!ok) a.load_error = "libcupti lacks an activity API entry point (too old?)";
        return a;
    }());
    return api;
}

// What the buffer callbacks collect, shared with end().
struct Collected {
    std::mutex mutex;
    std::vector<KernelRecord> records;
    size_t dropped = 0, incomplete = 0;  // incomplete: records without both timestamps
};
Collected &collected() {
    static Collected &c = *new Collected();
    return c;
}

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr size_t kAlign = 8;

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = static_cast<uint8_t *>(std::aligned_alloc(kAlign, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t *buffer, size_t size, size_t valid_size) {
    const Cupti &api = cupti();
    std::vector<KernelRecord> batch;
    size_t incomplete = 0;
    CUpti_Activity *record = nullptr;
    while (api.next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const auto *kernel = reinterpret_cast<const CUpti_ActivityKernel10 *>(record);
        if (kernel->start == 0 || kernel->end < kernel->start) {  // a forced flush can hand over unfinished records
            ++incomplete;
            continue;
        }
        KernelRecord out;
        out.mangled_name = kernel->name ? kernel->name : "?";
        out.grid[0] = kernel->gridX;
        out.grid[1] = kernel->gridY;
        out.grid[2] = kernel->gridZ;
        out.start_ns = kernel->start;
        out.end_ns = kernel->end;
        out.correlation = kernel->correlationId;
        batch.push_back(std::move(out));
    }
    size_t dropped = 0;
    if (api.dropped_records(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
    std::free(buffer);
    Collected &c = collected();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.records.insert(c.records.end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
    c.dropped += dropped;
    c.incomplete += incomplete;
}

}  // namespace

Result<std::unique_ptr<KernelTrace>> KernelTrace::begin() {
    const Cupti &api = cupti();
    if (!api.load_error.empty()) return Error{api.load_error};
    static const CUptiResult registered = api.register_callbacks(buffer_requested, buffer_completed);
    if (registered != CUPTI_SUCCESS) return error("cuptiActivityRegisterCallbacks: {}", api.describe(registered));
    {
        Collected &c = collected();
        std::lock_guard<std::mutex> lock(c.mutex);
        c.records.clear();
        c.dropped = c.incomplete = 0;
    }
    if (const CUptiResult got = api.activity_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); got != CUPTI_SUCCESS) {
        return error("cuptiActivityEnable(CONCURRENT_KERNEL): {}", api.describe(got));
    }
    std::unique_ptr<KernelTrace> trace(new KernelTrace());
    trace->active_ = true;
    return trace;
}

Result<std::vector<KernelRecord>> KernelTrace::end() {
    if (!active_) return Error{"KernelTrace::end called twice"};
    const Cupti &api = cupti();
    const cudaError_t synced = cudaDeviceSynchronize();
    const CUptiResult flushed = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    api.activity_disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    active_ = false;
    if (synced != cudaSuccess) return error("cudaDeviceSynchronize: {}", cudaGetErrorString(synced));
    if (flushed != CUPTI_SUCCESS) return error("cuptiActivityFlushAll: {}", api.describe(flushed));
    Collected &c = collected();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.dropped > 0) return error("CUPTI dropped {} kernel records (its buffers were full): trace fewer replays", c.dropped);
    if (c.incomplete > 0) return error("CUPTI handed over {} kernel records without both timestamps", c.incomplete);
    return std::move(c.records);
}

KernelTrace::~KernelTrace() {
    if (active_) (void)end();
}

}  // namespace hp::bench_timeline
#endif  // HOTPASS_HAVE_CUPTI
