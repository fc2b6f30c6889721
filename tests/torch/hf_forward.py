#!/usr/bin/env python3
"""Independent float32 reference forward pass for decoder-only causal LMs.

This is a test oracle for hotpass.  It reads a checkpoint folder in Hugging Face
format (config.json + *.safetensors) and computes the logits of a prompt with
plain PyTorch, following the published Hugging Face transformers modelling code
for:

    LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
    MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM

It is written from HF's modelling code (modeling_llama.py, modeling_qwen2.py,
modeling_qwen3.py, modeling_mixtral.py, modeling_qwen2_moe.py,
modeling_qwen3_moe.py and modeling_rope_utils.py) and is deliberately
independent of the C++ code: it shares no code, no weight loader and no config
parser with it.  Function names follow HF's (rms_norm, rotate_half,
apply_rotary_pos_emb, repeat_kv, ...) so the two can be read side by side.

Everything is computed in float32 on the CPU under torch.no_grad (torch 1.13
API).  Whatever the checkpoint does that would change the math but is not
implemented here (other architectures, activations, RoPE types, an active
sliding window, quantised weights, ...) is rejected with exit code 2.

Usage:
    python3 hf_forward.py MODEL_DIR --tokens 1,2,3 [--greedy N] [--out FILE]

Output (JSON): {"logits": [[vocab floats] per prompt position],
                "greedy": [N argmax-continuation token ids]}
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


class Unsupported(Exception):
    """The checkpoint asks for something this oracle does not implement (exit 2)."""


# ----------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "MixtralForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
)

# Defaults of the HF config classes for fields a config.json may leave out.
# (rms_norm_eps, rope_theta) per architecture.
ARCH_DEFAULTS = {
    "LlamaForCausalLM": dict(rms_norm_eps=1e-6, rope_theta=10000.0),
    "Qwen2ForCausalLM": dict(rms_norm_eps=1e-6, rope_theta=10000.0),
    "Qwen3ForCausalLM": dict(rms_norm_eps=1e-6, rope_theta=10000.0),
    "MixtralForCausalLM": dict(rms_norm_eps=1e-5, rope_theta=1e6),
    "Qwen2MoeForCausalLM": dict(rms_norm_eps=1e-6, rope_theta=10000.0),
    "Qwen3MoeForCausalLM": dict(rms_norm_eps=1e-6, rope_theta=10000.0),
}


class ModelConfig:
    """The subset of config.json that changes the math, normalised across
    transformers 4 and 5 spellings."""

    def __init__(self, raw):
        self.raw = raw
        archs = raw.get("architectures") or []
        if not archs:
            raise Unsupported("config.json has no 'architectures' entry")
        self.arch = archs[0]
        if self.arch not in SUPPORTED_ARCHITECTURES:
            raise Unsupported("architecture %r is not supported (supported: %s)"
                              % (self.arch, ", ".join(SUPPORTED_ARCHITECTURES)))
        defaults = ARCH_DEFAULTS[self.arch]

        if raw.get("quantization_config") is not None:
            raise Unsupported("quantised checkpoints (quantization_config) are not supported")

        # Storage dtype only: the oracle always computes in float32.
        self.dtype = raw.get("dtype", raw.get("torch_dtype"))

        act = raw.get("hidden_act", "silu")
        if act not in ("silu", "swish"):  # ACT2FN["swish"] is SiLU too
            raise Unsupported("hidden_act %r is not supported (only silu)" % act)

        self.vocab_size = int(raw["vocab_size"])
        self.hidden_size = int(raw["hidden_size"])
        self.num_hidden_layers = int(raw["num_hidden_layers"])
        self.num_attention_heads = int(raw["num_attention_heads"])
        kv = raw.get("num_key_value_heads")
        self.num_key_value_heads = int(kv) if kv is not None else self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise Unsupported("num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)"
                              % (self.num_attention_heads, self.num_key_value_heads))

        # head_dim: null -> hidden_size // num_attention_heads.  When the key is
        # absent, Qwen3Config's class default is 128 (all other classes here
        # default to None, i.e. hidden_size // num_attention_heads).
        if "head_dim" in raw:
            hd = raw["head_dim"]
        else:
            hd = 128 if self.arch == "Qwen3ForCausalLM" else None
        self.head_dim = int(hd) if hd is not None else self.hidden_size // self.num_attention_heads

        self.rms_norm_eps = float(raw.get("rms_norm_eps", defaults["rms_norm_eps"]))
        self.intermediate_size = raw.get("intermediate_size")
        self.tie_word_embeddings = bool(raw.get("tie_word_embeddings", False))

        # Biases, per HF attention / MLP classes.
        if self.arch in ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
            b = bool(raw.get("attention_bias", False))
            self.qkv_bias, self.o_bias = b, b
        elif self.arch == "Qwen2ForCausalLM":
            self.qkv_bias, self.o_bias = True, False
        elif self.arch == "Qwen2MoeForCausalLM":
            self.qkv_bias, self.o_bias = bool(raw.get("qkv_bias", True)), False
        else:  # Mixtral
            self.qkv_bias, self.o_bias = False, False
        self.mlp_bias = bool(raw.get("mlp_bias", False)) if self.arch == "LlamaForCausalLM" else False
        self.qk_norm = self.arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")

        self._read_rope(raw, defaults)
        self._read_sliding_window(raw)
        self._read_moe(raw)

    # --- RoPE: v4 rope_theta + rope_scaling, or v5 rope_parameters ----------
    def _read_rope(self, raw, defaults):
        params = raw.get("rope_parameters")
        if params is not None:
            # v5 may nest parameters per layer type; only full attention is used here.
            if "rope_type" not in params and "rope_theta" not in params and \
                    all(isinstance(v, dict) for v in params.values()):
                if set(params) != {"full_attention"}:
                    raise Unsupported("per-layer-type rope_parameters %s are not supported"
                                      % sorted(params))
                params = params["full_attention"]
            params = dict(params)
            self.rope_theta = float(params.get("rope_theta", raw.get("rope_theta", defaults["rope_theta"])))
        else:
            self.rope_theta = float(raw.get("rope_theta", defaults["rope_theta"]))
            params = dict(raw.get("rope_scaling") or {})
        # BC: "rope_type" was originally "type"
        self.rope_type = params.get("rope_type", params.get("type", "default")) or "default"
        if self.rope_type not in ("default", "llama3"):
            raise Unsupported("rope_type %r is not supported (only default and llama3)" % self.rope_type)
        prf = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
        if prf is not None and float(prf) != 1.0:
            raise Unsupported("partial_rotary_factor %r is not supported" % prf)
        self.rope_params = params
        if self.rope_type == "llama3":
            for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                if k not in params:
                    raise Unsupported("llama3 rope parameters lack %r" % k)

    # --- sliding window ------------------------------------------------------
    def _read_sliding_window(self, raw):
        """self.sliding_window = the window if any layer would use one, else None.
        The forward pass refuses sequences long enough for it to matter."""
        window = raw.get("sliding_window")
        layer_types = raw.get("layer_types")
        if layer_types is not None:
            unknown = set(layer_types) - {"full_attention", "sliding_attention"}
            if unknown:
                raise Unsupported("layer_types %s are not supported" % sorted(unknown))
        if self.arch == "LlamaForCausalLM":
            window = None  # Llama attention has no sliding window
        elif self.arch == "MixtralForCausalLM":
            pass  # MixtralAttention uses config.sliding_window whenever it is set
        else:
            # Qwen*: config classes null the window unless use_sliding_window.
            if not raw.get("use_sliding_window", False):
                window = None
            elif layer_types is not None and "sliding_attention" not in layer_types:
                window = None
        self.sliding_window = int(window) if window else None

    # --- mixture of experts --------------------------------------------------
    def _read_moe(self, raw):
        self.num_experts = int(raw.get("num_experts", raw.get("num_local_experts", 0)) or 0)
        self.num_experts_per_tok = int(raw.get("num_experts_per_tok", 0) or 0)
        self.moe_intermediate_size = raw.get("moe_intermediate_size")
        self.shared_expert_intermediate_size = raw.get("shared_expert_intermediate_size")
        self.decoder_sparse_step = int(raw.get("decoder_sparse_step", 1) or 1)
        self.mlp_only_layers = list(raw.get("mlp_only_layers") or [])
        if self.arch == "MixtralForCausalLM":
            self.norm_topk_prob = True  # Mixtral always renormalises the top-k weights
        else:
            self.norm_topk_prob = bool(raw.get("norm_topk_prob", False))
        if self.arch in ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
            if self.arch == "MixtralForCausalLM" and self.num_experts <= 0:
                raise Unsupported("Mixtral config has no num_local_experts")
            if self.num_experts > 0 and not (0 < self.num_experts_per_tok <= self.num_experts):
                raise Unsupported("num_experts_per_tok %d is invalid for %d experts"
                                  % (self.num_experts_per_tok, self.num_experts))

    def layer_is_sparse(self, i):
        """Which decoder layers use the sparse MoE block (HF decoder-layer rule)."""
        if self.arch == "MixtralForCausalLM":
            return True
        if self.arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
            return (i not in self.mlp_only_layers) and self.num_experts > 0 and \
                (i + 1) % self.decoder_sparse_step == 0
        return False


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return ModelConfig(json.load(f))


# ----------------------------------------------------------------------------
# safetensors, read by hand
# ----------------------------------------------------------------------------

def read_safetensors(path):
    """Return {name: float32 torch tensor} for one .safetensors file.

    Layout: u64 little-endian header size N, N bytes of JSON header
    {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": ...},
    then the raw little-endian data; offsets are relative to the data start.
    """
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data_start = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info["dtype"], list(info["shape"])
        begin, end = info["data_offsets"]
        raw = blob[data_start + begin:data_start + end]
        count = int(np.prod(shape)) if shape else 1
        if dtype == "BF16":
            bits = np.frombuffer(raw, dtype="<u2", count=count).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif dtype == "F16":
            arr = np.frombuffer(raw, dtype="<f2", count=count).astype(np.float32)
        elif dtype == "F32":
            arr = np.frombuffer(raw, dtype="<f4", count=count).astype(np.float32)
        else:
            raise Unsupported("tensor %s has dtype %s (only BF16, F16, F32 are supported)" % (name, dtype))
        if len(raw) != count * {"BF16": 2, "F16": 2, "F32": 4}[dtype]:
            raise Unsupported("tensor %s: data size %d does not match shape %s" % (name, len(raw), shape))
        tensors[name] = torch.from_numpy(arr.reshape(shape).copy())
    return tensors


def load_weights(model_dir):
    """All weights of a folder: sharded via model.safetensors.index.json
    (weight_map), else model.safetensors, else every *.safetensors file."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        files = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    if not files:
        raise Unsupported("no .safetensors files in %s" % model_dir)
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(model_dir, name)))
    return weights


