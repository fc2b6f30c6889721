// `hotpass model init|inspect|presets`: write synthetic checkpoints and describe models.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "hotpass/core/json_text.h"
#include "hotpass/model/model.h"

namespace hp::cli {
namespace {

struct InitArgs {
    std::string preset;
    std::string out;
    uint64_t seed = 0;
    std::string dtype = "bf16";
    float bias_std = 0.0f;
    float norm_std = 0.0f;
    double max_shard_gb = 4.0;
    bool force = false;
};

std::optional<DType> parse_dtype(const std::string &name) {
    if (name == "bf16") return DType::bf16;
    if (name == "f16") return DType::f16;
    if (name == "f32") return DType::f32;
    return std::nullopt;
}

int run_init(const InitArgs &args) {
    auto config = model::preset_config(args.preset);
    if (!config.ok()) {
        fmt::print(stderr, "error: {}\n", config.error());
        return 2;
    }
    const std::filesystem::path out(args.out);
    if (std::filesystem::exists(out) && !std::filesystem::is_empty(out) && !args.force) {
        fmt::print(stderr, "error: {} exists and is not empty (use --force to overwrite)\n", out.string());
        return 2;
    }
    model::SyntheticOptions options;
    options.seed = args.seed;
    options.dtype = *parse_dtype(args.dtype);
    options.bias_std = args.bias_std;
    options.norm_std = args.norm_std;
    options.max_shard_bytes = uint64_t(args.max_shard_gb * 1e9);
    const bool tty = isatty(STDERR_FILENO);
    int last_percent = -1;
    auto progress = [&](uint64_t done, uint64_t total) {
        const int percent = int(100 * done / std::max<uint64_t>(total, 1));
        if (!tty || percent == last_percent) return;
        last_percent = percent;
        fmt::print(stderr, "\rwriting {}: {:3d}% of {:.2f} GB", out.string(), percent, total / 1e9);
    };
    Status status = model::write_checkpoint(*config, options, out, progress);
    if (tty && last_percent >= 0) fmt::print(stderr, "\n");
    if (!status.ok()) {
        fmt::print(stderr, "error: {}\n", status.error());
        return 1;
    }
    fmt::print("wrote {} ({}, {:.1f}M parameters, seed {}) to {}\n", args.preset, model::architecture_hf_name(config->arch),
               model::n_param(*config) / 1e6, args.seed, out.string());
    return 0;
}

std::string human_bytes(double bytes) {
    if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
    if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
    if (bytes >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
    return fmt::format("{:.0f} B", bytes);
}

int run_inspect(const std::string &spec, bool json_output, bool show_tensors) {
    // Presets are described from their config alone, so the largest need no memory or file.
    model::ModelConfig config;
    std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, uint64_t>> rows;  // name, dtype, shape, bytes
    uint64_t bytes_per_token = 0;
    if (spec.starts_with("preset:")) {
        auto preset = model::preset_config(spec.substr(7));
        if (!preset.ok()) {
            fmt::print(stderr, "error: {}\n", preset.error());
            return 2;
        }
        config = *preset;
        for (const auto &tensor : model::expected_tensors(config)) {
            uint64_t n = 2;
            for (int64_t extent : tensor.shape) n *= uint64_t(extent);
            rows.emplace_back(tensor.name, "BF16", tensor.shape, n);
        }
        bytes_per_token = model::bytes_read_per_token(config, DType::bf16);
    } else {
        auto loaded = model::load_model(spec);
        if (!loaded.ok()) {
            fmt::print(stderr, "error: {}\n", loaded.error());
            return 1;
        }
        config = loaded->config;
        for (const auto &tensor : loaded->tensors) {
            rows.emplace_back(tensor.spec.name, std::string(dtype_name(tensor.dtype)), tensor.spec.shape, tensor.n_byte);
        }
        bytes_per_token = model::bytes_read_per_token(*loaded);
    }
    uint64_t n_byte = 0, n_param = 0;
    for (const auto &[name, dtype, shape, bytes] : rows) {
        n_byte += bytes;
        uint64_t n = 1;
        for (int64_t extent : shape) n *= uint64_t(extent);
        n_param += n;
    }
    if (json_output) {
        nlohmann::json out = {{"model", spec},
                              {"architecture", model::architecture_hf_name(config.arch)},
                              {"n_layer", config.n_layer},
                              {"d_model", config.d_model},
                              {"n_head", config.n_head},
                              {"n_head_kv", config.n_head_kv},
                              {"d_head", config.d_head},
                              {"n_vocab", config.n_vocab},
                              {"n_expert", config.n_expert},
                              {"n_expert_used", config.n_expert_used},
                              {"n_param", n_param},
                              {"n_byte", n_byte},
                              {"bytes_read_per_token", bytes_per_token}};
        if (show_tensors) {
            for (const auto &[name, dtype, shape, bytes] : rows) {
                out["tensors"].push_back({{"name", name}, {"dtype", dtype}, {"shape", shape}, {"n_byte", bytes}});
            }
        }
        fmt::print("{}\n", json_text(out, 2));
        return 0;
    }
    fmt::print("model               {}\n", spec);
    fmt::print("architecture        {}\n", model::architecture_hf_name(config.arch));
    fmt::print("layers              {} (d_model {}, heads {}/{} kv, head_dim {}, d_ff {})\n", config.n_layer, config.d_model,
               config.n_head, config.n_head_kv, config.d_head, config.d_ff);
    if (config.is_moe()) {
        fmt::print("experts             {} top-{} (d_ff {}{})\n", config.n_expert, config.n_expert_used, config.d_ff_expert,
                   config.d_ff_shared_expert ? fmt::format(", shared expert {}", config.d_ff_shared_expert) : "");
    }
    fmt::print("vocab               {}{}\n", config.n_vocab, config.tied_embeddings ? " (tied embeddings)" : "");
    fmt::print("parameters          {:.1f}M\n", n_param / 1e6);
    fmt::print("weights             {}\n", human_bytes(double(n_byte)));
    fmt::print("read per token      {} (decode, batch 1: the memory-bandwidth floor)\n", human_bytes(double(bytes_per_token)));
    if (show_tensors) {
        fmt::print("\n{:<60} {:<5} {:>20} {:>12}\n", "tensor", "dtype", "shape", "bytes");
        for (const auto &[name, dtype, shape, bytes] : rows) {
            fmt::print("{:<60} {:<5} {:>20} {:>12}\n", name, dtype, model::shape_string(shape), bytes);
        }
    } else {
        fmt::print("({} tensors; --tensors lists them)\n", rows.size());
    }
    return 0;
}

}  // namespace

void add_model_commands(CLI::App &app, int &exit_code) {
    auto *model_cmd = app.add_subcommand("model", "Create and describe model checkpoints");
    model_cmd->require_subcommand(1);

    auto init_args = std::make_shared<InitArgs>();
    auto *init = model_cmd->add_subcommand(
        "init",
        "Write a synthetic Hugging Face checkpoint folder (config.json + safetensors) from a preset.\n"
        "Weights are N(0, initializer_range) like transformers' init, deterministic for a seed.\n"
        "Example: hotpass model init --preset tiny-llama --out models/tiny-llama");
    init->add_option("--preset", init_args->preset, "preset name (see `hotpass model presets`)")->required();
    init->add_option("--out", init_args->out, "output folder")->required();
    init->add_option("--seed", init_args->seed, "weight seed")->capture_default_str();
    init->add_option("--dtype", init_args->dtype, "weight dtype")->check(CLI::IsMember({"bf16", "f16", "f32"}))->capture_default_str();
    init->add_option("--bias-std", init_args->bias_std, "std of biases (transformers: 0; nonzero exercises bias code)")->capture_default_str();
    init->add_option("--norm-std", init_args->norm_std, "std of norm weights around 1 (transformers: 0)")->capture_default_str();
    init->add_option("--max-shard-gb", init_args->max_shard_gb, "shard files above this size")->capture_default_str();
    init->add_flag("--force", init_args->force, "overwrite a non-empty output folder");
    init->callback([init_args, &exit_code] { exit_code = run_init(*init_args); });

    auto spec = std::make_shared<std::string>();
    auto json_output = std::make_shared<bool>(false);
    auto show_tensors = std::make_shared<bool>(false);
    auto *inspect = model_cmd->add_subcommand(
        "inspect", "Describe a checkpoint folder or preset: architecture, parameters, bytes, bytes read per decoded token.\n"
                   "Example: hotpass model inspect preset:llama-3.2-1b --tensors");
    inspect->add_option("model", *spec, "checkpoint folder or preset:NAME")->required();
    inspect->add_flag("--json", *json_output, "print JSON");
    inspect->add_flag("--tensors", *show_tensors, "list every tensor");
    inspect->callback([=, &exit_code] { exit_code = run_inspect(*spec, *json_output, *show_tensors); });

    auto *presets = model_cmd->add_subcommand("presets", "List the built-in model presets");
    presets->callback([&exit_code] {
        for (const auto &preset : model::preset_list()) {
            auto config = model::preset_config(preset.name);
            fmt::print("{:<16} {:>8.1f}M  {}\n", preset.name, model::n_param(*config) / 1e6, preset.description);
        }
        exit_code = 0;
    });
}

}  // namespace hp::cli
