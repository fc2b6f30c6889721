#!/usr/bin/env python3
"""The Hugging Face transformers peer of bench/gpu: decode tokens/s of a LlamaForCausalLM with
llama-3.2-1b's config and random bf16 weights, eager attention, on the same batch sizes and KV
length as hotpass_bench_gpu_decode, measured in the same call. Writes JSON to --json.

Each batch: prefill `kv` random tokens per sequence (DynamicCache), then time `steps` decode
steps of one token per sequence (the cache grows from kv to kv + steps), each step timed with a
host clock around a full device synchronize. Only an external peer: hotpass never imports it."""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def build_model():
    config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
                         max_position_embeddings=131072, tie_word_embeddings=True, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    return model.to(torch.bfloat16).eval()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--kv", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    model = build_model()
    result = {"peer": "transformers", "version": transformers.__version__, "torch": torch.__version__,
              "attn_implementation": model.config._attn_implementation, "kv_length": args.kv, "batches": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        with torch.no_grad():
            ids = torch.randint(0, 128256, (batch, args.kv), device="cuda")
            out = model(input_ids=ids, use_cache=True)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            del out
            times = []
            for step in range(args.steps + 2):
                torch.cuda.synchronize()
                start = time.perf_counter()
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                token = out.logits[:, -1:].argmax(-1)
                torch.cuda.synchronize()
                if step >= 2:
                    times.append((time.perf_counter() - start) * 1e3)
                cache = out.past_key_values
                del out
        times.sort()
        median = statistics.median(times)
        entry = {"batch": batch, "step_ms_median": median, "step_ms_p10": times[int(0.1 * (len(times) - 1))],
                 "step_ms_p90": times[int(0.9 * (len(times) - 1) + 0.5)], "tokens_per_s": batch / (median * 1e-3),
                 "steps": args.steps}
        result["batches"].append(entry)
        print(f"transformers batch {batch:>3}: step {median:.2f} ms = {entry['tokens_per_s']:.0f} tokens/s", flush=True)
        del cache
        torch.cuda.empty_cache()
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