class Weights:
    """Name lookup that remembers which tensors were used."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.used = set()

    def has(self, name):
        return name in self.tensors

    def get(self, name, shape=None):
        if name not in self.tensors:
            raise Unsupported("checkpoint lacks tensor %r" % name)
        t = self.tensors[name]
        if shape is not None and list(t.shape) != list(shape):
            raise Unsupported("tensor %r has shape %s, expected %s" % (name, list(t.shape), list(shape)))
        self.used.add(name)
        return t

    def get_optional(self, name, wanted, shape=None):
        """A tensor the config says is there (bias flags)."""
        return self.get(name, shape) if wanted else None

    def unused(self):
        return sorted(set(self.tensors) - self.used)


# ----------------------------------------------------------------------------
# Building blocks (named like HF's)
# ----------------------------------------------------------------------------

def linear(x, weight, bias=None):
    return F.linear(x, weight, bias)


def rms_norm(hidden_states, weight, eps):
    """LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w (all float32)."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states


def compute_default_rope_parameters(config):
    """modeling_rope_utils._compute_default_rope_parameters -> (inv_freq, attention_factor)."""
    base = config.rope_theta
    dim = config.head_dim  # partial_rotary_factor == 1 (checked)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    return inv_freq, 1.0


def compute_llama3_parameters(config):
    """modeling_rope_utils._compute_llama3_parameters: smooth per-frequency scaling."""
    inv_freq, attention_factor = compute_default_rope_parameters(config)
    p = config.rope_params
    factor = p["factor"]
    low_freq_factor = p["low_freq_factor"]
    high_freq_factor = p["high_freq_factor"]
    old_context_len = p["original_max_position_embeddings"]

    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor

    wavelen = 2 * math.pi / inv_freq
    # wavelen < high_freq_wavelen: do nothing
    # wavelen > low_freq_wavelen: divide by factor
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # otherwise: interpolate between the two, using a smooth factor
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama, attention_factor


