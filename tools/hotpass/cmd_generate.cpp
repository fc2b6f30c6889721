// `hotpass generate`: greedy generation through a forward-pass plugin, with prefill/decode speed.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "commands.h"
#include "validators.h"
#include "hotpass/core/json_text.h"
#include "hotpass/core/hash.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/engine/generate.h"

namespace hp::cli {
namespace {

struct GenerateArgs {
    std::string model = "preset:tiny-llama";
    std::string tokens = "1";
    int prompt_len = 0;
    int n_new = 16;
    int batch = 1;
    std::string forward = "baseline";
    std::string device = "cpu";
    int n_layer = 0;
    int n_thread = 1;
    int prefill_chunk = 0;
    int block_tokens = 16;
    std::string kv_dtype = "f32";
    uint64_t seed = 0;
    std::string logits_path;
    bool json_output = false;
    bool ignore_eos = false;
};

Result<std::vector<int32_t>> parse_tokens(const std::string &text) {
    std::vector<int32_t> tokens;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        try {
            size_t used = 0;
            const long value = std::stol(item, &used);
            if (used != item.size() || value < 0 || value > INT32_MAX) throw std::invalid_argument(item);
            tokens.push_back(int32_t(value));
        } catch (const std::exception &) {
            return error("--tokens: '{}' is not a token id (expected e.g. 1,2,3)", item);
        }
    }
    if (tokens.empty()) return error("--tokens: give at least one token id");
    return tokens;
}

std::string logits_json(const std::vector<float> &logits, int n_vocab) {
    std::string out = "[";
    for (size_t row = 0; row * size_t(n_vocab) < logits.size(); ++row) {
        out += row ? ",\n[" : "\n[";
        for (int v = 0; v < n_vocab; ++v) out += fmt::format("{}{:.9g}", v ? "," : "", logits[row * size_t(n_vocab) + size_t(v)]);
        out += "]";
    }
    return out + "\n]\n";
}

int run_generate(const GenerateArgs &args) {
    model::SyntheticOptions synthetic;
    synthetic.seed = args.seed;
    // On CUDA a preset's weights are generated on the device from the seed (no host copy).
    const bool on_cuda = args.device == "cuda";
    auto model = on_cuda && args.model.starts_with("preset:") ? engine::preset_shell(args.model, DType::bf16)
                                                              : model::open_model(args.model, synthetic);
    if (!model.ok()) {
        fmt::print(stderr, "error: {}\n", model.error());
        return 1;
    }
    std::vector<int32_t> prompt;
    if (args.prompt_len > 0) {  // a random prompt, for benchmarks
        for (int i = 0; i < args.prompt_len; ++i) prompt.push_back(int32_t(splitmix64(args.seed * 1000003 + uint64_t(i)) % uint64_t(model->config.n_vocab)));
    } else {
        auto tokens = parse_tokens(args.tokens);
        if (!tokens.ok()) {
            fmt::print(stderr, "error: {}\n", tokens.error());
            return 2;
        }
        prompt = *tokens;
    }
    for (int32_t token : prompt) {
        if (token >= model->config.n_vocab) {
            fmt::print(stderr, "error: token {} is outside the vocabulary of {} tokens\n", token, model->config.n_vocab);
            return 2;
        }
    }
    // Positions past the model's context are outside what it was built for (RoPE scaling included).
    const int64_t n_position = int64_t(prompt.size()) + args.n_new;
    if (model->config.max_position > 0 && n_position > model->config.max_position) {
        fmt::print(stderr, "error: {} prompt + {} new tokens exceed the model's context of {} positions (max_position_embeddings)\n",
                   prompt.size(), args.n_new, model->config.max_position);
        return 2;
    }
    engine::EngineOptions options;
    options.forward = args.forward;
    options.device = on_cuda ? backend::DeviceKind::cuda : backend::DeviceKind::cpu;
    options.synthetic = synthetic;
    options.n_layer = args.n_layer;
    options.n_thread = args.n_thread;
    options.kv.block_tokens = args.block_tokens;
    options.kv.dtype = args.kv_dtype == "bf16" ? DType::bf16 : args.kv_dtype == "f16" ? DType::f16 : DType::f32;
    options.kv.max_tokens = int64_t(args.batch) * (int64_t(prompt.size()) + args.n_new + args.block_tokens);
    auto engine = engine::Engine::create(*model, options);
    if (!engine.ok()) {
        fmt::print(stderr, "error: {}\n", engine.error());
        return 1;
    }
    engine::GenerateOptions generate;
    generate.n_new = args.n_new;
    generate.prefill_chunk = args.prefill_chunk;
    generate.prompt_logits = !args.logits_path.empty();
    generate.stop_at_eos = !args.ignore_eos;
    const std::vector<std::vector<int32_t>> prompts(size_t(args.batch), prompt);
    auto result = engine::generate_greedy(**engine, prompts, generate);
    if (!result.ok()) {
        fmt::print(stderr, "error: {}\n", result.error());
        return 1;
    }
    if (!args.logits_path.empty()) {
        if (Status status = write_file_atomic(args.logits_path, logits_json(result->prompt_logits[0], model->config.n_vocab)); !status.ok()) {
            fmt::print(stderr, "error: {}\n", status.error());
            return 1;
        }
    }
    const double prefill_tps = result->n_prefill_token / std::max(result->prefill_seconds, 1e-12);
    const double decode_tps = result->n_decode_token / std::max(result->decode_seconds, 1e-12);
    if (args.json_output) {
        nlohmann::json out = {{"model", args.model},
                              {"forward", std::string((*engine)->plugin().name())},
                              {"batch", args.batch},
                              {"prompt_tokens", prompt.size()},
                              {"generated", result->generated},
                              {"prefill_tokens", result->n_prefill_token},
                              {"prefill_seconds", result->prefill_seconds},
                              {"prefill_tokens_per_s", prefill_tps},
                              {"decode_tokens", result->n_decode_token},
                              {"decode_steps", result->n_decode_step},
                              {"decode_seconds", result->decode_seconds},
                              {"decode_tokens_per_s", decode_tps}};
        fmt::print("{}\n", json_text(out, 2));
        return 0;
    }
    fmt::print("model    {} ({}, {} layers, {:.1f}M parameters)\n", args.model, model::architecture_hf_name(model->config.arch),
               (*engine)->abi_model().config.n_layer, model->n_param() / 1e6);
    fmt::print("forward  {} ({})\n", (*engine)->plugin().name(), (*engine)->plugin().path().string());
    for (size_t p = 0; p < result->generated.size() && p < 4; ++p) {
        fmt::print("tokens   {}\n", fmt::join(result->generated[p], " "));
    }
    if (result->generated.size() > 4) fmt::print("         ... ({} sequences)\n", result->generated.size());
    fmt::print("prefill  {} tokens in {:.1f} ms: {:.1f} tokens/s\n", result->n_prefill_token, result->prefill_seconds * 1e3, prefill_tps);
    fmt::print("decode   {} tokens in {} steps, {:.1f} ms: {:.1f} tokens/s (batch {})\n", result->n_decode_token,
               result->n_decode_step, result->decode_seconds * 1e3, decode_tps, args.batch);
    return 0;
}

}  // namespace

