// MoE expert load: tokens routed to each expert of each layer, summed over a window, and its
// imbalance (max / mean over the experts of a layer), which bounds expert-parallel efficiency.
#pragma once

#include <cstdint>
#include <vector>

namespace hp::traffic {

struct LayerExpertLoad {
    std::vector<uint64_t> tokens;  // [n_expert] tokens routed to each expert
    double imbalance = 0;          // max / mean of tokens; 1 = perfectly even; 0 = no tokens
};

struct ExpertLoad {
    std::vector<LayerExpertLoad> layers;  // [n_layer]; empty: no engine supplied routing counts
    double mean_imbalance = 0;            // mean over layers with tokens
    double max_imbalance = 0;
};

class ExpertLoadCounter {
  public:
    // counts: [n_layer][n_expert]; layers and experts may grow between calls.
    void add(const std::vector<std::vector<uint32_t>> &counts);
    ExpertLoad summarize() const;
    bool empty() const { return tokens_.empty(); }

  private:
    std::vector<std::vector<uint64_t>> tokens_;
};

// Recomputes imbalance figures from the per-expert tokens (after loading from JSON).
void update_imbalance(ExpertLoad &load);

// Mean over common layers of the total-variation distance between the two layers' expert shares
// (0 = same routing mix, 1 = disjoint). 0 when either side has no data.
double expert_load_distance(const ExpertLoad &a, const ExpertLoad &b);

}  // namespace hp::traffic