ROPE_INIT_FUNCTIONS = {
    "default": compute_default_rope_parameters,
    "llama3": compute_llama3_parameters,
}


def rotary_embedding(config, position_ids):
    """LlamaRotaryEmbedding.forward: cos, sin of shape [seq, head_dim], float32."""
    inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS[config.rope_type](config)
    # HF: (inv_freq[:, None] @ position_ids[None, :]).T, a product per element
    freqs = position_ids.float()[:, None] * inv_freq.float()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def rotate_half(x):
    """Rotates half the hidden dims of the input (NeoX style: pairs i and i + d/2)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0):
    """q, k: [heads, seq, head_dim]; cos, sin: [seq, head_dim]."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    """[kv_heads, seq, d] -> [kv_heads * n_rep, seq, d]; query head h uses kv head h // n_rep."""
    if n_rep == 1:
        return hidden_states
    kv_heads, slen, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, None, :, :].expand(kv_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(kv_heads * n_rep, slen, head_dim)


def attention(config, w, prefix, hidden_states, cos, sin):
    """LlamaAttention / Qwen2Attention / Qwen3Attention / MixtralAttention
    (eager path) for one sequence: hidden_states [seq, hidden]."""
    seq = hidden_states.shape[0]
    nh, nkv, hd, hs = config.num_attention_heads, config.num_key_value_heads, config.head_dim, config.hidden_size
    a = prefix + "self_attn."

    q = linear(hidden_states, w.get(a + "q_proj.weight", [nh * hd, hs]),
               w.get_optional(a + "q_proj.bias", config.qkv_bias, [nh * hd]))
    k = linear(hidden_states, w.get(a + "k_proj.weight", [nkv * hd, hs]),
               w.get_optional(a + "k_proj.bias", config.qkv_bias, [nkv * hd]))
    v = linear(hidden_states, w.get(a + "v_proj.weight", [nkv * hd, hs]),
               w.get_optional(a + "v_proj.bias", config.qkv_bias, [nkv * hd]))

    q = q.view(seq, nh, hd)
    k = k.view(seq, nkv, hd)
    v = v.view(seq, nkv, hd)
    if config.qk_norm:
        # Qwen3: per-head RMSNorm over head_dim, before RoPE
        q = rms_norm(q, w.get(a + "q_norm.weight", [hd]), config.rms_norm_eps)
        k = rms_norm(k, w.get(a + "k_norm.weight", [hd]), config.rms_norm_eps)
    q = q.transpose(0, 1)  # [heads, seq, hd]
    k = k.transpose(0, 1)
    v = v.transpose(0, 1)

    q, k = apply_rotary_pos_emb(q, k, cos, sin)

    n_rep = nh // nkv
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)

    scaling = hd ** -0.5
    attn_weights = torch.matmul(q, k.transpose(1, 2)) * scaling  # [heads, seq, seq]
    causal_mask = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
    attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
    attn_output = torch.matmul(attn_weights, v)  # [heads, seq, hd]
    attn_output = attn_output.transpose(0, 1).reshape(seq, nh * hd)

    return linear(attn_output, w.get(a + "o_proj.weight", [hs, nh * hd]),
                  w.get_optional(a + "o_proj.bias", config.o_bias, [hs]))