void add_generate_command(CLI::App &app, int &exit_code) {
    auto args = std::make_shared<GenerateArgs>();
    auto *cmd = app.add_subcommand(
        "generate",
        "Greedy-generate from a model through a forward-pass plugin; prints the tokens and\n"
        "prefill/decode tokens/s.\n"
        "Example: hotpass generate --model preset:tiny-llama --tokens 1,2,3 -n 16");
    cmd->add_option("--model", args->model, "checkpoint folder or preset:NAME")->capture_default_str();
    cmd->add_option("--tokens", args->tokens, "prompt token ids, comma-separated")->capture_default_str();
    cmd->add_option("--prompt-len", args->prompt_len, "use a random prompt of this many tokens instead of --tokens")->check(count(1, "tokens"));
    cmd->add_option("-n,--new-tokens", args->n_new, "tokens to generate")->capture_default_str()->check(count(0, "tokens"));
    cmd->add_option("--batch", args->batch, "sequences decoded together (copies of the prompt)")->capture_default_str()->check(count(1, "sequences"));
    cmd->add_option("--forward", args->forward, "forward pass: baseline (the fast pass), reference (the specification), or a path to a plugin .so")->capture_default_str();
    cmd->add_option("--device", args->device, "where weights, KV cache and the forward pass live (cuda: in-tree names mean forward/cuda/*)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    cmd->add_option("--layers", args->n_layer, "serve only the first N decoder layers (0: all)")->capture_default_str()->check(count(0, "layers"));
    cmd->add_option("--threads", args->n_thread, "CPU threads the forward pass may use")->capture_default_str()->check(count(1, "threads"));
    cmd->add_option("--prefill-chunk", args->prefill_chunk, "max prompt tokens per step (0: whole prompt)")->capture_default_str()->check(count(0, "tokens"));
    cmd->add_option("--block-tokens", args->block_tokens, "tokens per KV-cache block")->capture_default_str()->check(count(1, "tokens"));
    cmd->add_option("--kv-dtype", args->kv_dtype, "KV-cache element type")->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
    cmd->add_option("--seed", args->seed, "weight seed for preset:NAME models, and the random prompt")->capture_default_str();
    cmd->add_option("--logits", args->logits_path, "write the prompt's logits at every position as JSON [[vocab floats]...]");
    cmd->add_flag("--json", args->json_output, "print the result as JSON");
    cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past an end-of-sequence token");
    cmd->callback([args, &exit_code] { exit_code = run_generate(*args); });
}

}  // namespace hp::cli
