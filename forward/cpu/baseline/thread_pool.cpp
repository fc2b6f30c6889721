#include "thread_pool.h"

#include <sched.h>

namespace hp_cpu {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_thread) : n_thread_(n_thread < 1 ? 1 : n_thread) {
    for (int t = 1; t < n_thread_; ++t) threads_.emplace_back([this, t] { worker(t, 0); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (std::thread &thread : threads_) thread.join();
}

// Claims and runs chunks of job `generation` until none is left (or a newer job replaced it).
// A chunk's job and context stay valid while it runs: the caller waits for every claimed chunk.
void ThreadPool::claim_chunks(uint32_t generation, int thread) {
    uint64_t word = work_.load(std::memory_order_acquire);
    while (uint32_t(word >> 32) == generation) {
        const int64_t chunk = int64_t(word & 0xffffffffu);
        if (chunk >= n_chunk_.load(std::memory_order_acquire)) return;
        if (!work_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel)) continue;
        job_.load(std::memory_order_relaxed)(job_context_.load(std::memory_order_relaxed), chunk, thread);
        n_finished_.fetch_add(1, std::memory_order_release);
        word = work_.load(std::memory_order_acquire);
    }
}

void ThreadPool::dispatch(int64_t n_chunk) {
    // Close the previous job first. A worker may still hold its last work word (generation,
    // chunk == its n_chunk) and read the new, larger n_chunk_; without this store its
    // compare-exchange would succeed, run a chunk of the new job under the old generation and
    // count it twice (the caller below then waited forever).
    work_.store(uint64_t(last_generation_) << 32 | kClosed);
    const uint32_t generation = ++last_generation_;
    n_finished_.store(0, std::memory_order_relaxed);
    n_chunk_.store(n_chunk, std::memory_order_release);  // after the close, for claim_chunks' acquire
    work_.store(uint64_t(generation) << 32);  // seq_cst: publishes the job before anyone claims
    generation_.store(generation);
    if (n_sleeping_.load() > 0) generation_.notify_all();
    claim_chunks(generation, 0);
    // Chunks other threads claimed are running; wait, yielding now and then to a busy host.
    for (int spin = 0; n_finished_.load(std::memory_order_acquire) != n_chunk; ++spin) {
        cpu_relax();
        if ((spin & 255) == 255) sched_yield();
    }
}

void ThreadPool::worker(int thread, uint32_t seen) {
    while (true) {
        uint32_t now = generation_.load(std::memory_order_acquire);
        for (int spin = 0; now == seen && spin < HP_SPIN_ITERS; ++spin) {
            cpu_relax();
            now = generation_.load(std::memory_order_acquire);
        }
        if (now == seen) {
            n_sleeping_.fetch_add(1);
            generation_.wait(seen);
            n_sleeping_.fetch_sub(1);
            now = generation_.load(std::memory_order_acquire);
        }
        seen = now;
        if (stop_.load()) return;
        claim_chunks(now, thread);
    }
}

}  // namespace hp_cpu
