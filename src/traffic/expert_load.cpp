// Expert-load accumulation and comparison.
#include "hotpass/traffic/expert_load.h"

#include <algorithm>
#include <cmath>

namespace hp::traffic {

void ExpertLoadCounter::add(const std::vector<std::vector<uint32_t>> &counts) {
    if (tokens_.size() < counts.size()) tokens_.resize(counts.size());
    for (size_t layer = 0; layer < counts.size(); ++layer) {
        std::vector<uint64_t> &tokens = tokens_[layer];
        if (tokens.size() < counts[layer].size()) tokens.resize(counts[layer].size(), 0);
        for (size_t expert = 0; expert < counts[layer].size(); ++expert)
            tokens[expert] += counts[layer][expert];
    }
}

ExpertLoad ExpertLoadCounter::summarize() const {
    ExpertLoad load;
    for (const std::vector<uint64_t> &tokens : tokens_) load.layers.push_back({tokens, 0});
    update_imbalance(load);
    return load;
}

void update_imbalance(ExpertLoad &load) {
    double sum = 0;
    int layers_with_tokens = 0;
    load.max_imbalance = 0;
    for (LayerExpertLoad &layer : load.layers) {
        layer.imbalance = 0;
        if (layer.tokens.empty()) continue;
        double total = 0;
        for (uint64_t tokens : layer.tokens) total += double(tokens);
        if (total == 0) continue;
        const double mean = total / double(layer.tokens.size());
        layer.imbalance =
            double(*std::max_element(layer.tokens.begin(), layer.tokens.end())) / mean;
        sum += layer.imbalance;
        ++layers_with_tokens;
        load.max_imbalance = std::max(load.max_imbalance, layer.imbalance);
    }
    load.mean_imbalance = layers_with_tokens ? sum / layers_with_tokens : 0;
}

double expert_load_distance(const ExpertLoad &a, const ExpertLoad &b) {
    const size_t n_layer = std::min(a.layers.size(), b.layers.size());
    double sum = 0;
    int compared = 0;
    for (size_t layer = 0; layer < n_layer; ++layer) {
        const std::vector<uint64_t> &x = a.layers[layer].tokens, &y = b.layers[layer].tokens;
        double total_x = 0, total_y = 0;
        for (uint64_t v : x) total_x += double(v);
        for (uint64_t v : y) total_y += double(v);
        if (total_x == 0 || total_y == 0) continue;
        double distance = 0;
        for (size_t e = 0; e < std::max(x.size(), y.size()); ++e) {
            const double share_x = e < x.size() ? double(x[e]) / total_x : 0;
            const double share_y = e < y.size() ? double(y[e]) / total_y : 0;
            distance += std::abs(share_x - share_y);
        }
        sum += distance / 2;
        ++compared;
    }
    return compared ? sum / compared : 0;
}

}  // namespace hp::traffic
