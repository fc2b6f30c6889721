// Text rendering of profiles; octave histograms are folded from the fine 8-per-octave bins.
#include "hotpass/traffic/profile_report.h"

#include <algorithm>
#include <map>

#include "hotpass/traffic/batch_sim.h"

namespace hp::traffic {

std::string format_tokens(double tokens) {
    if (tokens >= 1e6) return fmt::format("{:.1f}M", tokens / 1e6);
    if (tokens >= 1e4) return fmt::format("{:.0f}k", tokens / 1e3);
    if (tokens >= 1e3) return fmt::format("{:.1f}k", tokens / 1e3);
    return fmt::format("{:.0f}", tokens);
}

std::string text_histogram(const Distribution &distribution, std::string_view unit) {
    if (distribution.count == 0) return "  (empty)\n";
    std::map<uint32_t, uint64_t> by_octave;
    for (const HistogramBin &bin : distribution.bins) by_octave[octave(bin.lo)] += bin.count;
    uint64_t largest = 0;
    for (const auto &[o, count] : by_octave) largest = std::max(largest, count);
    std::string text;
    for (uint32_t o = by_octave.begin()->first; o <= by_octave.rbegin()->first; ++o) {
        const uint64_t count = by_octave.count(o) ? by_octave[o] : 0;
        const double lo = o == 0 ? 0 : double(uint64_t(1) << (o - 1));
        const double hi = o == 0 ? 1 : double(uint64_t(1) << o);
        const size_t width = size_t(40.0 * double(count) / double(largest) + 0.5);
        text += fmt::format("  {:>6}-{:<6} {:<5} {:<40} {:5.1f}%\n", format_tokens(lo),
                            format_tokens(hi), unit, std::string(width, '#'),
                            100.0 * double(count) / double(distribution.count));
    }
    return text;
}

namespace {

std::string summary_line(std::string_view name, const Distribution &d, std::string_view unit) {
    return fmt::format("{}: mean {} P50 {} P90 {} P99 {} max {} {}\n", name, format_tokens(d.mean),
                       format_tokens(double(d.p50)), format_tokens(double(d.p90)),
                       format_tokens(double(d.p99)), format_tokens(double(d.max)), unit);
}

}  // namespace

std::string format_profile(const Profile &profile) {
    std::string text = fmt::format("profile of {} ({}): {} requests over {:.1f} s\n",
                                   profile.source, profile.format, profile.requests,
                                   profile.arrivals.end_s - profile.arrivals.start_s);
    text += fmt::format(
        "arrivals: {:.2f} req/s, inter-arrival CV {:.2f} (1 = Poisson), peak {} in 1 s\n",
        profile.arrivals.rate_rps, profile.arrivals.interarrival_cv,
        profile.arrivals.peak_requests_1s);
    text += summary_line("input", profile.input_tokens, "tokens");
    text += text_histogram(profile.input_tokens, "tok");
    text += summary_line("output", profile.output_tokens, "tokens");
    text += text_histogram(profile.output_tokens, "tok");
    if (profile.prefix.known)
        text +=
            fmt::format("prefix reuse: {:.1f}% of {} prompt blocks already cached ({} requests)\n",
                        profile.prefix.reuse * 100, profile.prefix.blocks, profile.prefix.requests);
    else
        text += "prefix reuse: unknown (the trace has no prefix hashes)\n";
    const BatchingSummary &b = profile.batching;
    if (b.simulated) {
        text += fmt::format(
            "batching (max batch {}, max batched tokens {}; step_ms = {} + {}*tokens + "
            "{}*kv_tokens):\n",
            b.limits.max_batch, b.limits.max_batched_tokens, b.cost.base_ms, b.cost.per_token_ms,
            b.cost.per_kv_token_ms);
        text +=
            fmt::format("  {} steps, busy {:.1f}% of {:.1f} s, {:.0f} tokens/s while busy{}\n",
                        b.steps, b.span_s > 0 ? 100 * b.busy_s / b.span_s : 0, b.span_s,
                        b.busy_s > 0 ? double(b.tokens) / b.busy_s : 0,
                        b.dropped_requests ? fmt::format(", {} dropped", b.dropped_requests) : "");
        const double arrival_span_s = profile.arrivals.end_s - profile.arrivals.start_s;
        if (b.span_s > 1.2 * arrival_span_s + 60)
            text += fmt::format(
                "  SATURATED: the engine finishes {:.0f} s after the last arrival; queues "
                "grow, so batch sizes are the limits', not the traffic's\n",
                b.span_s - arrival_span_s);
        text += summary_line("  concurrency (time-weighted)", b.concurrency, "sequences");
        text += summary_line("  decode batch", b.decode_batch, "sequences");
        text += text_histogram(b.decode_batch, "seq");
        text += summary_line("  decode KV length", b.decode_kv_len, "tokens");
        text += summary_line("  prefill per step", b.prefill_tokens, "tokens");
        text += summary_line("  simulated TTFT", b.ttft_ms, "ms");
    }
    if (!profile.expert_load.layers.empty())
        text +=
            fmt::format("expert load: {} layers, imbalance (max/mean) mean {:.2f}, worst {:.2f}\n",
                        profile.expert_load.layers.size(), profile.expert_load.mean_imbalance,
                        profile.expert_load.max_imbalance);
    return text;
}

std::string format_read_stats(const ReadStats &stats) {
    if (stats.rows_bad == 0) return "";
    std::string text = fmt::format("{} bad rows skipped (of {} lines); first ones:\n",
                                   stats.rows_bad, stats.lines);
    for (const BadRow &bad : stats.first_bad)
        text += fmt::format("  line {}: {}\n", bad.line, bad.reason);
    return text;
}

}  // namespace hp::traffic