def mlp(x, gate_w, up_w, down_w, gate_b=None, up_b=None, down_b=None):
    """LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x))."""
    return linear(F.silu(linear(x, gate_w, gate_b)) * linear(x, up_w, up_b), down_w, down_b)


def dense_mlp(config, w, p, x, intermediate_size):
    """A gate/up/down MLP named p + {gate,up,down}_proj."""
    hs, im = config.hidden_size, int(intermediate_size)
    return mlp(x,
               w.get(p + "gate_proj.weight", [im, hs]),
               w.get(p + "up_proj.weight", [im, hs]),
               w.get(p + "down_proj.weight", [hs, im]),
               w.get_optional(p + "gate_proj.bias", config.mlp_bias, [im]),
               w.get_optional(p + "up_proj.bias", config.mlp_bias, [im]),
               w.get_optional(p + "down_proj.bias", config.mlp_bias, [hs]))


def expert_weights(config, w, moe_prefix, e, im):
    """(gate, up, down) weights of expert e, in the per-expert checkpoint layout
    (Mixtral: experts.{e}.w1/w3/w2; Qwen: experts.{e}.gate_proj/up_proj/down_proj)
    or in the fused transformers-5 layout (experts.gate_up_proj [E, 2I, H],
    experts.down_proj [E, H, I]; gate is the first half of gate_up)."""
    hs = config.hidden_size
    ep = moe_prefix + "experts."
    if config.arch == "MixtralForCausalLM" and w.has(ep + "%d.w1.weight" % e):
        return (w.get(ep + "%d.w1.weight" % e, [im, hs]),
                w.get(ep + "%d.w3.weight" % e, [im, hs]),
                w.get(ep + "%d.w2.weight" % e, [hs, im]))
    if w.has(ep + "%d.gate_proj.weight" % e):
        return (w.get(ep + "%d.gate_proj.weight" % e, [im, hs]),
                w.get(ep + "%d.up_proj.weight" % e, [im, hs]),
                w.get(ep + "%d.down_proj.weight" % e, [hs, im]))
    E = config.num_experts
    gate_up = w.get(ep + "gate_up_proj", [E, 2 * im, hs])[e]
    down = w.get(ep + "down_proj", [E, hs, im])[e]
    return gate_up[:im], gate_up[im:], down


