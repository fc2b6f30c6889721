#include "hotpass/tune/runner.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "hotpass/core/json_text.h"

namespace hp::tune {

using nlohmann::json;

Result<std::vector<Shape>> parse_shapes(const json &workload) {
    if (!workload.is_object() || !workload.contains("shapes") || !workload["shapes"].is_array()) {
        return error("expected {{\"shapes\": [{{\"decode_batch\", \"decode_kv\", \"prefill\": [...], \"weight\", \"name\"}}]}}");
    }
    const json &items = workload["shapes"];
    std::vector<Shape> shapes;
    for (size_t i = 0; i < items.size(); ++i) {
        const json &item = items[i];
        if (!item.is_object()) return error("shapes[{}]: not an object", i);
        // A count is a non-negative integer no larger than a step could be; absent means 0.
        auto count = [&](const json &value, const std::string &what, int &out) -> Status {
            if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (1 << 24)) {
                return error("shapes[{}].{}: expected an integer from 0 to {}, got {}", i, what, 1 << 24, json_summary(value));
            }
            out = int(value.get<int64_t>());
            return {};
        };
        Shape shape;
        if (item.contains("decode_batch")) HP_TRY(count(item["decode_batch"], "decode_batch", shape.decode_batch));
        if (item.contains("decode_kv")) HP_TRY(count(item["decode_kv"], "decode_kv", shape.decode_kv));
        if (item.contains("prefill")) {
            if (!item["prefill"].is_array()) return error("shapes[{}].prefill: expected an array of prompt lengths", i);
            for (size_t j = 0; j < item["prefill"].size(); ++j) {
                int tokens = 0;
                HP_TRY(count(item["prefill"][j], fmt::format("prefill[{}]", j), tokens));
                if (tokens == 0) return error("shapes[{}].prefill[{}]: a prompt has at least one token", i, j);
                shape.prefill.push_back(tokens);
            }
        }
        if (shape.decode_batch == 0 && shape.prefill.empty()) return error("shapes[{}]: neither decode_batch nor prefill", i);
        if (item.contains("weight")) {
            if (!item["weight"].is_number() || !std::isfinite(item["weight"].get<double>()) || item["weight"].get<double>() <= 0) {
                return error("shapes[{}].weight: expected a positive number, got {}", i, json_summary(item["weight"]));
            }
            shape.weight = item["weight"].get<double>();
        }
        if (item.contains("name") && !item["name"].is_string()) return error("shapes[{}].name: expected a string", i);
        shape.name = item.contains("name") ? item["name"].get<std::string>()
                                           : fmt::format("decode {}x{} prefill [{}]", shape.decode_batch, shape.decode_kv, fmt::join(shape.prefill, ","));
        shapes.push_back(std::move(shape));
    }
    if (shapes.empty()) return error("\"shapes\" is empty");
    return shapes;
}

json shapes_to_json(const std::vector<Shape> &shapes) {
    json out = {{"shapes", json::array()}};
    for (const Shape &shape : shapes) {
        out["shapes"].push_back({{"name", shape.name},
                                 {"weight", shape.weight},
                                 {"decode_batch", shape.decode_batch},
                                 {"decode_kv", shape.decode_kv},
                                 {"prefill", shape.prefill}});
    }
    return out;
}

std::vector<Shape> default_shapes(bool fast_tier) {
    if (fast_tier) {
        return {{"decode b1 kv128", 0.5, 1, 128, {}}, {"decode b8 kv128", 0.3, 8, 128, {}}, {"prefill 64", 0.2, 0, 0, {64}}};
    }
    return {{"decode b1 kv512", 0.3, 1, 512, {}},
            {"decode b4 kv512", 0.3, 4, 512, {}},
            {"decode b16 kv256", 0.2, 16, 256, {}},
            {"prefill 128", 0.1, 0, 0, {128}},
            {"mixed b4 + prefill 32", 0.1, 4, 256, {32}}};
}

