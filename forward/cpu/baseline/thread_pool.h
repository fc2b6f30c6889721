// A persistent pool of CPU threads for one plugin instance: created once in create(), joined in
// destroy(), never per step. run(n_chunk, fn) calls fn(chunk, thread) once for every chunk in
// [0, n_chunk); threads (the caller is thread 0) claim chunks from a shared counter, so a worker
// that the host has descheduled costs nothing: the others take its chunks. run() returns when every
// chunk has finished, so consecutive run()s are separated by a barrier. Idle workers spin
// HP_SPIN_ITERS pause-loops on the job counter, then sleep on it (a futex).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "knobs.h"

namespace hp_cpu {

class ThreadPool {
public:
    explicit ThreadPool(int n_thread);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const { return n_thread_; }

    // How many chunks to cut `n_unit` units of work into: a few per thread, for balance.
    int64_t chunks_for(int64_t n_unit) const {
        const int64_t most = n_thread_ == 1 ? 1 : int64_t(n_thread_) * HP_CHUNKS_PER_THREAD;
        return n_unit < most ? (n_unit < 1 ? 1 : n_unit) : most;
    }

    template <typename Fn>
    void run(int64_t n_chunk, Fn &&fn) {
        if (n_thread_ == 1 || n_chunk == 1) {
            for (int64_t chunk = 0; chunk < n_chunk; ++chunk) fn(chunk, 0);
            return;
        }
        job_.store([](void *context, int64_t chunk, int thread) { (*static_cast<Fn *>(context))(chunk, thread); },
                   std::memory_order_relaxed);
        job_context_.store(&fn, std::memory_order_relaxed);
        dispatch(n_chunk);
    }

private:
    using JobFn = void (*)(void *, int64_t, int);
    static constexpr uint64_t kClosed = 0xffffffffu;  // chunk field of a finished job: nothing to claim
    void dispatch(int64_t n_chunk);
    void claim_chunks(uint32_t generation, int thread);
    void worker(int thread, uint32_t seen);

    int n_thread_;
    uint32_t last_generation_ = 0;  // written by the caller only
    std::atomic<JobFn> job_{nullptr};
    std::atomic<void *> job_context_{nullptr};
    std::atomic<int64_t> n_chunk_{0};
    alignas(64) std::atomic<uint64_t> work_{0};  // generation << 32 | next unclaimed chunk (kClosed: none)
    alignas(64) std::atomic<uint32_t> generation_{0};
    alignas(64) std::atomic<int64_t> n_finished_{0};
    alignas(64) std::atomic<int> n_sleeping_{0};
    std::atomic<bool> stop_{false};
    std::vector<std::thread> threads_;
};

// Part `part` of `n_part` of [0, n): contiguous, boundaries multiples of `align`.
inline void split_range(int64_t n, int64_t align, int64_t part, int64_t n_part, int64_t &begin, int64_t &end) {
    const int64_t n_unit = (n + align - 1) / align;
    const int64_t per = n_unit / n_part, extra = n_unit % n_part;
    const int64_t unit_begin = part * per + (part < extra ? part : extra);
    const int64_t unit_end = unit_begin + per + (part < extra ? 1 : 0);
    begin = unit_begin * align < n ? unit_begin * align : n;
    end = unit_end * align < n ? unit_end * align : n;
}

}  // namespace hp_cpu