def sparse_moe_block(config, w, moe_prefix, hidden_states, im, shared_expert=False):
    """MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock.

    router_logits = gate(x); softmax in float32; top-k; renormalise the top-k
    weights when norm_topk_prob (always for Mixtral); each expert's output is
    scaled by its routing weight and accumulated expert by expert (index_add_,
    in expert order, as HF does).  Qwen2-MoE adds sigmoid(shared_expert_gate(x))
    * shared_expert(x).
    """
    hs, E, top_k = config.hidden_size, config.num_experts, config.num_experts_per_tok
    router_logits = linear(hidden_states, w.get(moe_prefix + "gate.weight", [E, hs]))
    routing_weights = F.softmax(router_logits, dim=-1, dtype=torch.float32)
    routing_weights, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    if config.norm_topk_prob:
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)

    final_hidden_states = torch.zeros_like(hidden_states)
    for e in range(E):
        gate_w, up_w, down_w = expert_weights(config, w, moe_prefix, e, im)
        token_idx, top_k_pos = torch.where(selected_experts == e)
        if token_idx.numel() == 0:
            continue
        current_state = hidden_states[token_idx]
        current_hidden_states = mlp(current_state, gate_w, up_w, down_w) * \
            routing_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current_hidden_states)

    if shared_expert:
        shared = dense_mlp(config, w, moe_prefix + "shared_expert.", hidden_states,
                           config.shared_expert_intermediate_size)
        shared_gate = linear(hidden_states, w.get(moe_prefix + "shared_expert_gate.weight", [1, hs]))
        final_hidden_states = final_hidden_states + torch.sigmoid(shared_gate) * shared
    return final_hidden_states


def feed_forward(config, w, i, prefix, x):
    """The MLP half of decoder layer i."""
    if config.layer_is_sparse(i):
        if config.arch == "MixtralForCausalLM":
            moe_prefix = prefix + ("block_sparse_moe." if w.has(prefix + "block_sparse_moe.gate.weight")
                                   else "mlp.")
            return sparse_moe_block(config, w, moe_prefix, x, config.intermediate_size)
        return sparse_moe_block(config, w, prefix + "mlp.", x, config.moe_intermediate_size,
                                shared_expert=(config.arch == "Qwen2MoeForCausalLM"))
    return dense_mlp(config, w, prefix + "mlp.", x, config.intermediate_size)


def decoder_layer(config, w, i, hidden_states, cos, sin):
    """Pre-norm decoder layer: x + attn(norm(x)), then h + mlp(norm(h))."""
    prefix = "model.layers.%d." % i
    hs = config.hidden_size
    residual = hidden_states
    hidden_states = rms_norm(hidden_states, w.get(prefix + "input_layernorm.weight", [hs]), config.rms_norm_eps)
    hidden_states = residual + attention(config, w, prefix, hidden_states, cos, sin)
    residual = hidden_states
    hidden_states = rms_norm(hidden_states, w.get(prefix + "post_attention_layernorm.weight", [hs]),
                             config.rms_norm_eps)
    return residual + feed_forward(config, w, i, prefix, hidden_states)