Measurement summarize(const json &result, const std::vector<Shape> &shapes, const RunnerOptions &options) {
    Measurement measurement;
    measurement.raw = result;
    std::vector<std::vector<double>> incumbent_samples, candidate_samples;
    std::vector<double> sampled_weights;  // weights of the shapes that have samples, in step
    size_t index = 0;
    for (const json &samples : result.value("shapes", json::array())) {
        ShapeMeasurement shape;
        shape.name = samples.value("name", "");
        shape.weight = index < shapes.size() ? shapes[index].weight : 1.0;
        shape.n_token = samples.value("n_token", 0);
        std::vector<double> incumbent = samples.value("incumbent_ms", std::vector<double>{});
        std::vector<double> candidate = samples.value("candidate_ms", std::vector<double>{});
        measurement.raw["shapes"][index].erase("incumbent_ms");
        measurement.raw["shapes"][index].erase("candidate_ms");
        ++index;
        // Pairs: sample i of each side was timed next to the other (a failure may end a shape
        // between the two halves of a pair).
        shape.n_sample = int(std::min(incumbent.size(), candidate.size()));
        incumbent.resize(size_t(shape.n_sample));
        candidate.resize(size_t(shape.n_sample));
        if (shape.n_sample == 0) {
            measurement.shapes.push_back(shape);
            continue;
        }
        shape.incumbent_ms = median(incumbent);
        shape.candidate_ms = median(candidate);
        shape.incumbent_iqr_ms = quantile(incumbent, 0.75) - quantile(incumbent, 0.25);
        shape.candidate_iqr_ms = quantile(candidate, 0.75) - quantile(candidate, 0.25);
        shape.speedup = shape.incumbent_ms / shape.candidate_ms;
        shape.speedup_ci = bootstrap_ratio_of_medians(incumbent, candidate, Resample::paired, 0.95, 2000, options.seed);
        std::vector<double> log_ratios;
        for (int i = 0; i < shape.n_sample; ++i) {
            if (incumbent[i] > 0 && candidate[i] > 0) log_ratios.push_back(std::log(incumbent[i] / candidate[i]));
        }
        shape.p_value = signed_rank_p(log_ratios);
        shape.significant = shape.p_value < options.alpha && std::fabs(shape.speedup - 1) >= options.min_effect &&
                            (shape.speedup_ci.low > 1 || shape.speedup_ci.high < 1);
        measurement.weighted_incumbent_ms += shape.weight * shape.incumbent_ms;
        measurement.weighted_candidate_ms += shape.weight * shape.candidate_ms;
        sampled_weights.push_back(shape.weight);
        incumbent_samples.push_back(std::move(incumbent));
        candidate_samples.push_back(std::move(candidate));
        measurement.shapes.push_back(shape);
    }
    if (measurement.weighted_candidate_ms > 0) {
        measurement.speedup = measurement.weighted_incumbent_ms / measurement.weighted_candidate_ms;
        // Bootstrap of the weighted ratio: every shape resampled in the same draw, by blocks of pairs.
        std::mt19937_64 rng(options.seed);
        std::vector<double> ratios;
        for (int r = 0; r < 1000; ++r) {
            double numerator = 0, denominator = 0;
            for (size_t s = 0; s < incumbent_samples.size(); ++s) {
                std::vector<double> x, y;
                for (const size_t pick : resample_pairs(incumbent_samples[s].size(), rng)) {
                    x.push_back(incumbent_samples[s][pick]);
                    y.push_back(candidate_samples[s][pick]);
                }
                const double weight = sampled_weights[s];
                numerator += weight * median(x);
                denominator += weight * median(y);
            }
            ratios.push_back(numerator / denominator);
        }
        measurement.speedup_ci = {quantile(ratios, 0.025), quantile(ratios, 0.975)};
        measurement.significant = std::fabs(measurement.speedup - 1) >= options.min_effect &&
                                  (measurement.speedup_ci.low > 1 || measurement.speedup_ci.high < 1);
    }
    return measurement;
}

json measurement_to_json(const Measurement &measurement) {
    json out = {{"weighted_incumbent_ms", measurement.weighted_incumbent_ms},
                {"weighted_candidate_ms", measurement.weighted_candidate_ms},
                {"speedup", measurement.speedup},
                {"speedup_ci", {measurement.speedup_ci.low, measurement.speedup_ci.high}},
                {"significant", measurement.significant},
                {"shapes", json::array()}};
    for (const ShapeMeasurement &shape : measurement.shapes) {
        out["shapes"].push_back({{"name", shape.name},
                                 {"weight", shape.weight},
                                 {"n_token", shape.n_token},
                                 {"n_sample", shape.n_sample},
                                 {"incumbent_ms", shape.incumbent_ms},
                                 {"candidate_ms", shape.candidate_ms},
                                 {"incumbent_iqr_ms", shape.incumbent_iqr_ms},
                                 {"candidate_iqr_ms", shape.candidate_iqr_ms},
                                 {"speedup", shape.speedup},
                                 {"speedup_ci", {shape.speedup_ci.low, shape.speedup_ci.high}},
                                 {"p_value", shape.p_value},
                                 {"significant", shape.significant}});
    }
    return out;
}

}  // namespace hp::tune
