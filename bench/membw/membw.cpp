// membw: this machine's main-memory READ bandwidth, the ceiling a weight-streaming forward pass
// is measured against. Each of T threads sums its own contiguous slice of one buffer much larger
// than the last-level cache (default 1 GiB); a repetition is timed from a common start to the
// last thread's finish. After warm-up, R repetitions give median, min and max. A memcpy of half
// the buffer is timed too, as a sanity check that the read loop streams at full speed: a copy
// moves 2-3 bytes of memory traffic per byte copied (read, write, and write-allocate unless it
// uses streaming stores), so one thread's read figure should be near 2-3x the copy rate; far
// below that means the read loop is not streaming. Prints JSON; GB/s = 1e9 bytes per second.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Sums n uint64 words with 8 independent accumulators so the loop is bound by loads, not by an
// add chain; integer adds reassociate freely, so -O3 vectorises it into full-width loads.
__attribute__((noinline)) uint64_t sum_words(const uint64_t *__restrict words, size_t n) {
    uint64_t acc[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; ++k) acc[k] += words[i + size_t(k)];
    }
    for (; i < n; ++i) acc[0] += words[i];
    uint64_t total = 0;
    for (uint64_t a : acc) total += a;
    return total;
}

struct Summary {
    double median_gbs = 0, min_gbs = 0, max_gbs = 0;
};

Summary summarise(std::vector<double> gbs) {
    std::sort(gbs.begin(), gbs.end());
    const size_t n = gbs.size();
    const double median = n % 2 ? gbs[n / 2] : (gbs[n / 2 - 1] + gbs[n / 2]) / 2;
    return {median, gbs.front(), gbs.back()};
}

nlohmann::json to_json(const Summary &s) {
    return {{"median_gbs", s.median_gbs}, {"min_gbs", s.min_gbs}, {"max_gbs", s.max_gbs}};
}

// Read bandwidth with n_thread threads over words[0, n_word), each thread its own slice.
std::vector<double> measure_read(const uint64_t *words, size_t n_word, int n_thread, int n_warmup, int n_rep) {
    const int n_round = n_warmup + n_rep;
    std::vector<uint64_t> sums(static_cast<size_t>(n_thread), 0);
    std::barrier start(n_thread + 1), finish(n_thread + 1);
    std::vector<std::thread> threads;
    for (int t = 0; t < n_thread; ++t) {
        threads.emplace_back([&, t] {
            const size_t begin = n_word * size_t(t) / size_t(n_thread);
            const size_t end = n_word * size_t(t + 1) / size_t(n_thread);
            for (int round = 0; round < n_round; ++round) {
                start.arrive_and_wait();
                sums[size_t(t)] += sum_words(words + begin, end - begin);
                finish.arrive_and_wait();
            }
        });
    }
    std::vector<double> gbs;
    for (int round = 0; round < n_round; ++round) {
        start.arrive_and_wait();
        const auto t0 = Clock::now();
        finish.arrive_and_wait();
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        if (round >= n_warmup) gbs.push_back(double(n_word * sizeof(uint64_t)) / seconds / 1e9);
    }
    for (auto &thread : threads) thread.join();
    uint64_t total = 0;
    for (uint64_t s : sums) total += s;
    asm volatile("" : : "r"(total));  // the sums are used: the reads cannot be elided
    return gbs;
}

// Copy rate (bytes copied per second) of one memcpy of n_byte.
std::vector<double> measure_memcpy(uint8_t *dst, const uint8_t *src, size_t n_byte, int n_warmup, int n_rep) {
    std::vector<double> gbs;
    for (int round = 0; round < n_warmup + n_rep; ++round) {
        const auto t0 = Clock::now();
        std::memcpy(dst, src, n_byte);
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        asm volatile("" : : "r"(dst) : "memory");
        if (round >= n_warmup) gbs.push_back(double(n_byte) / seconds / 1e9);
    }
    return gbs;
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"Measure main-memory read bandwidth (and a memcpy rate as a sanity check); prints JSON."};
    uint64_t buffer_mib = 1024;
    int n_rep = 9;
    int n_warmup = 2;
    std::vector<int> thread_counts = {1, 2};
    bool with_memcpy = true;
    app.add_option("--mib", buffer_mib, "buffer size in MiB (keep it far above the last-level cache)")->capture_default_str();
    app.add_option("--reps", n_rep, "timed repetitions per measurement")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--warmup", n_warmup, "untimed repetitions first")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_option("--threads", thread_counts, "thread counts to measure")->capture_default_str()->delimiter(',');
    app.add_flag("!--no-memcpy", with_memcpy, "skip the memcpy sanity check");
    CLI11_PARSE(app, argc, argv);

    const size_t n_byte = size_t(buffer_mib) << 20;
    const size_t n_word = n_byte / sizeof(uint64_t);
    auto *words = static_cast<uint64_t *>(std::aligned_alloc(2 << 20, n_byte));
    if (!words) {
        std::fprintf(stderr, "membw: cannot allocate %zu bytes\n", n_byte);
        return 1;
    }
    for (size_t i = 0; i < n_word; ++i) words[i] = i;  // touch every page; no zero-page reads

    nlohmann::json out = {{"buffer_bytes", n_byte}, {"reps", n_rep}, {"warmup", n_warmup},
                          {"hardware_threads", std::thread::hardware_concurrency()}};
    nlohmann::json reads = nlohmann::json::array();
    double best_gbs = 0;
    int best_threads = 0;
    for (int n_thread : thread_counts) {
        if (n_thread < 1) continue;
        const Summary s = summarise(measure_read(words, n_word, n_thread, n_warmup, n_rep));
        nlohmann::json entry = to_json(s);
        entry["threads"] = n_thread;
        reads.push_back(entry);
        if (s.median_gbs > best_gbs) best_gbs = s.median_gbs, best_threads = n_thread;
    }
    out["read"] = reads;
    out["read_best_median_gbs"] = best_gbs;
    out["read_best_threads"] = best_threads;
    if (with_memcpy) {
        // Copy the first half onto the second: both halves stay far above the cache.
        auto *bytes = reinterpret_cast<uint8_t *>(words);
        const Summary s = summarise(measure_memcpy(bytes + n_byte / 2, bytes, n_byte / 2, n_warmup, n_rep));
        nlohmann::json entry = to_json(s);
        entry["note"] = "bytes copied per second, 1 thread; memory traffic is 2-3x this (read, write, write-allocate)";
        out["memcpy_copy"] = entry;
    }
    std::free(words);
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
}
