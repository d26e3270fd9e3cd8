"""Writes a Hugging Face checkpoint folder of a named shape with seeded random weights, for
benchmarks without downloads: config.json and model.safetensors (BF16 unless --dtype says).

    /usr/bin/python3 tools/make_random_hf.py --shape llama-3.2-1b --out /tmp/llama-1b
    build/bin/attn bench --model /tmp/llama-1b --dtype bf16 --threads 1,2 --batch 1

Weights are uniform in +-1/sqrt(in) (embeddings +-0.1, norms 1), so activations stay finite; the
numbers mean nothing, only their shapes and bytes.
"""
import argparse
import json
import math
from pathlib import Path

import torch

import make_golden as mg

SHAPES = {
    # Llama 3.2 1B: 16 layers of 2048, 32 heads of 64, 8 K/V heads, 8192 feed-forward, tied.
    "llama-3.2-1b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
                     "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                     "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                     "tie_word_embeddings": True, "hidden_act": "silu"},
    # Qwen2.5 0.5B: 24 layers of 896, 14 heads of 64, 2 K/V heads, 4864 feed-forward, q/k/v biases, tied.
    "qwen2.5-0.5b": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
                     "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
                     "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
                     "hidden_act": "silu", "use_sliding_window": False},
}


def tensors(c, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    e, inter, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or e // H
    qkv_bias = c["model_type"] == "qwen2"

    def uniform(shape, bound):
        return ((torch.rand(shape, generator=g) * 2 - 1) * bound).to(dtype)

    t = {"model.embed_tokens.weight": uniform((V, e), 0.1), "model.norm.weight": torch.ones(e, dtype=dtype)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.ones(e, dtype=dtype)
        t[p + "post_attention_layernorm.weight"] = torch.ones(e, dtype=dtype)
        for name, rows, cols in [("self_attn.q_proj", H * hd, e), ("self_attn.k_proj", KV * hd, e),
                                 ("self_attn.v_proj", KV * hd, e), ("self_attn.o_proj", e, H * hd),
                                 ("mlp.gate_proj", inter, e), ("mlp.up_proj", inter, e),
                                 ("mlp.down_proj", e, inter)]:
            t[p + name + ".weight"] = uniform((rows, cols), 1 / math.sqrt(cols))
            if qkv_bias and name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                t[p + name + ".bias"] = uniform(rows, 0.1)
    return t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    c = {**SHAPES[args.shape], "torch_dtype": args.dtype}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    mg.save_safetensors(args.out / "model.safetensors", tensors(c, getattr(torch, args.dtype), args.seed),
                        {"format": "pt"})


if __name__ == "__main__":
    main()
