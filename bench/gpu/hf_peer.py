#!/usr/bin/env python3
"""The PyTorch peers of bench/gpu: decode tokens/s of llama-3.2-1b's config with random bf16
weights, on the same batch sizes and KV length as hotpass_bench_gpu_decode, measured in the same
call. Writes JSON to --json. Only external peers: hotpass never imports them.

- transformers: a LlamaForCausalLM, eager attention. Each batch: prefill `kv` random tokens per
  sequence (DynamicCache), then time `steps` decode steps of one token per sequence (the cache grows
  from kv to kv + steps), each step timed with a host clock around a full device synchronize.
- torch graph: the same model's weights in a hand-written decode step of plain PyTorch ops (cuBLAS
  for the projections, q/k/v and gate/up each one concatenated matrix, scaled_dot_product_attention
  over a static KV cache of kv + 1 positions, RMSNorm, RoPE and SiLU as torch ops) captured in one
  CUDA graph and replayed, timed with CUDA events (median of `graph_reps` replays): what a plain
  PyTorch engine without custom kernels does. Its logits for the step are checked against the
  transformers model's on the same prefilled cache (max |delta| / max |logit| printed and recorded)."""
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


class GraphStep:
    """One decode step (one token per sequence at position kv) over a static cache, in torch ops."""

    def __init__(self, model, batch, kv):
        inner, c = model.model, model.config
        self.model, self.kv = model, kv
        self.n_head, self.n_kv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.eps = c.rms_norm_eps
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append({
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous(),
                "o": a.o_proj.weight, "gate_up": torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous(),
                "down": m.down_proj.weight,
                "k": torch.zeros(batch, self.n_kv, kv + 1, self.d, dtype=torch.bfloat16, device="cuda"),
                "v": torch.zeros(batch, self.n_kv, kv + 1, self.d, dtype=torch.bfloat16, device="cuda"),
            })
        self.token = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
        self.position = torch.full((batch, 1), kv, dtype=torch.long, device="cuda")
        self.logits = None

    def load_cache(self, cache):
        for i, layer in enumerate(self.layers):
            if hasattr(cache, "layers"):  # transformers >= 4.56
                keys, values = cache.layers[i].keys, cache.layers[i].values
            else:
                keys, values = cache.key_cache[i], cache.value_cache[i]
            layer["k"][:, :, :self.kv].copy_(keys[:, :, :self.kv])
            layer["v"][:, :, :self.kv].copy_(values[:, :, :self.kv])

    def rms(self, x, w):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(torch.bfloat16) * w

    def rotate(self, x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def step(self):
        inner = self.model.model
        h = inner.embed_tokens(self.token)  # [b, 1, hidden]
        cos, sin = inner.rotary_emb(h, self.position)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        b = h.shape[0]
        q_width, kv_width = self.n_head * self.d, self.n_kv * self.d
        for layer in self.layers:
            x = self.rms(h, layer["ln1"])
            qkv = torch.nn.functional.linear(x, layer["qkv"])
            q = qkv[..., :q_width].view(b, 1, self.n_head, self.d).transpose(1, 2)
            k = qkv[..., q_width:q_width + kv_width].view(b, 1, self.n_kv, self.d).transpose(1, 2)
            v = qkv[..., q_width + kv_width:].view(b, 1, self.n_kv, self.d).transpose(1, 2)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            layer["k"][:, :, self.kv:].copy_(k)
            layer["v"][:, :, self.kv:].copy_(v)
            attn = torch.nn.functional.scaled_dot_product_attention(q, layer["k"], layer["v"], enable_gqa=True)
            h = h + torch.nn.functional.linear(attn.transpose(1, 2).reshape(b, 1, q_width), layer["o"])
            x = self.rms(h, layer["ln2"])
            gate, up = torch.nn.functional.linear(x, layer["gate_up"]).chunk(2, dim=-1)
            h = h + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, layer["down"])
        self.logits = self.model.lm_head(inner.norm(h))
        return self.logits


def time_graph(step, reps):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.step()
    for _ in range(5):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return graph, times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--kv", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--graph-reps", type=int, default=50)
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
            # The torch-graph peer on a fresh prefill: its step against the transformers model's.
            ids = torch.randint(0, 128256, (batch, args.kv), device="cuda")
            out = model(input_ids=ids, use_cache=True)
            first = out.logits[:, -1:].argmax(-1)
            graph_step = GraphStep(model, batch, args.kv)
            graph_step.load_cache(out.past_key_values)
            graph_step.token.copy_(first)
            reference = model(input_ids=first, past_key_values=out.past_key_values, use_cache=True).logits[:, -1].float()
            del out
            graph, graph_times = time_graph(graph_step, args.graph_reps)
            graph.replay()  # the same token and cache rows [0, kv) as the reference's step
            torch.cuda.synchronize()
            got = graph_step.logits[:, -1].float()
            graph_delta = ((got - reference).abs().max() / reference.abs().max()).item()
            del graph, graph_step
        times.sort()
        median = statistics.median(times)
        entry = {"batch": batch, "step_ms_median": median, "step_ms_p10": times[int(0.1 * (len(times) - 1))],
                 "step_ms_p90": times[int(0.9 * (len(times) - 1) + 0.5)], "tokens_per_s": batch / (median * 1e-3),
                 "steps": args.steps}
        graph_median = statistics.median(graph_times)
        entry["torch_graph"] = {"step_ms_median": graph_median, "step_ms_p10": graph_times[int(0.1 * (len(graph_times) - 1))],
                                "step_ms_p90": graph_times[int(0.9 * (len(graph_times) - 1) + 0.5)],
                                "tokens_per_s": batch / (graph_median * 1e-3), "replays": args.graph_reps,
                                "max_rel_delta_vs_transformers": graph_delta}
        result["batches"].append(entry)
        print(f"transformers batch {batch:>3}: step {median:.2f} ms = {entry['tokens_per_s']:.0f} tokens/s; "
              f"torch graph {graph_median:.3f} ms = {entry['torch_graph']['tokens_per_s']:.0f} tokens/s "
              f"(logits vs transformers: max |delta| / max |logit| {graph_delta:.2e})", flush=True)
        del cache
        torch.cuda.empty_cache()
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
