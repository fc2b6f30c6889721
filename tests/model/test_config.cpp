#include "hotpass/model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace hp::model {
namespace {

using nlohmann::json;

json llama_v5() {
    return json::parse(R"({
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
      "vocab_size": 1024, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
      "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 688, "rms_norm_eps": 1e-5,
      "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "eos_token_id": 2,
      "hidden_act": "silu", "tie_word_embeddings": false})");
}

std::string parse_error(const json &config) {
    auto parsed = parse_config(config.dump());
    EXPECT_FALSE(parsed.ok()) << config.dump();
    return parsed.ok() ? "" : parsed.error();
}

TEST(Config, ReadsTheSharedHuggingFaceConfigs) {
    const std::filesystem::path root = HOTPASS_SHARED_DIR "/models/hf";
    auto llama = load_config(root / "llama_gqa");
    ASSERT_TRUE(llama.ok()) << llama.error();
    EXPECT_EQ(llama->arch, Architecture::llama);
    EXPECT_EQ(llama->n_head_kv, 2);
    EXPECT_EQ(llama->d_head, 32);
    EXPECT_FALSE(llama->tied_embeddings);

    auto mixtral = load_config(root / "mixtral");  // transformers-4 spelling, head_dim null
    ASSERT_TRUE(mixtral.ok()) << mixtral.error();
    EXPECT_EQ(mixtral->d_head, 256 / 4);
    EXPECT_EQ(mixtral->n_expert, 4);
    EXPECT_EQ(mixtral->d_ff_expert, 256);
    EXPECT_TRUE(mixtral->norm_topk_prob);
    EXPECT_FLOAT_EQ(mixtral->rope_theta, 1e6f);

    auto qwen = load_config(root / "qwen3_moe");  // num_local_experts alias, eos null
    ASSERT_TRUE(qwen.ok()) << qwen.error();
    EXPECT_EQ(qwen->n_expert, 8);
    EXPECT_EQ(qwen->d_ff_expert, 128);
    EXPECT_TRUE(qwen->qk_norm);
    EXPECT_TRUE(qwen->eos_token_ids.empty());
    EXPECT_EQ(std::count(qwen->layer_is_moe.begin(), qwen->layer_is_moe.end(), true), 3);
}

