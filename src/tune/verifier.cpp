#include "hotpass/tune/verifier.h"

#include <fmt/format.h>

#include "hotpass/core/json_text.h"

namespace hp::tune {

namespace {

std::string describe(const nlohmann::json &batch) {
    std::string text = fmt::format("{} sequences, {} tokens, {} prefill chunks", batch.value("n_seq", 0), batch.value("n_token", 0),
                                   batch.value("n_prefill_seq", 0));
    if (batch.contains("stage")) text += fmt::format(" ({})", batch["stage"].get<std::string>());
    if (batch.contains("reference_sample")) {
        const auto &sample = batch["reference_sample"];
        text += fmt::format("; the reference ran {} of its sequences ({} tokens{})", sample.value("n_seq", 0), sample.value("n_token", 0),
                            sample.value("cut", false) ? ", one chunk cut short" : "");
    }
    return text;
}

}  // namespace

Verdict judge_verification(const nlohmann::json &result, const Tolerance &tolerance) try {
    for (const auto &batch : result.value("cases", nlohmann::json::array())) {
        if (batch.contains("error")) return {"infrastructure", batch["error"].get<std::string>()};
        const std::string plugin_error = batch.value("plugin_error", "");
        if (!plugin_error.empty()) return {"plugin_error", fmt::format("forward() failed on a batch of {}: {}", describe(batch), plugin_error)};
        if (!batch.value("inputs_intact", true)) return {"wrote_inputs", fmt::format("it modified the batch description (token ids, positions or block tables) on a batch of {}", describe(batch))};
        if (!batch.value("canary_intact", true)) return {"wrote_outside_outputs", fmt::format("it wrote past the logits buffer on a batch of {}", describe(batch))};
        if (!batch.value("other_kv_intact", true)) return {"wrote_outside_outputs", fmt::format("it wrote into KV-cache blocks of another sequence on a batch of {}", describe(batch))};
        if (const int unwritten = batch.value("unwritten_rows", 0); unwritten > 0) {
            return {"unwritten_output", fmt::format("{} of {} logit rows were left unwritten on a batch of {}", unwritten,
                                                    batch.value("rows", 0), describe(batch))};
        }
        if (const int nan_rows = batch.value("nan_rows", 0); nan_rows > 0) {
            return {"nan_output", fmt::format("{} of {} logit rows hold NaN or inf on a batch of {}", nan_rows, batch.value("rows", 0),
                                              describe(batch))};
        }
        const double delta = batch.value("max_abs_delta", 0.0), ref = batch.value("max_abs_ref", 0.0);
        if (!(delta <= tolerance.logits_rtol * ref)) {
            return {"wrong_output", fmt::format("logits differ from the reference by {:.3g} (allowed {:.3g} = {:g} x max|ref| {:.3g}) on a batch of {}",
                                                delta, tolerance.logits_rtol * ref, tolerance.logits_rtol, ref, describe(batch))};
        }
        if (const int64_t nonfinite = batch.value("kv_nonfinite", int64_t(0)); nonfinite > 0) {
            return {"kv_mismatch", fmt::format("{} of the KV entries it wrote are NaN or inf on a batch of {}", nonfinite, describe(batch))};
        }
        const double kv_delta = batch.value("kv_max_abs_delta", 0.0), kv_ref = batch.value("kv_max_abs_ref", 0.0);
        if (!(kv_delta <= tolerance.kv_rtol * kv_ref)) {
            return {"kv_mismatch", fmt::format("the KV entries it wrote differ from the reference's by {:.3g} (allowed {:.3g}) on a batch of {}",
                                               kv_delta, tolerance.kv_rtol * kv_ref, describe(batch))};
        }
        if (batch.contains("incumbent")) {
            // Rows the reference did not sample: checked against the verified incumbent, each side
            // within the tolerance of the reference, hence twice it between them.
            const auto &incumbent = batch["incumbent"];
            const double d = incumbent.value("max_abs_delta", 0.0), r = incumbent.value("max_abs_ref", 0.0);
            if (!(d <= 2 * tolerance.logits_rtol * r)) {
                return {"wrong_output", fmt::format("logits differ from the verified incumbent's by {:.3g} (allowed {:.3g} = 2 x {:g} x max|incumbent| {:.3g}) on a batch of {}",
                                                    d, 2 * tolerance.logits_rtol * r, tolerance.logits_rtol, r, describe(batch))};
            }
            const double kd = incumbent.value("kv_max_abs_delta", 0.0), kr = incumbent.value("kv_max_abs_ref", 0.0);
            if (!(kd <= 2 * tolerance.kv_rtol * kr)) {
                return {"kv_mismatch", fmt::format("the KV entries it wrote differ from the verified incumbent's by {:.3g} (allowed {:.3g}) on a batch of {}",
                                                   kd, 2 * tolerance.kv_rtol * kr, describe(batch))};
            }
        }
        if (!batch.value("deterministic", true)) return {"nondeterministic", fmt::format("two identical calls gave different logits on a batch of {}", describe(batch))};
    }
    if (result.contains("greedy")) {
        const auto &greedy = result["greedy"];
        if (greedy.contains("error")) return {"infrastructure", greedy["error"].get<std::string>()};
        if (!greedy.value("ok", false)) {
            return {"greedy_divergence",
                    greedy.contains("plugin_error")
                        ? fmt::format("forward() failed during greedy decoding: {}", greedy["plugin_error"].get<std::string>())
                        : fmt::format("greedy decoding diverged at step {} where the tokens are not in each other's top-5 (reference {}, candidate {})",
                                      greedy.value("first_divergence", -1), json_text(greedy["reference"]), json_text(greedy["candidate"]))};
        }
    }
    return {"ok", fmt::format("{} random batches and a {}-step greedy decode match the reference",
                              result.value("cases", nlohmann::json::array()).size(),
                              result.contains("greedy") ? result["greedy"].value("steps", 0) : 0)};
} catch (const nlohmann::json::exception &e) {  // a field of the wrong type: the executor's reply, not the candidate, is at fault
    return {"infrastructure", fmt::format("the executor's verification reply is malformed: {}", e.what())};
}

}  // namespace hp::tune
