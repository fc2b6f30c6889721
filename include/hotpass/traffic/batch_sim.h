// A small discrete-event simulation of continuous batching (vLLM-style, chunked prefill), run on
// a stream of arrivals, that yields what a given engine would see under that traffic: concurrency,
// decode batch sizes, KV lengths, prefill chunks, and the time spent in each kind of step.
//
// Each step: admit waiting requests FCFS while fewer than max_batch are running; give every
// decoding sequence one token; fill the rest of max_batched_tokens with prefill chunks, oldest
// sequence first. A prompt's cached prefix (prefix reuse) is not recomputed. The step takes
// StepCostModel::step_ms; arrivals during a step wait for the next. A sequence's last prefill
// chunk yields its first output token. Invariant: the simulated clock never runs backwards and
// arrivals are fed in order; memory is bounded by max_batch, the waiting-queue cap and the cells.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#include "hotpass/traffic/batch_shape.h"
#include "hotpass/traffic/distribution.h"

namespace hp::traffic {

// Steps of similar shape: the same octave of decode batch size, of prefill tokens and of mean
// decode KV length. Octave of v: 0 for 0, else 1 + floor(log2 v).
struct StepCell {
    uint32_t decode_batch_octave = 0, prefill_tokens_octave = 0, kv_len_octave = 0;
    uint64_t steps = 0;
    double time_ms = 0;   // simulated time spent in these steps
    uint64_t tokens = 0;  // tokens computed in these steps
    double mean_decode_batch = 0, mean_kv_len = 0, mean_prefill_tokens = 0;
    StepShape representative;  // a real simulated step, the sampled one nearest the means
};

struct BatchingSummary {
    bool simulated = false;
    EngineLimits limits;
    StepCostModel cost;
    uint64_t steps = 0;
    double busy_s = 0;              // simulated time with at least one sequence running
    double span_s = 0;              // from the first arrival to the last completion
    uint64_t tokens = 0;            // prefill + decode tokens computed
    uint64_t dropped_requests = 0;  // arrivals refused because the waiting queue was full
    Distribution concurrency;       // running sequences, weighted by step time (microseconds)
    Distribution decode_batch;      // decode sequences per step
    Distribution decode_kv_len;     // KV length of every decoded token
    Distribution prefill_tokens;    // prefill tokens per step (steps with prefill only)
    Distribution ttft_ms;           // simulated time to first token, per request
    std::vector<StepCell> cells;    // by time_ms, descending
};

class BatchSimulator {
  public:
    static constexpr size_t kMaxWaiting = 1u << 20;
    static constexpr size_t kCellSamples = 8;

    // limits and cost must pass check_engine_limits / check_cost_model (a broken one stops the
    // process); check them first where they come from a user.
    BatchSimulator(EngineLimits limits, StepCostModel cost, uint64_t seed = 0);

    // Arrivals must come in non-decreasing arrival_s. cached_tokens: prompt tokens served by the
    // prefix cache (at most input_tokens - 1 are honoured).
    void arrive(double arrival_s, uint32_t input_tokens, uint32_t output_tokens,
                uint32_t cached_tokens = 0);
    // Runs the remaining work to completion and summarises.
    BatchingSummary finish();

  private:
    struct Sequence {
        double arrival_s = 0;
        uint32_t prefill_left = 0;  // prompt tokens still to compute
        uint32_t kv_len = 0;        // tokens in the KV cache
        uint32_t output_left = 0;   // tokens still to generate
    };
    struct CellAccumulator {
        StepCell cell;
        double sum_decode_batch = 0, sum_kv_len = 0, sum_prefill_tokens = 0;
        std::vector<StepShape> samples;
    };

    void run_until(double time_s);  // runs steps while there is work and the clock is < time_s
    void step();
    void record(const StepShape &shape, double step_ms);

    EngineLimits limits_;
    StepCostModel cost_;
    uint64_t rng_state_;
    double now_s_ = 0;
    bool started_ = false;
    double first_arrival_s_ = 0, last_arrival_s_ = 0, last_completion_s_ = 0;
    std::deque<Sequence> waiting_;
    std::vector<Sequence> running_;  // admission order
    BatchingSummary summary_;
    ValueCounter concurrency_, decode_batch_, decode_kv_len_, prefill_tokens_, ttft_ms_;
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, CellAccumulator> cells_;
};

uint32_t octave(uint64_t value);

}  // namespace hp::traffic