# ----------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------

class CausalLM:
    def __init__(self, model_dir):
        self.config = load_config(model_dir)
        self.w = Weights(load_weights(model_dir))
        c, w = self.config, self.w
        self.embed_tokens = w.get("model.embed_tokens.weight", [c.vocab_size, c.hidden_size])
        if c.tie_word_embeddings:
            # HF ties lm_head to embed_tokens; a stored lm_head.weight is then ignored.
            if w.has("lm_head.weight"):
                w.used.add("lm_head.weight")
                if not torch.equal(w.tensors["lm_head.weight"], self.embed_tokens):
                    print("warning: tie_word_embeddings is true but lm_head.weight differs from "
                          "embed_tokens; using embed_tokens as HF does", file=sys.stderr)
            self.lm_head = self.embed_tokens
        else:
            if not w.has("lm_head.weight"):
                raise Unsupported("checkpoint lacks lm_head.weight and tie_word_embeddings is false")
            self.lm_head = w.get("lm_head.weight", [c.vocab_size, c.hidden_size])
        # Touch every layer once so that missing tensors are reported up front.
        self.forward([0])
        unused = [n for n in w.unused() if not n.endswith("rotary_emb.inv_freq")]
        if unused:
            print("warning: %d checkpoint tensors are not used (HF would ignore them too): %s%s"
                  % (len(unused), ", ".join(unused[:8]), " ..." if len(unused) > 8 else ""),
                  file=sys.stderr)

    @torch.no_grad()
    def forward(self, tokens):
        """Logits [len(tokens), vocab] for one sequence at positions 0..n-1."""
        c = self.config
        seq = len(tokens)
        if seq == 0:
            raise ValueError("empty token list")
        if c.sliding_window is not None and seq >= c.sliding_window:
            raise Unsupported("sequence length %d reaches the sliding window (%d); "
                              "sliding-window attention is not implemented" % (seq, c.sliding_window))
        ids = torch.tensor(tokens, dtype=torch.long)
        if int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size:
            raise ValueError("token id out of range [0, %d)" % c.vocab_size)
        hidden_states = self.embed_tokens[ids]
        cos, sin = rotary_embedding(c, torch.arange(seq))
        for i in range(c.num_hidden_layers):
            hidden_states = decoder_layer(c, self.w, i, hidden_states, cos, sin)
        hidden_states = rms_norm(hidden_states, self.w.get("model.norm.weight", [c.hidden_size]), c.rms_norm_eps)
        return linear(hidden_states, self.lm_head)

    @torch.no_grad()
    def greedy(self, tokens, n):
        """Argmax continuation of n tokens (full recompute per step)."""
        seq = list(tokens)
        out = []
        for _ in range(n):
            next_id = int(torch.argmax(self.forward(seq)[-1]))
            out.append(next_id)
            seq.append(next_id)
        return out


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------

def _float_list(values):
    # %.9g round-trips float32 exactly and keeps the JSON compact.
    return "[" + ",".join(("%.9g" % v) if math.isfinite(v) else json.dumps(v) for v in values) + "]"


def to_json(logits, greedy):
    rows = ",\n".join(_float_list(row) for row in logits.tolist())
    return '{"logits": [\n%s\n],\n"greedy": %s}\n' % (rows, json.dumps(greedy))


def parse_tokens(text):
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise SystemExit("error: --tokens must be a comma-separated list of integers")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Float32 reference forward pass (HF modelling code) "
                                             "for a Hugging Face checkpoint folder.")
    ap.add_argument("model_dir", help="folder with config.json and *.safetensors")
    ap.add_argument("--tokens", required=True, help="prompt token ids, e.g. 1,2,3")
    ap.add_argument("--greedy", type=int, default=0, metavar="N", help="also emit N greedy tokens")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    args = ap.parse_args(argv)

    tokens = parse_tokens(args.tokens)
    if not tokens:
        raise SystemExit("error: --tokens is empty")
    torch.set_grad_enabled(False)
    try:
        model = CausalLM(args.model_dir)
        logits = model.forward(tokens)
        greedy = model.greedy(tokens, args.greedy)
    except Unsupported as e:
        print("hf_forward: unsupported: %s" % e, file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print("hf_forward: error: %s" % e, file=sys.stderr)
        return 1
    text = to_json(logits, greedy)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
