// The continuous-batching simulation. One step() is one engine iteration; cells keep a small
// reservoir of sampled step shapes (deterministic: splitmix64 on the seed) for the Workload.
#include "hotpass/traffic/batch_sim.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "hotpass/core/check.h"
#include "hotpass/core/hash.h"

namespace hp::traffic {

uint32_t octave(uint64_t value) {
    return value == 0 ? 0 : uint32_t(std::bit_width(value));
}

BatchSimulator::BatchSimulator(EngineLimits limits, StepCostModel cost, uint64_t seed)
    : limits_(limits), cost_(cost), rng_state_(seed) {
    const Status limits_ok = check_engine_limits(limits), cost_ok = check_cost_model(cost);
    HP_CHECK(limits_ok.ok(), "{}", limits_ok.error());
    HP_CHECK(cost_ok.ok(), "{}", cost_ok.error());
    summary_.simulated = true;
    summary_.limits = limits;
    summary_.cost = cost;
}

void BatchSimulator::arrive(double arrival_s, uint32_t input_tokens, uint32_t output_tokens,
                            uint32_t cached_tokens) {
    HP_CHECK(!started_ || arrival_s >= last_arrival_s_, "arrivals must be in order: {} after {}",
             arrival_s, last_arrival_s_);
    last_arrival_s_ = arrival_s;
    if (!started_) {
        started_ = true;
        first_arrival_s_ = arrival_s;
        now_s_ = arrival_s;
    }
    run_until(arrival_s);
    if (waiting_.size() >= kMaxWaiting) {
        ++summary_.dropped_requests;
        return;
    }
    input_tokens = std::max<uint32_t>(input_tokens, 1);
    cached_tokens = std::min(cached_tokens, input_tokens - 1);
    waiting_.push_back({arrival_s, input_tokens - cached_tokens, cached_tokens,
                        std::max<uint32_t>(output_tokens, 1)});
}

void BatchSimulator::run_until(double time_s) {
    while (now_s_ < time_s) {
        const bool admissible = !waiting_.empty() && waiting_.front().arrival_s <= now_s_;
        if (running_.empty() && !admissible) {
            now_s_ = time_s;  // idle until the next arrival
            return;
        }
        step();
    }
}

void BatchSimulator::step() {
    while (running_.size() < limits_.max_batch && !waiting_.empty() &&
           waiting_.front().arrival_s <= now_s_) {
        running_.push_back(waiting_.front());
        waiting_.pop_front();
    }
    StepShape shape;
    uint32_t budget = limits_.max_batched_tokens;
    std::vector<uint32_t> chunk_of(running_.size(), 0);
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        if (running_[i].prefill_left != 0) continue;
        shape.decode_kv_len.push_back(running_[i].kv_len);
        chunk_of[i] = 1;
        --budget;
    }
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        Sequence &sequence = running_[i];
        if (sequence.prefill_left == 0) continue;
        const uint32_t tokens = std::min(sequence.prefill_left, budget);
        shape.prefill.push_back({tokens, sequence.kv_len});
        chunk_of[i] = tokens;
        budget -= tokens;
    }
    const double step_ms = cost_.step_ms(shape);
    record(shape, step_ms);
    concurrency_.add(running_.size(), uint64_t(std::llround(step_ms * 1000)));
    now_s_ += step_ms / 1000.0;
    size_t kept = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
        Sequence sequence = running_[i];
        if (chunk_of[i] > 0) {
            if (sequence.prefill_left > 0) {
                sequence.prefill_left -= chunk_of[i];
                sequence.kv_len += chunk_of[i];
                if (sequence.prefill_left == 0) {
                    --sequence.output_left;  // the last chunk yields the first token
                    ttft_ms_.add(uint64_t(std::llround((now_s_ - sequence.arrival_s) * 1000)));
                }
            } else {
                ++sequence.kv_len;
                --sequence.output_left;
            }
        }
        if (sequence.prefill_left == 0 && sequence.output_left == 0) {
            last_completion_s_ = now_s_;
            continue;
        }
        running_[kept++] = sequence;
    }
    running_.resize(kept);
}

