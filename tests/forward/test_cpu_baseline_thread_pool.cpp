// The CPU baseline's thread pool (forward/cpu/baseline/thread_pool.h, compiled into this test):
// every chunk of every job runs exactly once, with more threads than cores and jobs of different
// sizes back to back (a small job followed by a larger one is where a worker still holding the
// small job's last work word could claim a chunk of the next).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <random>
#include <vector>

#include "thread_pool.h"

namespace hp_cpu {
namespace {

constexpr int kJobs = 300000;
constexpr int64_t kMaxChunks = 64;

// Runs kJobs jobs on a pool of n_thread threads; returns how many chunks ran other than once.
int64_t miscounted_chunks(int n_thread, uint32_t seed) {
    ThreadPool pool(n_thread);
    std::vector<std::atomic<int>> runs(kMaxChunks);
    std::mt19937 rng(seed);
    int64_t miscounted = 0;
    for (int job = 0; job < kJobs; ++job) {
        const int64_t n_chunk = job % 2 ? 2 + int64_t(rng() % 3) : 16 + int64_t(rng() % (kMaxChunks - 15));
        pool.run(n_chunk, [&](int64_t chunk, int) { runs[size_t(chunk)].fetch_add(1, std::memory_order_relaxed); });
        for (int64_t chunk = 0; chunk < kMaxChunks; ++chunk) {
            const int count = runs[size_t(chunk)].exchange(0, std::memory_order_relaxed);
            miscounted += count != (chunk < n_chunk ? 1 : 0);
        }
    }
    return miscounted;
}

TEST(CpuBaselineThreadPool, EveryChunkOfEveryJobRunsOnce) {
    for (int n_thread : {2, 3}) {
        const uint32_t seed = uint32_t(std::random_device{}());
        auto result = std::async(std::launch::async, miscounted_chunks, n_thread, seed);
        // A chunk claimed twice also leaves its job's finish count past the chunk count, and the
        // caller then waits forever: report that instead of hanging the test run.
        if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
            ADD_FAILURE() << n_thread << " threads, seed " << seed << ": a job never finished";
            std::_Exit(1);
        }
        EXPECT_EQ(result.get(), 0) << n_thread << " threads, seed " << seed;
    }
}

}  // namespace
}  // namespace hp_cpu