TEST(Config, TransformersFourAndFiveSpellingsAgree) {
    json v5 = llama_v5();
    v5["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "llama3"}, {"factor", 32.0},
                             {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
    json v4 = v5;
    v4.erase("rope_parameters");
    v4.erase("dtype");
    v4["torch_dtype"] = "bfloat16";
    v4["rope_theta"] = 500000.0;
    v4["rope_scaling"] = {{"type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    v4["eos_token_id"] = {2, 7};
    auto a = parse_config(v5.dump());
    auto b = parse_config(v4.dump());
    ASSERT_TRUE(a.ok()) << a.error();
    ASSERT_TRUE(b.ok()) << b.error();
    EXPECT_EQ(a->rope_type, RopeType::llama3);
    EXPECT_EQ(b->rope_type, RopeType::llama3);
    EXPECT_FLOAT_EQ(a->rope_theta, b->rope_theta);
    EXPECT_FLOAT_EQ(a->rope_factor, b->rope_factor);
    EXPECT_EQ(a->rope_original_max_position, b->rope_original_max_position);
    EXPECT_EQ(b->eos_token_ids, (std::vector<int>{2, 7}));
}

TEST(Config, ArchitectureSpecificBiasesAndNorms) {
    json qwen2 = llama_v5();
    qwen2["architectures"] = {"Qwen2ForCausalLM"};
    auto parsed = parse_config(qwen2.dump());
    ASSERT_TRUE(parsed.ok());
    EXPECT_TRUE(parsed->qkv_bias);
    EXPECT_FALSE(parsed->o_bias);

    json llama = llama_v5();
    llama["attention_bias"] = true;
    llama["mlp_bias"] = true;
    parsed = parse_config(llama.dump());
    ASSERT_TRUE(parsed.ok());
    EXPECT_TRUE(parsed->qkv_bias && parsed->o_bias && parsed->mlp_bias);

    json qwen3 = llama_v5();
    qwen3["architectures"] = {"Qwen3ForCausalLM"};
    qwen3.erase("head_dim");  // Qwen3Config's default head_dim is 128
    parsed = parse_config(qwen3.dump());
    ASSERT_TRUE(parsed.ok());
    EXPECT_TRUE(parsed->qk_norm);
    EXPECT_EQ(parsed->d_head, 128);
}

TEST(Config, Qwen2MoeLayersFollowSparseStepAndMlpOnlyLayers) {
    json config = llama_v5();
    config["architectures"] = {"Qwen2MoeForCausalLM"};
    config["num_hidden_layers"] = 6;
    config["num_experts"] = 8;
    config["num_experts_per_tok"] = 2;
    config["moe_intermediate_size"] = 64;
    config["shared_expert_intermediate_size"] = 128;
    config["decoder_sparse_step"] = 2;
    config["mlp_only_layers"] = {3};
    auto parsed = parse_config(config.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->layer_is_moe, (std::vector<bool>{false, true, false, false, false, true}));
    EXPECT_FALSE(parsed->norm_topk_prob);  // Qwen2-MoE's default
    EXPECT_EQ(parsed->d_ff_shared_expert, 128);
    EXPECT_TRUE(parsed->qkv_bias);
}

TEST(Config, UnsupportedMathIsAnErrorNamingTheField) {
    json config = llama_v5();
    config["architectures"] = {"GPT2LMHeadModel"};
    EXPECT_NE(parse_error(config).find("unsupported architecture 'GPT2LMHeadModel'"), std::string::npos);

    config = llama_v5();
    config["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "yarn"}, {"factor", 4.0}};
    EXPECT_NE(parse_error(config).find("rope_type 'yarn' is not supported"), std::string::npos);

    config = llama_v5();
    config.erase("rope_parameters");
    config["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
    EXPECT_NE(parse_error(config).find("rope_scaling.rope_type 'dynamic'"), std::string::npos);

    config = llama_v5();
    config["architectures"] = {"MixtralForCausalLM"};
    config["num_local_experts"] = 4;
    config["num_experts_per_tok"] = 2;
    config["sliding_window"] = 4096;
    EXPECT_NE(parse_error(config).find("sliding_window = 4096"), std::string::npos);

    config = llama_v5();
    config["architectures"] = {"Qwen2ForCausalLM"};
    config["use_sliding_window"] = true;
    config["sliding_window"] = 4096;
    EXPECT_NE(parse_error(config).find("use_sliding_window"), std::string::npos);
    config["use_sliding_window"] = false;  // inactive: fine
    EXPECT_TRUE(parse_config(config.dump()).ok());

    config = llama_v5();
    config["hidden_act"] = "gelu";
    EXPECT_NE(parse_error(config).find("hidden_act \"gelu\""), std::string::npos);

    config = llama_v5();
    config.erase("hidden_size");
    EXPECT_NE(parse_error(config).find("'hidden_size' is missing"), std::string::npos);

    config = llama_v5();
    config["num_key_value_heads"] = 3;
    EXPECT_NE(parse_error(config).find("not a multiple of num_key_value_heads"), std::string::npos);

    EXPECT_NE(parse_config("{not json").error().find("not valid JSON"), std::string::npos);
}

// Inputs the fuzzer's invariant checks found (tools/fuzz.sh): each was accepted and came back
// different from config_to_json, or overflowed.
TEST(Config, OutOfRangeNumbersAreErrors) {
    json config = llama_v5();
    config["rope_parameters"]["rope_theta"] = 1e39;
    EXPECT_NE(parse_error(config).find("out of range"), std::string::npos);
    config = llama_v5();
    config["intermediate_size"] = 2147483648LL;
    EXPECT_NE(parse_error(config).find("out of range"), std::string::npos);
    config = llama_v5();
    config["bos_token_id"] = -5;
    EXPECT_NE(parse_error(config).find("bos_token_id"), std::string::npos);
    config = llama_v5();
    config["eos_token_id"] = 4294967297LL;
    EXPECT_NE(parse_error(config).find("eos_token_id"), std::string::npos);
    config = llama_v5();
    config["architectures"] = {"Qwen3MoeForCausalLM"};
    config["num_experts"] = 4;
    config["num_experts_per_tok"] = 2;
    config["moe_intermediate_size"] = 32;
    config["mlp_only_layers"] = {4294967296LL};
    EXPECT_NE(parse_error(config).find("mlp_only_layers"), std::string::npos);
}

// Bounded errors and limits: a value nested 100k deep is named by its shape (dumping it whole
// overflowed the stack), a layer or expert count far past any model is refused before any list
// is built from it.
TEST(Config, HostileValuesGiveBoundedErrors) {
    json config = llama_v5();
    config["hidden_act"] = "DEEP";  // replaced in the text: dumping the deep value here would overflow the stack too
    std::string text = config.dump();
    text.replace(text.find("\"DEEP\""), 6, std::string(100000, '[') + std::string(100000, ']'));
    const auto parsed = parse_config(text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().find("hidden_act"), std::string::npos) << parsed.error().substr(0, 200);
    EXPECT_LT(parsed.error().size(), 300u);
    config = llama_v5();
    config["hidden_act"] = std::string(100000, 'x');
    EXPECT_LT(parse_error(config).size(), 300u);
    config = llama_v5();
    config["num_hidden_layers"] = 2000000000;
    EXPECT_NE(parse_error(config).find("num_hidden_layers"), std::string::npos);
    config = llama_v5();
    config["architectures"] = {"Qwen3MoeForCausalLM"};
    config["num_experts"] = 1 << 30;
    config["num_experts_per_tok"] = 2;
    config["moe_intermediate_size"] = 32;
    EXPECT_NE(parse_error(config).find("num_experts"), std::string::npos);
}

// Fields a Mixtral config leaves out take MixtralConfig's defaults, not Llama's.
TEST(Config, MixtralDefaultsAreMixtralConfigs) {
    json config = llama_v5();
    config["architectures"] = {"MixtralForCausalLM"};
    config["model_type"] = "mixtral";
    config["num_local_experts"] = 4;
    config["num_experts_per_tok"] = 2;
    config.erase("rope_parameters");
    config.erase("rms_norm_eps");
    auto parsed = parse_config(config.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->rope_theta, 1e6f);
    EXPECT_EQ(parsed->norm_eps, 1e-5f);
    config["architectures"] = {"LlamaForCausalLM"};
    config["model_type"] = "llama";
    config.erase("num_local_experts");
    config.erase("num_experts_per_tok");
    parsed = parse_config(config.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->rope_theta, 10000.0f);
    EXPECT_EQ(parsed->norm_eps, 1e-6f);
}

TEST(Config, MissingConfigJsonIsAClearError) {
    auto parsed = load_config(std::filesystem::temp_directory_path() / "hotpass-no-such-dir");
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().find("no config.json"), std::string::npos);
}

TEST(Config, WrittenConfigReadsBackIdentically) {
    for (const char *text : {R"({"architectures":["Qwen2MoeForCausalLM"],"vocab_size":64,"hidden_size":32,
            "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":48,
            "num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":16,"shared_expert_intermediate_size":24,
            "mlp_only_layers":[1],"eos_token_id":[3,4]})",
                             R"({"architectures":["MixtralForCausalLM"],"vocab_size":64,"hidden_size":32,
            "num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":48,"num_local_experts":4,
            "num_experts_per_tok":2,"torch_dtype":"float16","rope_theta":1e6})"}) {
        auto first = parse_config(text);
        ASSERT_TRUE(first.ok()) << first.error();
        auto second = parse_config(config_to_json(*first));
        ASSERT_TRUE(second.ok()) << second.error();
        EXPECT_EQ(config_to_json(*first), config_to_json(*second));
        EXPECT_EQ(first->layer_is_moe, second->layer_is_moe);
        EXPECT_EQ(first->dtype, second->dtype);
        EXPECT_EQ(first->eos_token_ids, second->eos_token_ids);
    }
}

}  // namespace
}  // namespace hp::model
