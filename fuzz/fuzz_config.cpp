// libFuzzer target: parse_config() on arbitrary text. A config it accepts must satisfy the
// invariants the forward pass relies on, and config_to_json() must write it back in a form that
// parse_config() reads identically (config.h promises this). A violation aborts like a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hotpass/model/config.h"

namespace {

void require(bool condition, const char *what, const std::string &detail = {}) {
    if (condition) return;
    std::fprintf(stderr, "contract violated: %s %s\n", what, detail.c_str());
    std::abort();
}

void check_invariants(const hp::model::ModelConfig &c) {
    require(c.n_vocab > 0 && c.d_model > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.d_ff > 0,
            "a size is not positive");
    require(c.n_head % c.n_head_kv == 0, "n_head not a multiple of n_head_kv");
    require(c.d_head > 0 && c.d_head % 2 == 0, "d_head not positive and even");
    require(c.max_position > 0, "max_position not positive");
    require(c.rope_theta > 0.0f, "rope_theta not positive");
    require(c.layer_is_moe.size() == size_t(c.n_layer), "layer_is_moe is not [n_layer]");
    if (c.is_moe()) {
        require(c.n_expert_used > 0 && c.n_expert_used <= c.n_expert, "n_expert_used outside [1, n_expert]");
        require(c.d_ff_expert > 0, "d_ff_expert not positive");
    } else {
        require(c.n_expert_used == 0 && c.d_ff_expert == 0, "expert fields set on a dense model");
        for (bool moe : c.layer_is_moe) require(!moe, "a dense model has an MoE layer");
    }
    require(c.d_ff_shared_expert >= 0, "d_ff_shared_expert negative");
}

bool same_float(float a, float b) { return a == b || (a != a && b != b); }

void check_round_trip(const hp::model::ModelConfig &a) {
    const std::string text = hp::model::config_to_json(a);
    auto back = hp::model::parse_config(text);
    require(back.ok(), "config_to_json() output rejected:", back.ok() ? std::string() : back.error() + "\n" + text);
    const hp::model::ModelConfig &b = *back;
    const bool same =
        a.arch == b.arch && a.n_vocab == b.n_vocab && a.d_model == b.d_model && a.n_layer == b.n_layer &&
        a.n_head == b.n_head && a.n_head_kv == b.n_head_kv && a.d_head == b.d_head && a.d_ff == b.d_ff &&
        same_float(a.norm_eps, b.norm_eps) && a.max_position == b.max_position && same_float(a.rope_theta, b.rope_theta) &&
        a.rope_type == b.rope_type && same_float(a.rope_factor, b.rope_factor) &&
        same_float(a.rope_low_freq_factor, b.rope_low_freq_factor) &&
        same_float(a.rope_high_freq_factor, b.rope_high_freq_factor) &&
        a.rope_original_max_position == b.rope_original_max_position && a.qkv_bias == b.qkv_bias &&
        a.o_bias == b.o_bias && a.mlp_bias == b.mlp_bias && a.qk_norm == b.qk_norm &&
        a.tied_embeddings == b.tied_embeddings && a.n_expert == b.n_expert && a.n_expert_used == b.n_expert_used &&
        a.d_ff_expert == b.d_ff_expert && a.d_ff_shared_expert == b.d_ff_shared_expert &&
        a.norm_topk_prob == b.norm_topk_prob && a.layer_is_moe == b.layer_is_moe && a.dtype == b.dtype &&
        same_float(a.initializer_range, b.initializer_range) && a.bos_token_id == b.bos_token_id &&
        a.eos_token_ids == b.eos_token_ids;
    require(same, "config_to_json() does not read back identically:", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    auto config = hp::model::parse_config(text);
    if (!config.ok()) {
        require(!config.error().empty(), "empty error message");
        return 0;
    }
    check_invariants(*config);
    // Writing back a config of millions of layers spells out an mlp_only_layers list as long;
    // that is slow, not wrong, so the round trip is checked on plausible depths only.
    if (config->n_layer <= 4096) check_round_trip(*config);
    return 0;
}
