"""Hugging Face checkpoint folders for tests/golden/lm/ (make_golden.py calls write_hf_cases).

Each case is a folder as the Hub publishes one: config.json, model.safetensors or shards with
model.safetensors.index.json, seeded random weights under Hugging Face's names, and io.safetensors
(the prompts, the logits and greedy tokens of Hugging Face's forward, written here after
transformers' modeling_llama / modeling_mistral / modeling_qwen2: the same math in float32, checked
against itself in float64 and, where the model is one, against the book's Llama reference).
"""
import json
import math
import zlib

import torch

import make_golden as mg

# name: (config.json, options, description). options: b, T, lengths (each row's prompt length),
# store (the checkpoint dtype), shards (files the tensors are split over, in order), tied (no
# lm_head.weight).
HF_CASES = {
    "hf_llama_scaled_shards": (
        {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 48,
         "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64},
         "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False},
        {"b": 3, "T": 13, "lengths": [13, 9, 2], "store": torch.bfloat16, "shards": 2},
        "Llama 3.1-style: vocab 96, hidden 48, 4 heads of head_dim 16 (64 != 48 / 4), 2 K/V heads, "
        "intermediate 80, 2 layers, llama3 rope_scaling, own lm_head, BF16 in 2 shards; prompts of 13, 9, 2"),
    "hf_llama_tied_biases": (
        {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 80, "hidden_size": 32,
         "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
         "max_position_embeddings": 24, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
         "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": True, "mlp_bias": True},
        {"b": 2, "T": 11, "lengths": [11, 5], "store": torch.float16, "tied": True},
        "SmolLM2-style tied Llama: vocab 80, hidden 32, 4 heads, intermediate 64, 2 layers, attention_bias "
        "and mlp_bias, no lm_head.weight, F16 in one file; prompts of 11 and 5"),
    "hf_qwen2": (
        {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 112, "hidden_size": 32,
         "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
         "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
         "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False,
         "sliding_window": 32, "max_window_layers": 2},
        {"b": 2, "T": 12, "lengths": [12, 7], "store": torch.bfloat16, "tied": True},
        "Qwen2.5-style: vocab 112, hidden 32, 4 heads sharing 1 K/V head, q/k/v biases, intermediate 96, "
        "2 layers, tied, BF16; prompts of 12 and 7"),
    "hf_llama_plain": (
        {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
         "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
         "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "hidden_act": "silu"},
        {"b": 2, "T": 9, "lengths": [9, 4]},
        "TinyLlama-style: vocab 64, hidden 32, 2 heads sharing 1 K/V head, intermediate 48, 1 layer, own "
        "lm_head, F32, checked against the book's Llama too; prompts of 9 and 4"),
    "hf_gemma_mqa": (
        {"model_type": "gemma", "architectures": ["GemmaForCausalLM"], "vocab_size": 88, "hidden_size": 48,
         "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
         "head_dim": 32, "max_position_embeddings": 24, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
         "attention_bias": False},
        {"b": 2, "T": 12, "lengths": [12, 8], "store": torch.bfloat16, "tied": True},
        "Gemma 1: vocab 88, hidden 48, 2 heads of head_dim 32 (64 != 48 / 2) sharing 1 K/V head (MQA), GeGLU "
        "intermediate 96, RMSNorm x (1 + w), embeddings x sqrt(48) in bf16, tied, BF16; prompts of 12 and 8"),
    "hf_phi3_fused": (
        {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": 76, "hidden_size": 32,
         "intermediate_size": 56, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 32, "original_max_position_embeddings": 32, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "rope_scaling": None, "sliding_window": 6, "tie_word_embeddings": False,
         "hidden_act": "silu"},
        {"b": 2, "T": 13, "lengths": [13, 9], "store": torch.float16, "fused": True},
        "Phi-3: vocab 76, hidden 32, 4 heads, 2 K/V heads, qkv_proj and gate_up_proj fused as published, "
        "intermediate 56, sliding_window 6, 2 layers, own lm_head, F16; prompts of 13 and 9"),
    "hf_mistral_window": (
        {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": 72, "hidden_size": 32,
         "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 4,
         "tie_word_embeddings": False, "hidden_act": "silu"},
        {"b": 2, "T": 14, "lengths": [14, 10], "store": torch.float32, "shards": 3},
        "Mistral: vocab 72, hidden 32, 4 heads, 2 K/V heads, sliding_window 4 (shorter than every prompt), "
        "2 layers, own lm_head, F32 in 3 shards; prompts of 14 and 10"),
}


def dims(c):
    heads = c["num_attention_heads"]
    return heads, c.get("num_key_value_heads") or heads, c.get("head_dim") or c["hidden_size"] // heads


def hf_rope(c):
    rope = {"theta": c.get("rope_theta", 10000.0)}
    s = c.get("rope_scaling")
    if s:
        rope.update(factor=s["factor"], low_freq_factor=s["low_freq_factor"],
                    high_freq_factor=s["high_freq_factor"],
                    original_context_length=s["original_max_position_embeddings"])
    return rope


def biases(c):
    """Which projections have biases, as Hugging Face builds each model type."""
    qwen2 = c["model_type"] == "qwen2"
    attention = c.get("attention_bias", False)
    return {"qkv": qwen2 or attention, "o": not qwen2 and attention, "mlp": c.get("mlp_bias", False)}


def plain_linear(x, w, b):
    y = x @ w.T
    return y if b is None else y + b


def hf_forward(t, ids, c, dtype, linear=plain_linear):
    """Hugging Face's forward of one prompt ids [T] at `dtype` from named tensors t: logits [T, V].
    RMSNorm as LlamaRMSNorm, RoPE rotate-half with inv_freq in float32 (llama3-scaled when asked) and
    angles in `dtype`'s precision at least float32, GQA by repeat_kv, the causal mask narrowed to
    i - W < j <= i by a sliding window W, SiLU-gated MLP, lm_head or the tied embedding. Every
    linear, the head's too, is linear(x, weight, bias or None)."""
    gemma = c["model_type"] == "gemma"
    store = next(iter(t.values())).dtype
    t = {k: v.to(dtype) for k, v in t.items()}
    H, KV, hd = dims(c)
    eps, T = c.get("rms_norm_eps", 1e-6), ids.shape[0]
    window = c.get("sliding_window") if c["model_type"] in ("mistral", "phi3") else None

    def rms(x, n):  # GemmaRMSNorm scales by 1 + w
        return (1 + t[n] if gemma else t[n]) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def lin(x, n):
        return linear(x, t[n + ".weight"], t.get(n + ".bias"))

    inv_freq = mg.rope_inv_freq(hd, hf_rope(c)).to(dtype)
    angles = torch.arange(T, dtype=dtype)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = torch.cos(angles), torch.sin(angles)

    def rope(x):  # [heads, T, hd]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    hidden = (j > i) | ((i - j >= window) if window else torch.zeros(T, T, dtype=torch.bool))
    x = t["model.embed_tokens.weight"][ids]
    if gemma:  # the normalizer is a tensor of the checkpoint's dtype
        x = x * torch.tensor(c["hidden_size"] ** 0.5, dtype=store).to(dtype)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, p + "input_layernorm.weight")
        q = rope(lin(h, p + "self_attn.q_proj").view(T, H, hd).transpose(0, 1))
        k = rope(lin(h, p + "self_attn.k_proj").view(T, KV, hd).transpose(0, 1)).repeat_interleave(H // KV, 0)
        v = lin(h, p + "self_attn.v_proj").view(T, KV, hd).transpose(0, 1).repeat_interleave(H // KV, 0)
        w = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(hd)).masked_fill(hidden, -torch.inf), -1)
        x = x + lin((w @ v).transpose(0, 1).reshape(T, H * hd), p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm.weight")
        gate = lin(h, p + "mlp.gate_proj")
        act = torch.nn.functional.gelu(gate, approximate="tanh") if gemma else torch.nn.functional.silu(gate)
        m = act * lin(h, p + "mlp.up_proj")
        x = x + lin(m, p + "mlp.down_proj")
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return linear(rms(x, "model.norm.weight"), head, None)


def hf_tensors(c, opts, seed):
    """Seeded weights under Hugging Face's names, rounded to the stored dtype: nn.Linear's
    +-1/sqrt(in) (q and k x2, so attention is not nearly uniform; the head x4), embeddings N(0, 0.4),
    norm weights 1 +- 0.3 (the final one signed when tied), biases +-0.1."""
    g = torch.Generator().manual_seed(seed)
    e, V, I = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    H, KV, hd = dims(c)
    b = biases(c)

    def uniform(shape, bound):
        return (torch.rand(shape, generator=g) * 2 - 1) * bound

    t = {"model.embed_tokens.weight": torch.randn(V, e, generator=g) * 0.4}
    linears = [("self_attn.q_proj", H * hd, e, 2.0, b["qkv"]), ("self_attn.k_proj", KV * hd, e, 2.0, b["qkv"]),
               ("self_attn.v_proj", KV * hd, e, 1.0, b["qkv"]), ("self_attn.o_proj", e, H * hd, 1.0, b["o"]),
               ("mlp.gate_proj", I, e, 1.0, b["mlp"]), ("mlp.up_proj", I, e, 1.0, b["mlp"]),
               ("mlp.down_proj", e, I, 1.0, b["mlp"])]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = 1 + uniform(e, 0.3)
        t[p + "post_attention_layernorm.weight"] = 1 + uniform(e, 0.3)
        for name, rows, cols, scale, bias in linears:
            t[p + name + ".weight"] = uniform((rows, cols), scale / math.sqrt(cols))
            if bias:
                t[p + name + ".bias"] = uniform(rows, 0.1)
    norm = 1 + uniform(e, 0.3)
    if opts.get("tied"):
        norm *= torch.randint(0, 2, (e,), generator=g) * 2 - 1
    else:
        t["lm_head.weight"] = uniform((V, e), 4 / math.sqrt(e))
    t["model.norm.weight"] = norm
    if c["model_type"] == "gemma":  # stored as w, scaling by 1 + w
        t = {k: v - 1 if k.endswith("norm.weight") else v for k, v in t.items()}
    store = opts.get("store", torch.float32)
    return {k: v.to(store) for k, v in sorted(t.items())}


def greedy(t, prompt, c, dtype):
    """LM_NEW_TOKENS greedy tokens after prompt (the whole context recomputed each step) and the
    smallest gap between the best two logits."""
    ids, gap = prompt.clone(), float("inf")
    for _ in range(mg.LM_NEW_TOKENS):
        last = hf_forward(t, ids, c, dtype)[-1]
        top2 = torch.topk(last, 2).values
        gap = min(gap, (top2[0] - top2[1]).item())
        ids = torch.cat([ids, last.argmax().view(1)])
    return ids[prompt.shape[0]:], gap


def book_reference(t, ids, c):
    """The book's Llama reference (make_golden.reference_llama) on the same weights, for the Llama
    models it can express (no biases, head_dim = hidden / heads): float64 logits, else None."""
    H, KV, hd = dims(c)
    if any(biases(c).values()) or hd * H != c["hidden_size"] or c["model_type"] != "llama":
        return None
    names = {"model.embed_tokens.weight": "tok_emb.weight", "model.norm.weight": "final_norm.weight",
             "lm_head.weight": "out_head.weight"}
    parts = {"input_layernorm": "norm1", "post_attention_layernorm": "norm2", "self_attn.q_proj": "att.W_query",
             "self_attn.k_proj": "att.W_key", "self_attn.v_proj": "att.W_value", "self_attn.o_proj": "att.out_proj",
             "mlp.gate_proj": "ff.fc1", "mlp.up_proj": "ff.fc2", "mlp.down_proj": "ff.fc3"}
    state = {}
    for k, v in t.items():
        if k in names:
            state[names[k]] = v
            continue
        layer, rest = k[len("model.layers."):].split(".", 1)
        part, leaf = rest.rsplit(".", 1)
        state[f"trf_blocks.{layer}.{parts[part]}.{leaf}"] = v
    cfg = {"n_layers": c["num_hidden_layers"], "n_heads": H, "n_kv_groups": KV, "rope": hf_rope(c)}
    return mg.reference_llama(state, ids, cfg, eps=c.get("rms_norm_eps", 1e-6))


def hf_io(name, t, c, ids, lengths):
    """Logits [b, T, V] (zeros past each prompt) and greedy tokens [b, N] of the float32 forward,
    checked against float64 and the book's reference; None when ill-conditioned (as lm_io)."""
    b, T = ids.shape
    logits = torch.zeros(b, T, c["vocab_size"])
    tokens = torch.zeros(b, mg.LM_NEW_TOKENS, dtype=torch.int64)
    for r, n in enumerate(lengths):
        prompt = ids[r, :n]
        y, y64 = hf_forward(t, prompt, c, torch.float32), hf_forward(t, prompt, c, torch.float64)
        bound = float(mg.LM_TOLERANCE) * y.abs().max().item()
        assert (y.double() - y64).abs().max().item() <= bound / 10, f"lm/{name}: fp32 vs fp64"
        book = book_reference(t, prompt, c)
        assert book is None or (y.double() - book).abs().max().item() <= bound / 10, f"lm/{name}: book reference"
        out, gap = greedy(t, prompt, c, torch.float32)
        out64, _ = greedy(t, prompt, c, torch.float64)
        if not torch.equal(out, out64) or gap < max(1e-2, 1e-3 * y.abs().max().item()) or len(set(out.tolist())) < 3:
            return None
        logits[r, :n], tokens[r] = y, out
    return logits, tokens


# The cases whose linears all take inputs in whole blocks of 32.
QUANT_CASES = ("hf_qwen2", "hf_llama_tied_biases", "hf_mistral_window")


def quant_io(t, c, prompt):
    """The logits [T, V] of `prompt` through the model quantized as q8_0 and as q4_0 (a prompt in
    one step and token by token alike: the activations are quantized row by row). Every other op
    in float32 on the weights as stored."""
    return {kind: hf_forward(t, prompt, c, torch.float32, mg.quantized_linear(kind)) for kind in mg.QUANT_KINDS}


def fuse_phi3(t):
    """Phi-3's names: q, k, v rows stacked in qkv_proj, gate and up rows in gate_up_proj."""
    fused = {}
    for k, v in t.items():
        if ".self_attn.q_proj." in k:
            p = k.split("self_attn.")[0]
            fused[p + "self_attn.qkv_proj.weight"] = torch.cat(
                [t[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        elif ".mlp.gate_proj." in k:
            p = k.split("mlp.")[0]
            fused[p + "mlp.gate_up_proj.weight"] = torch.cat([t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"]])
        elif not any(f".{n}." in k for n in ("k_proj", "v_proj", "up_proj")):
            fused[k] = v
    return dict(sorted(fused.items()))


def write_shards(d, tensors, shards):
    """tensors split in order over `shards` files with Hugging Face's names and index."""
    names = list(tensors)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        mg.save_safetensors(d / file, part, {"format": "pt"})
        weight_map.update({n: file for n in part})
        total += sum(v.numel() * v.element_size() for v in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def write_hf_cases(out):
    for name, (c, opts, description) in HF_CASES.items():
        b, T, lengths = opts["b"], opts["T"], opts["lengths"]
        assert T + mg.LM_NEW_TOKENS <= c["max_position_embeddings"], name
        for attempt in range(100):
            seed = zlib.crc32(("lm/" + name).encode()) + attempt
            torch.manual_seed(seed)
            ids = torch.randint(0, c["vocab_size"], (b, T))
            for r, n in enumerate(lengths):
                ids[r, n:] = 0
            t = hf_tensors(c, opts, seed)
            io = hf_io(name, t, c, ids, lengths)
            if io is not None:
                break
        else:
            raise AssertionError(f"lm/{name}: no seed gives a well-conditioned case")
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        config = {**c, "torch_dtype": DTYPE_NAMES[opts.get("store", torch.float32)], "bos_token_id": 1,
                  "eos_token_id": 2}
        (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        stored = fuse_phi3(t) if opts.get("fused") else t
        if opts.get("shards"):
            write_shards(d, stored, opts["shards"])
        else:
            mg.save_safetensors(d / "model.safetensors", stored, {"format": "pt"})
        logits, tokens = io
        io_tensors = {"input_ids": ids, "lengths": torch.tensor(lengths, dtype=torch.int64),
                      "logits": logits, "tokens": tokens}
        mg.save_safetensors(d / "io.safetensors", io_tensors,
                            {"tolerance": mg.LM_TOLERANCE, "max_new_tokens": str(mg.LM_NEW_TOKENS),
                             "description": description})
        if name in QUANT_CASES:
            mg.write_quant_io(d, quant_io(t, c, ids[0, :lengths[0]]))
        print(f"lm/{name}: {len(stored)} tensors max|logits|={logits.abs().max().item():.4g} tokens {tokens.tolist()}")