void BatchSimulator::record(const StepShape &shape, double step_ms) {
    ++summary_.steps;
    summary_.busy_s += step_ms / 1000.0;
    summary_.tokens += shape.batched_tokens();
    decode_batch_.add(shape.decode_batch());
    for (uint32_t kv_len : shape.decode_kv_len) decode_kv_len_.add(kv_len);
    const uint64_t prefill = shape.prefill_tokens();
    if (prefill > 0) prefill_tokens_.add(prefill);

    double kv_sum = 0;
    for (uint32_t kv_len : shape.decode_kv_len) kv_sum += kv_len;
    const double mean_kv = shape.decode_batch() ? kv_sum / shape.decode_batch() : 0;
    auto key =
        std::make_tuple(octave(shape.decode_batch()), octave(prefill), octave(uint64_t(mean_kv)));
    CellAccumulator &accumulator = cells_[key];
    StepCell &cell = accumulator.cell;
    std::tie(cell.decode_batch_octave, cell.prefill_tokens_octave, cell.kv_len_octave) = key;
    ++cell.steps;
    cell.time_ms += step_ms;
    cell.tokens += shape.batched_tokens();
    accumulator.sum_decode_batch += shape.decode_batch();
    accumulator.sum_kv_len += mean_kv;
    accumulator.sum_prefill_tokens += double(prefill);
    // Reservoir sampling: every step of the cell is kept with probability kCellSamples / steps.
    if (accumulator.samples.size() < kCellSamples) {
        accumulator.samples.push_back(shape);
    } else {
        rng_state_ = splitmix64(rng_state_);
        const uint64_t slot = rng_state_ % cell.steps;
        if (slot < kCellSamples) accumulator.samples[slot] = shape;
    }
}

BatchingSummary BatchSimulator::finish() {
    while (!running_.empty() || !waiting_.empty()) {
        if (running_.empty() && waiting_.front().arrival_s > now_s_)
            now_s_ = waiting_.front().arrival_s;
        step();
    }
    summary_.span_s = started_ ? std::max(0.0, last_completion_s_ - first_arrival_s_) : 0;
    summary_.concurrency = concurrency_.summarize();
    summary_.decode_batch = decode_batch_.summarize();
    summary_.decode_kv_len = decode_kv_len_.summarize();
    summary_.prefill_tokens = prefill_tokens_.summarize();
    summary_.ttft_ms = ttft_ms_.summarize();
    for (auto &[key, accumulator] : cells_) {
        StepCell cell = accumulator.cell;
        cell.mean_decode_batch = accumulator.sum_decode_batch / double(cell.steps);
        cell.mean_kv_len = accumulator.sum_kv_len / double(cell.steps);
        cell.mean_prefill_tokens = accumulator.sum_prefill_tokens / double(cell.steps);
        const auto distance = [&](const StepShape &shape) {
            double kv_sum = 0;
            for (uint32_t kv_len : shape.decode_kv_len) kv_sum += kv_len;
            const double mean_kv = shape.decode_batch() ? kv_sum / shape.decode_batch() : 0;
            return std::abs(std::log1p(shape.decode_batch()) - std::log1p(cell.mean_decode_batch)) +
                   std::abs(std::log1p(mean_kv) - std::log1p(cell.mean_kv_len)) +
                   std::abs(std::log1p(double(shape.prefill_tokens())) -
                            std::log1p(cell.mean_prefill_tokens));
        };
        cell.representative = *std::min_element(
            accumulator.samples.begin(), accumulator.samples.end(),
            [&](const StepShape &a, const StepShape &b) { return distance(a) < distance(b); });
        summary_.cells.push_back(std::move(cell));
    }
    std::sort(summary_.cells.begin(), summary_.cells.end(),
              [](const StepCell &a, const StepCell &b) { return a.time_ms > b.time_ms; });
    cells_.clear();
    return summary_;
}

}  // namespace hp::traffic
