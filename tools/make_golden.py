#!/usr/bin/python3
"""Generate the PyTorch golden files: the book's attention, blocks and whole language models.

Run with Debian's interpreter (it carries python3-torch and numpy):

    /usr/bin/python3 tools/make_golden.py [--out DIR] [--only mha|bad|graph|lm]

DIR defaults to tests/golden; --only (re)writes one family and leaves the others alone (a
rerun under another torch or CPU may change the low bits of the rest).  Everything is
seeded, so reruns reproduce the files byte for byte.  Each attention case
becomes DIR/mha_<name>.safetensors holding

  * the module's state_dict under PyTorch's names (W_query.weight, W_key.weight,
    W_value.weight, [W_query.bias, W_key.bias, W_value.bias], out_proj.weight,
    out_proj.bias; a few cases also keep the book's persistent F32 "mask" buffer),
  * "input" F32 [b, T, d_in] and "expected" F32 [b, T, d_out] (fp32 eval forward),
    except that the weights_f16/weights_bf16 cases store the weights (and the
    first its input too) as F16/BF16, with "expected" computed in fp32 from the
    same rounded values, so a reader must widen them exactly,
  * __metadata__ (all strings): d_in, d_out, num_heads, context_length,
    qkv_bias ("true"/"false"), tolerance, description.  A result passes when
    max|out - expected| <= tolerance * max(1, max|expected|).

DIR/mha_gqa_<name>.safetensors are the same for the book's Llama 3.2 GroupedQueryAttention
(with out_proj.bias, and qkv_bias where the metadata says so): W_key.weight and W_value.weight
are [num_kv_heads * head_dim, d_in], query head h using K/V head h // (num_heads / num_kv_heads).
Their metadata adds num_kv_heads and, only where used, RoPE in the rotate-half convention
(rope_theta; Llama 3.1's scaling: rope_factor, rope_low_freq_factor, rope_high_freq_factor,
rope_original_context_length), applied to q and k after the projections at positions 0..T-1,
and sliding_window W (query i sees keys i - W < j <= i).  See compute_rope_params for the
float32 tables.

DIR/bad/<name>.safetensors are tiny files the engine must reject; their
metadata adds expect_error="true" and an error_hint naming the defect
(kv_heads_not_dividing: 3 K/V heads for 4 query heads, metadata num_kv_heads 3).

DIR/graph/<name>.safetensors are the graph runner's cases (chapter 4): the
book's LayerNorm, GELU, FeedForward and TransformerBlock, the feed-forward
half of its Llama block (RMSNorm, SwiGLU), and its Llama 3.2 block (llama_block,
llama_stack2: norm1, att (GQA with RoPE, no biases), norm2, ff), in eval mode with
non-trivial norm weights, under their state_dict names ("trf_blocks.{i}."
for a stack run with --layers), plus "input" and "expected" and metadata
num_heads, context_length, n_layers, qkv_bias, tolerance, description, and for
the Llama blocks num_kv_heads, rope_* and sliding_window as above.
graph/block_too_long.safetensors has an input longer than context_length
(expect_error="true").

DIR/lm/<case>/ are whole language models (see LM_CASES), each a directory holding
  * model.safetensors: the weights, under one of three layouts:
      - the book's chapter-4 GPTModel (gpt_book_*): tok_emb.weight [V, e], pos_emb.weight
        [ctx, e], trf_blocks.{i}. + the TransformerBlock names above (att.W_query/W_key/W_value
        .weight [+ .bias with qkv_bias], att.out_proj.weight/.bias, ff.layers.0/.2.weight/.bias,
        norm1/norm2.scale/.shift; gpt_book_1l also keeps the F32 att.mask buffers),
        final_norm.scale/.shift, out_head.weight [V, e]; metadata num_heads, context_length;
      - Hugging Face GPT-2 (hf_gpt2*), the same weights as a book GPTModel with qkv_bias, names
        sorted: wte.weight, wpe.weight, h.{i}.ln_1/ln_2.weight/.bias, h.{i}.attn.c_attn.weight
        [e, 3e] (Conv1D: [in, out], nn.Linear's transpose; q, k, v along out) and .bias [3e],
        h.{i}.attn.c_proj.weight [e, e] / .bias, h.{i}.mlp.c_fc.weight [e, 4e] / .bias,
        h.{i}.mlp.c_proj.weight [4e, e] / .bias, ln_f.weight/.bias, lm_head.weight [V, e];
        hf_gpt2 adds the ignored buffers h.{i}.attn.bias (F32 [1, 1, ctx, ctx] lower-triangular
        ones) and h.{i}.attn.masked_bias (F32 [], -1e4); hf_gpt2_prefixed puts "transformer."
        before every name but lm_head.weight; hf_gpt2_tied has no lm_head.weight (the head is
        wte).  Metadata only {"format": "pt"}: the hyper-parameters are in config.json beside it
        (n_head, n_layer, n_embd, n_positions, n_ctx, vocab_size, layer_norm_epsilon 1e-5,
        model_type "gpt2", activation_function "gelu_new", architectures, tie_word_embeddings);
      - the book's Llama 3.2 Llama3Model (llama_*): tok_emb.weight, trf_blocks.{i}.
        + norm1.weight, att.W_query/W_key/W_value/out_proj.weight (no biases), norm2.weight,
        ff.fc1/fc2/fc3.weight, then final_norm.weight and out_head.weight (left out when tied to
        tok_emb: llama_scaled_tied); metadata num_heads, num_kv_heads, context_length, rope_*
        as above (RoPE at positions 0..T-1), rms_norm_eps;
    stored F32, or F16/BF16 where LM_CASES says so (the logits computed from the rounded values);
  * io.safetensors: input_ids I64 (I32 in gpt_book_1l) [b, T], prompts right-padded with 0;
    lengths I64 [b], each row's prompt length, only where they differ (else all are T);
    logits F32 [b, T, V], the fp32 eval forward of each row over its own prompt (zeros past
    it); tokens I64 [b, N], the book's generate_text_simple (greedy, whole context recomputed,
    lowest id on ties) run N = max_new_tokens steps on each row's own prompt; metadata
    tolerance (pass: max|logits - expected| <= tolerance * max|expected logits|),
    max_new_tokens, description.  Every case is checked against a float64 copy and an
    independent float64 forward; greedy steps keep a clear gap between the best two logits;
  * quant.safetensors (hf_gpt2, hf_gpt2_tied and golden_hf.QUANT_CASES): logits F32 "q8_0"
    and "q4_0" [T, V] of the first prompt with every linear's weights (the tied head's too)
    through llama.cpp's quantize_row_q8_0_ref / q4_0_ref and back, and each linear's input
    row through q8_0, the rest in float32 (quantized_linear).
DIR/lm/bad/<case>/ hold a model.safetensors and an io.safetensors (input_ids only) that the
engine must refuse, io metadata expect_error="true" and error_hint: token_out_of_range (an
id == vocab_size), too_long (a prompt longer than context_length) and unknown_layout
(tensor names of no known model; its model metadata says so too).
"""

import argparse
import copy
import json
import shutil
import struct
import zlib
from pathlib import Path

import torch
from torch import nn

TOLERANCE = "1e-5"  # pass: max|out - expected| <= TOLERANCE * max(1, max|expected|)
DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32"}
INT_OF_SIZE = {8: torch.int64, 4: torch.int32, 2: torch.int16}  # numpy has no bfloat16: write the bits


class MultiHeadAttention(nn.Module):
    """The book's chapter-3 class, verbatim in behaviour and state_dict layout."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class LayerNorm(nn.Module):
    """The book's chapter-4 LayerNorm: learnable scale and shift, biased variance."""

    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    """The book's tanh approximation."""

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) *
                                         (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)


class RMSNorm(nn.Module):
    """Llama's RMSNorm (torch.nn.RMSNorm from torch 2.4): x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(emb_dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class LlamaFeedForward(nn.Module):
    """The book's Llama SwiGLU feed-forward: fc3(silu(fc1(x)) * fc2(x)), no biases."""

    def __init__(self, emb_dim, hidden_dim):
        super().__init__()
        self.fc1 = nn.Linear(emb_dim, hidden_dim, bias=False)
        self.fc2 = nn.Linear(emb_dim, hidden_dim, bias=False)
        self.fc3 = nn.Linear(hidden_dim, emb_dim, bias=False)

    def forward(self, x):
        return self.fc3(nn.functional.silu(self.fc1(x)) * self.fc2(x))


class LlamaFeedForwardHalf(nn.Module):
    """The feed-forward half of the book's Llama block: x + ff(norm2(x))."""

    def __init__(self, emb_dim, hidden_dim):
        super().__init__()
        self.norm2 = RMSNorm(emb_dim)
        self.ff = LlamaFeedForward(emb_dim, hidden_dim)

    def forward(self, x):
        return x + self.ff(self.norm2(x))


def llama3_scale(inv_freq, factor, low_freq_factor, high_freq_factor, original_context_length):
    """Llama 3.1's scaling of the RoPE frequencies, in float32 as Hugging Face's
    _compute_llama3_parameters: long wavelengths (> original / low) divided by factor, short
    ones (< original / high) kept, a linear blend between (both ends inclusive)."""
    low_freq_wavelen = original_context_length / low_freq_factor
    high_freq_wavelen = original_context_length / high_freq_factor
    wavelen = 2 * torch.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_context_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    is_medium = (wavelen <= low_freq_wavelen) & (wavelen >= high_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rope_inv_freq(head_dim, rope):
    """inv_freq [head_dim / 2] in float32: 1 / theta^(arange(0, head_dim, 2) / head_dim), then
    llama3_scale when rope has a factor.  rope: theta [, factor, low_freq_factor,
    high_freq_factor, original_context_length] (the metadata keys less their "rope_")."""
    assert head_dim % 2 == 0, "RoPE needs an even head_dim"
    inv_freq = 1.0 / (rope["theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))
    if "factor" in rope:
        inv_freq = llama3_scale(inv_freq, **{k: v for k, v in rope.items() if k != "theta"})
    return inv_freq


def rope_bands(head_dim, rope):
    """How many frequencies Llama 3.1's scaling divides, blends and keeps, as (low, medium, high)."""
    inv_freq = 1.0 / (rope["theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))
    wavelen = 2 * torch.pi / inv_freq
    low = (wavelen > rope["original_context_length"] / rope["low_freq_factor"]).sum().item()
    high = (wavelen < rope["original_context_length"] / rope["high_freq_factor"]).sum().item()
    return low, head_dim // 2 - low - high, high


def compute_rope_params(head_dim, rope, context_length):
    """The book's compute_rope_params (Llama 3.2): float32 cos and sin [context_length, head_dim]
    of angles = positions (0, 1, ...) outer inv_freq, each frequency twice (rotate-half layout)."""
    angles = torch.arange(context_length).float()[:, None] * rope_inv_freq(head_dim, rope)[None, :]
    angles = torch.cat([angles, angles], dim=1)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    """The book's apply_rope: x [b, heads, T, head_dim] * cos + rotate_half(x) * sin,
    rotate_half(x) = cat(-x[..., hd/2:], x[..., :hd/2]), position t using row t of the tables."""
    head_dim, seq_len = x.shape[-1], x.shape[-2]
    x1, x2 = x[..., :head_dim // 2], x[..., head_dim // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[:seq_len] + rotated * sin[:seq_len]


class GroupedQueryAttention(nn.Module):
    """The book's Llama 3.2 GroupedQueryAttention: num_kv_heads K/V heads, query head h using
    K/V head h // (num_heads // num_kv_heads) (repeat_interleave), RoPE on queries and keys
    after the projections (biases included) and before the scores.  Beyond the book, for our
    cases: qkv_bias, out_bias (our MHA files always carry out_proj.bias), rope=None (none) and
    sliding_window W (query i sees keys i - W < j <= i).  The mask and the cos/sin tables are
    non-persistent buffers, so the state_dict holds only the weights."""

    def __init__(self, d_in, d_out, context_length, num_heads, num_kv_heads, qkv_bias=False, out_bias=False,
                 rope=None, sliding_window=None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert num_heads % num_kv_heads == 0, "num_heads must be divisible by num_kv_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_out // num_heads
        self.group_size = num_heads // num_kv_heads
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=out_bias)
        ones = torch.ones(context_length, context_length, dtype=torch.bool)
        mask = torch.triu(ones, diagonal=1)  # True: masked
        if sliding_window is not None:
            mask |= torch.tril(ones, diagonal=-sliding_window)  # j <= i - W
        self.register_buffer("mask", mask, persistent=False)
        self.rope = rope is not None
        if self.rope:
            cos, sin = compute_rope_params(self.head_dim, rope, context_length)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            keys = apply_rope(keys, self.cos, self.sin)
            queries = apply_rope(queries, self.cos, self.sin)
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


def reference_gqa(state, x, num_heads, num_kv_heads, rope, sliding_window):
    """An independent float64 check of GroupedQueryAttention from its state_dict: one head at a
    time, RoPE as a rotation of each pair (i, i + hd/2), the window as an explicit j > i - W."""
    st = {k: v.double() for k, v in state.items()}
    x = x.double()
    b, T, _ = x.shape
    d_out = st["W_query.weight"].shape[0]
    hd = d_out // num_heads

    def project(name):
        y = x @ st[name + ".weight"].T
        return y + st[name + ".bias"] if name + ".bias" in st else y

    q, k, v = project("W_query"), project("W_key"), project("W_value")
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    visible = (j <= i) & ((j > i - sliding_window) if sliding_window else True)
    if rope:
        angle = torch.arange(T).double()[:, None] * rope_inv_freq(hd, rope).double()[None, :]
        c, s = torch.cos(angle), torch.sin(angle)
    heads = []
    for h in range(num_heads):
        g = h // (num_heads // num_kv_heads)
        qh, kh, vh = q[..., h * hd:(h + 1) * hd], k[..., g * hd:(g + 1) * hd], v[..., g * hd:(g + 1) * hd]
        if rope:
            qh, kh = [torch.cat((t[..., :hd // 2] * c - t[..., hd // 2:] * s,
                                 t[..., hd // 2:] * c + t[..., :hd // 2] * s), dim=-1) for t in (qh, kh)]
        scores = (qh @ kh.transpose(1, 2) / hd ** 0.5).masked_fill(~visible, -torch.inf)
        heads.append(torch.softmax(scores, dim=-1) @ vh)
    y = torch.cat(heads, dim=-1) @ st["out_proj.weight"].T
    return y + st["out_proj.bias"] if "out_proj.bias" in st else y


class LlamaTransformerBlock(nn.Module):
    """The book's Llama 3.2 block: x + att(norm1(x)), then x + ff(norm2(x)); no biases, no dropout."""

    def __init__(self, emb_dim, hidden_dim, context_length, n_heads, n_kv_heads, rope, sliding_window=None):
        super().__init__()
        self.att = GroupedQueryAttention(emb_dim, emb_dim, context_length, n_heads, n_kv_heads,
                                         rope=rope, sliding_window=sliding_window)
        self.ff = LlamaFeedForward(emb_dim, hidden_dim)
        self.norm1 = RMSNorm(emb_dim, eps=1e-5)
        self.norm2 = RMSNorm(emb_dim, eps=1e-5)

    def forward(self, x):
        x = x + self.att(self.norm1(x))
        return x + self.ff(self.norm2(x))


class TransformerBlock(nn.Module):
    """The book's chapter-4 block: x + att(norm1(x)), then x + ff(norm2(x))."""

    def __init__(self, emb_dim, context_length, n_heads, qkv_bias, drop_rate=0.1):
        super().__init__()
        self.att = MultiHeadAttention(emb_dim, emb_dim, context_length, drop_rate, n_heads, qkv_bias)
        self.ff = FeedForward(emb_dim)
        self.norm1 = LayerNorm(emb_dim)
        self.norm2 = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(drop_rate)

    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    """The book's chapter-4 GPTModel: token plus position embeddings, dropout (identity in eval),
    n_layers TransformerBlocks, the final LayerNorm and a bias-free output head."""

    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg["emb_dim"], cfg["context_length"], cfg["n_heads"],
                                                           cfg["qkv_bias"], cfg["drop_rate"])
                                          for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        tok_embeds = self.tok_emb(in_idx)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = tok_embeds + pos_embeds
        x = self.drop_emb(x)
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        return self.out_head(x)


class Llama3Model(nn.Module):
    """The book's Llama 3.2 model ("from GPT to Llama"): token embeddings (no position embeddings:
    RoPE at positions 0..T-1 inside each block's attention), n_layers LlamaTransformerBlocks, the
    final RMSNorm (eps 1e-5) and a bias-free output head, tied to tok_emb where cfg says so."""

    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.trf_blocks = nn.Sequential(*[LlamaTransformerBlock(cfg["emb_dim"], cfg["hidden_dim"],
                                                                cfg["context_length"], cfg["n_heads"],
                                                                cfg["n_kv_groups"], cfg["rope"])
                                          for _ in range(cfg["n_layers"])])
        self.final_norm = RMSNorm(cfg["emb_dim"], eps=1e-5)
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        x = self.tok_emb(in_idx)
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        return self.out_head(x)


def generate_text_simple(model, idx, max_new_tokens, context_size):
    """The book's generate_text_simple (greedy, the whole context recomputed each step), the argmax
    taken over the logits rather than their softmax (the same token, lowest id on ties, without
    softmax rounding making ties).  Returns (idx with the new tokens appended, the smallest gap
    between the best and second-best logit over the steps)."""
    min_gap = float("inf")
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        top2 = torch.topk(logits, 2, dim=-1).values
        min_gap = min(min_gap, (top2[:, 0] - top2[:, 1]).min().item())
        idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx, min_gap


def save_safetensors(path, tensors, metadata):
    """Write name -> tensor (a DTYPES key) contiguously in dict order after a space-padded JSON header."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        size = t.element_size()
        raw = t.detach().contiguous().view(INT_OF_SIZE[size]).numpy().astype(f"<i{size}").tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


BOOK_INPUTS = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                            [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])

# name: (b, T, context_length, d_in, d_out, num_heads, qkv_bias, options, description)
# options: keep_mask (store the book's mask buffer), x_scale (input multiplier),
# scale ({param: factor} applied after init), tie_rows (rows 2k and 2k+1 of the input equal),
# store (the dtype the weights are rounded to and stored as), store_input (the same for the input);
# for GroupedQueryAttention (the gqa_ cases, with out_proj.bias): num_kv_heads, rope (ROPE or
# ROPE_SCALED: theta [, factor, low_freq_factor, high_freq_factor, original_context_length]) and
# sliding_window, written to the metadata as num_kv_heads, rope_<key> and sliding_window.
ROPE = {"theta": 10000}
# Llama 3.1's scaling with original_context_length chosen so that head_dim 16 (64) and 8 (256)
# each have a kept, a blended and a divided band: wavelengths start at 2 pi, so the kept band
# needs original / high_freq_factor > 2 pi.
ROPE_SCALED = {"theta": 500000, "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4}
CASES = {
    "book": (2, 6, 6, 3, 2, 2, False, {"keep_mask": True},
             "book ch.3 example: seed 123, MHA(3, 2, 6, 0.0, num_heads=2), the six-token input twice"),
    "t1": (1, 1, 4, 8, 8, 2, False, {}, "single token (T=1 < context_length)"),
    "t7_hd3_bias": (3, 7, 7, 5, 6, 2, True, {}, "odd T == context_length, head_dim 3, qkv_bias, batch 3"),
    "t13_hd5_mask": (2, 13, 16, 20, 10, 2, False, {"keep_mask": True},
                     "odd T < context_length with the book's 16x16 mask buffer, d_in > d_out, head_dim 5"),
    "hd1": (2, 5, 8, 4, 4, 4, True, {}, "head_dim 1, qkv_bias"),
    "hd24": (1, 9, 12, 16, 48, 2, True, {}, "head_dim 24, d_in < d_out, qkv_bias"),
    "hd80": (1, 11, 11, 32, 80, 1, False, {}, "single head of dim 80, T == context_length"),
    "hd128": (2, 6, 8, 16, 128, 1, True, {}, "single head of dim 128, qkv_bias"),
    "many_heads": (2, 10, 10, 24, 48, 16, True, {}, "16 heads of dim 3, qkv_bias"),
    "peaked": (2, 12, 12, 16, 32, 4, False, {"scale": {"W_query.weight": 40.0}},
               "W_query x40: |scores| up to ~44, most softmax rows nearly one-hot"),
    "huge_logits": (2, 9, 9, 16, 16, 2, True, {"scale": {"W_query.weight": 1e3, "W_key.weight": 1e2}},
                    "W_query x1e3, W_key x1e2: |scores| up to ~1e5, needs a max-subtracted softmax"),
    "ties": (2, 10, 10, 8, 12, 3, False, {"tie_rows": True, "scale": {"W_query.weight": 10.0}},
             "input rows 2k and 2k+1 identical, so logits come in tied pairs; W_query x10"),
    "large_input": (2, 8, 8, 12, 16, 4, True,
                    {"x_scale": 1e3, "scale": {"W_query.weight": 1e-3, "W_key.weight": 1e-3}},
                    "input x1e3 with W_query/W_key x1e-3: ordinary attention, outputs ~1e2..1e3"),
    "moderate": (2, 64, 64, 96, 128, 4, False, {}, "moderately sized: b 2, T 64, d_in 96, d_out 128, 4 heads"),
    "weights_f16": (2, 5, 6, 6, 8, 2, True, {"store": torch.float16, "store_input": True},
                    "weights and input stored as F16 (subnormals included), expected from them in fp32"),
    "weights_bf16": (1, 7, 7, 5, 6, 3, False, {"store": torch.bfloat16},
                     "weights stored as BF16, expected from them in fp32"),
    "gqa_g1": (2, 7, 8, 12, 16, 4, True, {"num_kv_heads": 4},
               "GQA with num_kv_heads == num_heads 4 (group size 1, plain MHA), head_dim 4, qkv_bias"),
    "gqa_g2": (2, 9, 12, 16, 24, 4, False, {"num_kv_heads": 2},
               "GQA: 4 query heads of dim 6 share 2 K/V heads (group size 2)"),
    "gqa_g4": (2, 8, 8, 10, 32, 8, True, {"num_kv_heads": 2},
               "GQA: 8 query heads of dim 4 share 2 K/V heads (group size 4), qkv_bias, T == ctx"),
    "gqa_mqa": (2, 11, 16, 12, 24, 6, False, {"num_kv_heads": 1},
                "MQA: 6 query heads of dim 4 share one K/V head"),
    "gqa_rope": (2, 12, 16, 16, 32, 4, True, {"num_kv_heads": 4, "rope": ROPE},
                 "RoPE theta 10000 (rotate-half) on q and k after the biased projections, 4 heads of dim 8"),
    "gqa_rope_scaled": (2, 20, 24, 16, 32, 2, False,
                        {"num_kv_heads": 2, "rope": {**ROPE_SCALED, "original_context_length": 64}},
                        "RoPE theta 500000 with Llama 3.1 scaling (factor 8, low 1, high 4, original 64), "
                        "head_dim 16: 1 kept, 1 blended, 6 divided frequencies"),
    "gqa_window1": (2, 9, 12, 8, 16, 4, True, {"num_kv_heads": 4, "sliding_window": 1},
                    "sliding window 1: each query sees only its own key"),
    "gqa_window32": (2, 70, 72, 16, 32, 4, False, {"num_kv_heads": 4, "sliding_window": 32},
                     "sliding window 32 with T 70: query i sees keys i-31..i"),
    "gqa_window_wide": (2, 10, 16, 12, 24, 3, True, {"num_kv_heads": 3, "sliding_window": 12},
                        "sliding window 12 wider than T 10: the same as plain causal attention"),
    "gqa_all": (2, 20, 24, 24, 48, 6, True,
                {"num_kv_heads": 2, "rope": {**ROPE_SCALED, "original_context_length": 256},
                 "sliding_window": 5},
                "GQA (6 heads of dim 8, 2 K/V heads), Llama 3.1 RoPE (theta 500000, factor 8, low 1, "
                "high 4, original 256), sliding window 5, qkv_bias"),
}


def metadata(d_in, d_out, num_heads, context_length, qkv_bias, description):
    return {"d_in": str(d_in), "d_out": str(d_out), "num_heads": str(num_heads),
            "context_length": str(context_length), "qkv_bias": str(qkv_bias).lower(),
            "tolerance": TOLERANCE, "description": description}


def gqa_metadata(opts):
    """The GroupedQueryAttention keys in use: num_kv_heads, rope_<key>, sliding_window."""
    meta = {"num_kv_heads": str(opts["num_kv_heads"])} if "num_kv_heads" in opts else {}
    meta.update({"rope_" + key: str(value) for key, value in opts.get("rope", {}).items()})
    if "sliding_window" in opts:
        meta["sliding_window"] = str(opts["sliding_window"])
    return meta


def check_gqa(name, module, x, y, heads, opts):
    """GroupedQueryAttention against reference_gqa, and Llama 3.1 scaling with all three bands."""
    rope, window = opts.get("rope"), opts.get("sliding_window")
    if rope and "factor" in rope:
        assert all(rope_bands(module.head_dim, rope)), f"{name}: bands {rope_bands(module.head_dim, rope)}"
    y_ref = reference_gqa(module.state_dict(), x, heads, opts["num_kv_heads"], rope, window)
    err = (y.double() - y_ref).abs().max().item()
    assert err <= float(TOLERANCE) * max(1.0, y.abs().max().item()), f"{name}: reference error {err:.3g}"


def make_case(name, b, T, ctx, d_in, d_out, heads, qkv_bias, opts):
    """Build the seeded module and input; return (state tensors, input, fp32 output)."""
    torch.manual_seed(123 if name == "book" else zlib.crc32(name.encode()))
    if "num_kv_heads" in opts:
        mha = GroupedQueryAttention(d_in, d_out, ctx, heads, opts["num_kv_heads"], qkv_bias=qkv_bias,
                                    out_bias=True, rope=opts.get("rope"),
                                    sliding_window=opts.get("sliding_window")).eval()
    else:
        mha = MultiHeadAttention(d_in, d_out, ctx, 0.0, num_heads=heads, qkv_bias=qkv_bias).eval()
    if name == "book":
        x = torch.stack((BOOK_INPUTS, BOOK_INPUTS))
    else:
        x = torch.randn(b, T, d_in) * opts.get("x_scale", 1.0)
    if opts.get("tie_rows"):
        x = x[:, torch.arange(T) // 2]
    store = opts.get("store", torch.float32)
    with torch.no_grad():
        for param, factor in opts.get("scale", {}).items():
            mha.get_parameter(param).mul_(factor)
        if store == torch.float16:
            mha.W_key.weight[0, :3] = torch.tensor([2.0**-24, -(2.0**-20), 2.0**-15])  # f16 subnormals
        for p in mha.parameters():  # the fp32 forward sees exactly what the file holds
            p.copy_(p.to(store).float())
        if opts.get("store_input"):
            x = x.to(store).float()
        y = mha(x)
        y64 = copy.deepcopy(mha).double()(x.double())
    state = {k: v if k == "mask" else v.to(store)
             for k, v in mha.state_dict().items() if k != "mask" or opts.get("keep_mask")}
    # The case must be well conditioned: fp32 PyTorch within a tenth of the tolerance of fp64.
    bound = float(TOLERANCE) * max(1.0, y.abs().max().item())
    err = (y.double() - y64).abs().max().item()
    assert torch.isfinite(y).all() and err <= bound / 10, f"{name}: fp32 vs fp64 error {err:.3g}"
    if "num_kv_heads" in opts:
        check_gqa(name, mha, x, y, heads, opts)
    return state, x.to(store) if opts.get("store_input") else x, y


def bad_cases():
    """Tiny invalid files: (name, error_hint, tensors, metadata), each with exactly one defect."""
    edits = {
        "wkey_transposed": ("W_key.weight has shape [d_in, d_out] instead of [d_out, d_in]",
                            lambda t, m: t.update({"W_key.weight": t["W_key.weight"].T})),
        "heads_not_divisible": ("d_out 4 is not divisible by num_heads 3",
                                lambda t, m: m.update(num_heads="3")),
        "t_exceeds_context": ("input has T 5 > context_length 4",
                              lambda t, m: t.update(input=torch.randn(1, 5, 3))),
        "input_wrong_d_in": ("input last dimension 5 != d_in 3",
                             lambda t, m: t.update(input=torch.randn(1, 3, 5))),
        "input_rank2": ("input has rank 2, expected [b, T, d_in]",
                        lambda t, m: t.update(input=t["input"][0])),
        "f64_weight": ("W_value.weight has dtype F64; F32, F16 and BF16 are supported",
                       lambda t, m: t.update({"W_value.weight": t["W_value.weight"].double()})),
        "missing_out_proj_bias": ("tensor out_proj.bias is missing",
                                  lambda t, m: t.pop("out_proj.bias")),
        "partial_qkv_bias": ("qkv_bias is true but W_value.bias is missing (W_query.bias, W_key.bias present)",
                             lambda t, m: t.pop("W_value.bias")),
    }
    for name, (hint, edit) in edits.items():
        torch.manual_seed(zlib.crc32(name.encode()))
        mha = MultiHeadAttention(3, 4, 4, 0.0, num_heads=2, qkv_bias=True)
        tensors = {k: v for k, v in mha.state_dict().items() if k != "mask"}
        tensors["input"] = torch.randn(1, 3, 3)
        meta = metadata(3, 4, 2, 4, True, "invalid: " + hint)
        edit(tensors, meta)
        meta.update(expect_error="true", error_hint=hint)
        yield name, hint, tensors, meta
    # GQA: W_key/W_value hold 3 K/V heads of head_dim 2, which 4 query heads cannot share evenly.
    name, hint = "kv_heads_not_dividing", "num_kv_heads 3 does not divide num_heads 4"
    torch.manual_seed(zlib.crc32(name.encode()))
    gqa = GroupedQueryAttention(3, 8, 4, 4, 4, qkv_bias=True, out_bias=True)
    tensors = {k: v[:6] if k.startswith(("W_key.", "W_value.")) else v for k, v in gqa.state_dict().items()}
    tensors["input"] = torch.randn(1, 3, 3)
    meta = metadata(3, 8, 4, 4, True, "invalid: " + hint)
    meta.update(num_kv_heads="3", expect_error="true", error_hint=hint)
    yield name, hint, tensors, meta


# name: (module, b, T, emb_dim, n_heads, context_length, qkv_bias, n_layers, description);
# module is "layernorm", "gelu", "feedforward", "llama_ff", "block", "stack" (n_layers blocks),
# "llama_block" or "llama_stack" (n_layers Llama blocks, options in LLAMA_OPTIONS).
GRAPH_CASES = {
    "layernorm": ("layernorm", 2, 5, 37, 0, 0, False, 0,
                  "LayerNorm(37), scale ~1+0.5N, shift ~0.5N, input 3N+2"),
    "gelu": ("gelu", 2, 5, 37, 0, 0, False, 0, "GELU on 3N over [2, 5, 37], tails included"),
    "feedforward": ("feedforward", 2, 5, 12, 0, 0, False, 0, "FeedForward(12): Linear(12, 48), GELU, Linear(48, 12)"),
    "llama_ff": ("llama_ff", 2, 5, 24, 0, 0, False, 0,
                 "x + ff(norm2(x)) of the book's Llama block: RMSNorm(24), fc1/fc2 24->40, SiLU, fc3 40->24"),
    "block": ("block", 2, 7, 16, 4, 8, False, 0, "TransformerBlock(emb 16, 4 heads, ctx 8), T 7 < ctx"),
    "block_qkv_bias": ("block", 3, 5, 24, 3, 5, True, 0,
                       "TransformerBlock(emb 24, 3 heads of 8, ctx 5, qkv_bias), T == ctx"),
    "stack3": ("stack", 2, 6, 12, 2, 6, True, 3,
               "3 TransformerBlocks (emb 12, 2 heads, qkv_bias) as trf_blocks.{i}., run with --layers 3"),
    "block_too_long": ("block", 1, 6, 8, 2, 4, False, 0, "invalid: input has T 6 > context_length 4"),
    "llama_block": ("llama_block", 2, 9, 32, 4, 16, False, 0,
                    "the book's Llama 3.2 block (emb 32, 4 heads of dim 8, 2 K/V heads, RoPE theta 10000, "
                    "SwiGLU hidden 48, RMSNorm eps 1e-5, no biases), ctx 16, T 9"),
    "llama_stack2": ("llama_stack", 2, 12, 32, 4, 16, False, 2,
                     "2 Llama blocks as trf_blocks.{i}. (emb 32, 4 heads of dim 8, 2 K/V heads, hidden 48), "
                     "Llama 3.1 RoPE (theta 500000, factor 8, low 1, high 4, original 256), sliding window 4, "
                     "ctx 16, T 12"),
}
# The Llama cases' num_kv_heads, hidden_dim (fc1/fc2 outputs), rope and sliding_window, as in CASES.
LLAMA_OPTIONS = {
    "llama_block": {"num_kv_heads": 2, "hidden_dim": 48, "rope": ROPE},
    "llama_stack2": {"num_kv_heads": 2, "hidden_dim": 48, "rope": {**ROPE_SCALED, "original_context_length": 256},
                     "sliding_window": 4},
}


def perturb_norms(module):
    """Non-trivial norm weights, so scale and shift are really tested."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, LayerNorm):
                m.scale.copy_(1 + 0.5 * torch.randn_like(m.scale))
                m.shift.copy_(0.5 * torch.randn_like(m.shift))
            elif isinstance(m, RMSNorm):
                m.weight.copy_(1 + 0.5 * torch.randn_like(m.weight))


def make_graph_case(name, kind, b, T, emb, heads, ctx, qkv_bias, n_layers):
    """Build the seeded module and input; return (state tensors, input, fp32 output)."""
    torch.manual_seed(zlib.crc32(("graph/" + name).encode()))
    if kind == "layernorm":
        module = LayerNorm(emb)
    elif kind == "gelu":
        module = GELU()
    elif kind == "feedforward":
        module = FeedForward(emb)
    elif kind == "llama_ff":
        module = LlamaFeedForwardHalf(emb, 40)
    elif kind == "block":
        module = TransformerBlock(emb, ctx, heads, qkv_bias)
    elif kind in ("llama_block", "llama_stack"):
        opts = LLAMA_OPTIONS[name]
        if opts["rope"] and "factor" in opts["rope"]:
            assert all(rope_bands(emb // heads, opts["rope"])), f"graph/{name}: bands"
        blocks = [LlamaTransformerBlock(emb, opts["hidden_dim"], ctx, heads, opts["num_kv_heads"], opts["rope"],
                                        opts.get("sliding_window")) for _ in range(max(1, n_layers))]
        if kind == "llama_block":
            module = blocks[0]
        else:  # named like the book's Llama3Model.trf_blocks
            module = nn.Module()
            module.trf_blocks = nn.Sequential(*blocks)
            module.forward = module.trf_blocks.forward
    else:  # named like GPTModel.trf_blocks
        module = nn.Module()
        module.trf_blocks = nn.Sequential(*[TransformerBlock(emb, ctx, heads, qkv_bias) for _ in range(n_layers)])
        module.forward = module.trf_blocks.forward
    perturb_norms(module)
    module.eval()
    x = torch.randn(b, T, emb) * (3 if kind in ("gelu", "layernorm") else 1)
    if kind == "layernorm":
        x = x + 2  # a mean far from zero
    if name == "block_too_long":
        return dict(module.state_dict()), x, None
    with torch.inference_mode():
        y = module(x)
        y64 = copy.deepcopy(module).double()(x.double())
    bound = float(TOLERANCE) * max(1.0, y.abs().max().item())
    err = (y.double() - y64).abs().max().item()
    assert torch.isfinite(y).all() and err <= bound / 10, f"graph/{name}: fp32 vs fp64 error {err:.3g}"
    if kind in ("llama_block", "llama_stack"):  # each block's attention against reference_gqa
        opts, y_ref = LLAMA_OPTIONS[name], x.double()
        with torch.inference_mode():
            for block in (module.trf_blocks if kind == "llama_stack" else [module]):
                block64 = copy.deepcopy(block).double()
                y_ref = y_ref + reference_gqa(block.att.state_dict(), block64.norm1(y_ref), heads,
                                              opts["num_kv_heads"], opts["rope"], opts.get("sliding_window"))
                y_ref = y_ref + block64.ff(block64.norm2(y_ref))
        err = (y.double() - y_ref).abs().max().item()
        assert err <= bound, f"graph/{name}: reference error {err:.3g}"
    return dict(module.state_dict()), x, y


LM_TOLERANCE = "1e-4"  # pass: max|logits - expected| <= LM_TOLERANCE * max|expected logits|
LM_NEW_TOKENS = 6  # greedy tokens per row ("max_new_tokens")

# name: (family, cfg, options, description); family "gpt" (GPTModel: vocab_size, context_length,
# emb_dim, n_heads, n_layers, qkv_bias) or "llama" (Llama3Model: ..., n_kv_groups, hidden_dim, rope).
# options: b, T (the padded prompt width), lengths (each row's prompt length; absent: all T),
# ids_dtype (of input_ids, I64 unless said), store (the weights' dtype), keep_mask (keep the book's
# att.mask buffers), tied (out_head.weight is tok_emb.weight and is left out of the file),
# hf (the Hugging Face GPT-2 twins written from the same model and prompts).
LM_CASES = {
    "gpt_book_1l": ("gpt", {"vocab_size": 64, "context_length": 16, "emb_dim": 32, "n_heads": 2, "n_layers": 1,
                            "qkv_bias": False},
                    {"b": 2, "T": 9, "ids_dtype": torch.int32, "keep_mask": True},
                    "book GPTModel: vocab 64, emb 32, 2 heads, ctx 16, 1 layer, F32 with the att.mask "
                    "buffer; I32 input_ids [2, 9], both rows full"),
    "gpt_book_2l_bias": ("gpt", {"vocab_size": 96, "context_length": 24, "emb_dim": 32, "n_heads": 4,
                                 "n_layers": 2, "qkv_bias": True},
                         {"b": 3, "T": 12, "lengths": [12, 7, 1], "store": torch.float16, "emb_scale": 0.4,
                          "signed_final_norm": True,
                          "hf": ("hf_gpt2", "hf_gpt2_prefixed", "hf_gpt2_tied")},
                         "book GPTModel: vocab 96, emb 32, 4 heads, ctx 24, 2 layers, qkv_bias, weights F16 "
                         "(no mask buffer); prompts of 12, 7 and 1 tokens right-padded with 0"),
    "gpt_book_3l": ("gpt", {"vocab_size": 80, "context_length": 20, "emb_dim": 32, "n_heads": 4, "n_layers": 3,
                            "qkv_bias": False},
                    {"b": 2, "T": 11, "store": torch.bfloat16},
                    "book GPTModel: vocab 80, emb 32, 4 heads, ctx 20, 3 layers, weights BF16 (no mask "
                    "buffer); both rows full"),
    "llama_gqa": ("llama", {"vocab_size": 100, "context_length": 24, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2,
                            "hidden_dim": 64, "n_layers": 2, "rope": ROPE},
                  {"b": 2, "T": 14, "lengths": [14, 6], "store": torch.bfloat16},
                  "book Llama3Model: vocab 100, emb 32, 4 heads of dim 8, 2 K/V heads, SwiGLU hidden 64, ctx 24, "
                  "2 layers, RoPE theta 10000, weights BF16; prompts of 14 and 6 tokens"),
    "llama_mqa": ("llama", {"vocab_size": 64, "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 1,
                            "hidden_dim": 64, "n_layers": 1, "rope": ROPE},
                  {"b": 3, "T": 8},
                  "book Llama3Model: vocab 64, emb 32, 4 heads of dim 8 sharing 1 K/V head, hidden 64, ctx 16, "
                  "1 layer, RoPE theta 10000, F32; all rows full"),
    "llama_scaled_tied": ("llama", {"vocab_size": 120, "context_length": 32, "emb_dim": 32, "n_heads": 2,
                                    "n_kv_groups": 1, "hidden_dim": 96, "n_layers": 1,
                                    "rope": {**ROPE_SCALED, "original_context_length": 64}},
                          {"b": 2, "T": 20, "lengths": [20, 13], "tied": True, "emb_scale": 0.4,
                           "signed_final_norm": True},
                          "book Llama3Model: vocab 120, emb 32, 2 heads of dim 16 sharing 1 K/V head, hidden 96, "
                          "ctx 32, 1 layer, Llama 3.1 RoPE (theta 500000, factor 8, low 1, high 4, original 64: "
                          "1 kept, 1 blended, 6 divided frequencies), head tied to tok_emb (no out_head.weight), "
                          "F32; prompts of 20 and 13 tokens"),
}
HF_DESCRIPTIONS = {
    "hf_gpt2": "gpt_book_2l_bias's weights (F16) under Hugging Face GPT-2 names with the attn.bias and "
               "attn.masked_bias buffers; the same prompts, logits and tokens",
    "hf_gpt2_prefixed": "hf_gpt2 with transformer. before every name but lm_head.weight (no buffers)",
    "hf_gpt2_tied": "gpt_book_2l_bias's weights under GPT-2 names without lm_head.weight: the head is wte, "
                    "so logits and tokens differ from hf_gpt2",
}


def gpt_metadata(cfg):
    return {"num_heads": str(cfg["n_heads"]), "context_length": str(cfg["context_length"])}


def llama_metadata(cfg):
    meta = {"num_heads": str(cfg["n_heads"]), "num_kv_heads": str(cfg["n_kv_groups"]),
            "context_length": str(cfg["context_length"])}
    meta.update({"rope_" + key: str(value) for key, value in cfg["rope"].items()})
    meta["rms_norm_eps"] = "1e-05"
    return meta


def build_lm(family, cfg, opts, seed):
    """The seeded eval model: non-trivial norms, W_query and W_key x2 (attention not nearly uniform),
    the head scaled so logits are O(1..10), weights rounded to the stored dtype."""
    torch.manual_seed(seed)
    model = (GPTModel({**cfg, "drop_rate": 0.1}) if family == "gpt" else Llama3Model(cfg)).eval()
    perturb_norms(model)
    with torch.no_grad():
        for block in model.trf_blocks:
            block.att.W_query.weight.mul_(2)
            block.att.W_key.weight.mul_(2)
            block.att.out_proj.weight.mul_(opts.get("block_scale", 1.0))
            (block.ff.layers[2] if family == "gpt" else block.ff.fc3).weight.mul_(opts.get("block_scale", 1.0))
        model.tok_emb.weight.mul_(opts.get("emb_scale", 1.0))
        if opts.get("signed_final_norm"):  # else a tied head favours repeating the last token
            w = model.final_norm.scale if family == "gpt" else model.final_norm.weight
            w.mul_(torch.randint(0, 2, w.shape) * 2 - 1)
        if opts.get("tied"):
            model.out_head.weight = model.tok_emb.weight
        else:
            model.out_head.weight.mul_(4)
        store = opts.get("store", torch.float32)
        for p in model.parameters():  # the fp32 forward sees exactly what the file holds
            p.copy_(p.to(store).float())
    return model


def tie_head(model):
    """A copy of model whose out_head is its tok_emb (what a Hugging Face loader does without lm_head)."""
    tied = copy.deepcopy(model)
    tied.out_head.weight = tied.tok_emb.weight
    return tied


def gpt2_tensors(state, n_layers, tied, buffers_ctx=None):
    """A book GPTModel's state_dict under Hugging Face GPT-2 names: Conv1D weights are [in, out]
    (nn.Linear's transposed), c_attn concatenates q, k, v along out; with buffers_ctx, the ignored
    attn.bias (F32 [1, 1, ctx, ctx] lower-triangular ones) and attn.masked_bias (F32 scalar -1e4)."""
    t = {"wte.weight": state["tok_emb.weight"], "wpe.weight": state["pos_emb.weight"]}
    for i in range(n_layers):
        p, h = f"trf_blocks.{i}.", f"h.{i}."
        t[h + "ln_1.weight"], t[h + "ln_1.bias"] = state[p + "norm1.scale"], state[p + "norm1.shift"]
        if buffers_ctx:
            t[h + "attn.bias"] = torch.tril(torch.ones(buffers_ctx, buffers_ctx)).view(1, 1, buffers_ctx, buffers_ctx)
            t[h + "attn.masked_bias"] = torch.tensor(-1e4)
        qkv = [p + f"att.W_{n}" for n in ("query", "key", "value")]
        t[h + "attn.c_attn.weight"] = torch.cat([state[n + ".weight"].T for n in qkv], dim=1)
        t[h + "attn.c_attn.bias"] = torch.cat([state.get(n + ".bias", torch.zeros_like(state[n + ".weight"][:, 0]))
                                               for n in qkv])  # zeros: a model without qkv_bias
        t[h + "attn.c_proj.weight"] = state[p + "att.out_proj.weight"].T
        t[h + "attn.c_proj.bias"] = state[p + "att.out_proj.bias"]
        t[h + "ln_2.weight"], t[h + "ln_2.bias"] = state[p + "norm2.scale"], state[p + "norm2.shift"]
        t[h + "mlp.c_fc.weight"], t[h + "mlp.c_fc.bias"] = state[p + "ff.layers.0.weight"].T, state[p + "ff.layers.0.bias"]
        t[h + "mlp.c_proj.weight"] = state[p + "ff.layers.2.weight"].T
        t[h + "mlp.c_proj.bias"] = state[p + "ff.layers.2.bias"]
    t["ln_f.weight"], t["ln_f.bias"] = state["final_norm.scale"], state["final_norm.shift"]
    if not tied:
        t["lm_head.weight"] = state["out_head.weight"]
    return {k: v.contiguous() for k, v in sorted(t.items())}


def gpt2_config(cfg, tied):
    """A Hugging Face GPT-2 config.json for cfg."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "n_head": cfg["n_heads"], "n_layer": cfg["n_layers"], "n_embd": cfg["emb_dim"],
            "n_positions": cfg["context_length"], "n_ctx": cfg["context_length"],
            "vocab_size": cfg["vocab_size"], "layer_norm_epsilon": 1e-5, "tie_word_embeddings": tied}


def reference_gpt2(t, ids, n_head, eps=1e-5, dtype=torch.float64, linear=None):
    """An independent forward of one prompt ids [T] from GPT-2 named tensors, in float64 unless told
    otherwise: logits [T, V]. linear(x, w [n, k], b or None) runs every linear, x @ w.T + b by
    default."""
    t = {k: v.to(dtype) for k, v in t.items()}
    linear = linear or (lambda x, w, b: x @ w.T if b is None else x @ w.T + b)
    T = ids.shape[0]
    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    e, hd = x.shape[-1], x.shape[-1] // n_head

    def ln(x, n):
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps) * t[n + ".weight"] + t[n + ".bias"]

    def conv1d(x, n):  # Conv1D's weight is [k, n]
        return linear(x, t[n + ".weight"].T, t[n + ".bias"])

    future = torch.arange(T)[None, :] > torch.arange(T)[:, None]
    i = 0
    while f"h.{i}.ln_1.weight" in t:
        h = f"h.{i}."
        q, k, v = [y.view(T, n_head, hd).transpose(0, 1) for y in conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(e, -1)]
        w = torch.softmax((q @ k.transpose(1, 2) / hd ** 0.5).masked_fill(future, -torch.inf), -1)
        x = x + conv1d((w @ v).transpose(0, 1).reshape(T, e), h + "attn.c_proj")
        m = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        m = 0.5 * m * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (m + 0.044715 * m ** 3)))
        x = x + conv1d(m, h + "mlp.c_proj")
        i += 1
    return linear(ln(x, "ln_f"), t.get("lm_head.weight", t["wte.weight"]), None)


def f16(x):
    """float32 through IEEE half (round to nearest even) and back, as GGML_FP32_TO_FP16."""
    return x.to(torch.float16).to(torch.float32)


def dequantized(w, kind):
    """w [..., k] (float32) through llama.cpp's quantize_row_q8_0_ref or quantize_row_q4_0_ref and
    back: the exact float32 values of the blocks."""
    b = w.reshape(*w.shape[:-1], -1, 32)
    if kind == "q8_0":
        d = b.abs().amax(-1, keepdim=True) / 127
        inv = torch.where(d != 0, 1 / d, torch.zeros_like(d))
        v = b * inv
        r = torch.trunc(v)  # roundf: halves away from zero (v - r is exact)
        q = r + torch.sign(v) * ((v - r).abs() >= 0.5)
    else:
        top = b.gather(-1, b.abs().argmax(-1, keepdim=True))  # the first of largest magnitude
        d = top / -8
        inv = torch.where(d != 0, 1 / d, torch.zeros_like(d))
        q = torch.clamp(torch.trunc(b * inv + 8.5), max=15) - 8  # (int8_t) truncates
    return (q * f16(d)).reshape(w.shape)


def quantized_linear(kind):
    """A linear as attn runs `kind`'s: PyTorch in float64 on the dequantized weights, each row of
    its input quantized per block of 32 as q8_0 (llama.cpp's activations)."""
    def linear(x, w, b):
        x = dequantized(x.float(), "q8_0").double()
        y = x @ dequantized(w.float(), kind).double().T
        return (y if b is None else y + b.double()).float()
    return linear


QUANT_KINDS = ("q8_0", "q4_0")
# The GPT-2 twins that quant.safetensors is written for: an own head and a tied one.
GPT2_QUANT_CASES = ("hf_gpt2", "hf_gpt2_tied")


def write_quant_io(d, logits):
    save_safetensors(d / "quant.safetensors", logits,
                     {"description": "logits of input_ids[0], the model quantized as q8_0 and q4_0, "
                      "activations as q8_0"})


def reference_llama(state, ids, cfg, eps=1e-5):
    """An independent float64 forward of one prompt ids [T] from Llama3Model's state_dict: logits [T, V]."""
    st = {k: v.double() for k, v in state.items()}
    x = st["tok_emb.weight"][ids][None]

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    for i in range(cfg["n_layers"]):
        p = f"trf_blocks.{i}."
        att = {k[len(p + "att."):]: v for k, v in st.items() if k.startswith(p + "att.")}
        x = x + reference_gqa(att, rms(x, st[p + "norm1.weight"]), cfg["n_heads"], cfg["n_kv_groups"], cfg["rope"], None)
        h = rms(x, st[p + "norm2.weight"])
        x = x + (nn.functional.silu(h @ st[p + "ff.fc1.weight"].T) * (h @ st[p + "ff.fc2.weight"].T)) @ st[p + "ff.fc3.weight"].T
    return (rms(x, st["final_norm.weight"]) @ st.get("out_head.weight", st["tok_emb.weight"]).T)[0]


def lm_io(name, model, ids, lengths, reference):
    """Logits [b, T, V] (each row over its own prompt, zeros beyond) and greedy tokens [b, N] of the
    fp32 eval model, checked against its float64 copy and reference(row ids) -> float64 logits.
    None when the case is ill-conditioned for a test: a greedy step whose best two logits are
    closer than 1e-2 (or 1e-3 of the largest logit), or degenerate tokens (fewer than 3 distinct
    tokens in a row)."""
    b, T = ids.shape
    ctx = model.trf_blocks[0].att.mask.shape[-1]
    model64 = copy.deepcopy(model).double()
    logits = torch.zeros(b, T, model.out_head.weight.shape[0])
    tokens = torch.zeros(b, LM_NEW_TOKENS, dtype=torch.int64)
    for r, n in enumerate(lengths):
        prompt = ids[r:r + 1, :n]
        with torch.no_grad():
            y = model(prompt)[0]
            y64 = model64(prompt)[0]
        y_ref = reference(prompt[0])
        bound = float(LM_TOLERANCE) * y.abs().max().item()
        err64, err_ref = (y.double() - y64).abs().max().item(), (y.double() - y_ref).abs().max().item()
        assert torch.isfinite(y).all() and err64 <= bound / 10, f"lm/{name}: fp32 vs fp64 error {err64:.3g}"
        assert err_ref <= bound / 10, f"lm/{name}: reference error {err_ref:.3g}"
        logits[r, :n] = y
        out, gap = generate_text_simple(model, prompt, LM_NEW_TOKENS, ctx)
        out64, _ = generate_text_simple(model64, prompt, LM_NEW_TOKENS, ctx)
        assert torch.equal(out, out64), f"lm/{name}: fp32 and fp64 greedy tokens differ"
        if gap < max(1e-2, 1e-3 * y.abs().max().item()) or len(set(out[0, n:].tolist())) < 3:
            return None
        tokens[r] = out[0, n:]
    return logits, tokens


def make_lm_case(name, family, cfg, opts):
    """Seeded prompts and model (the first seed from crc32 whose io lm_io accepts, also for the
    tied twin of an hf case); return (model, ids, lengths, {case: (logits, tokens)})."""
    b, T = opts["b"], opts["T"]
    lengths = opts.get("lengths", [T] * b)
    assert len(lengths) == b and max(lengths) == T and T + LM_NEW_TOKENS <= cfg["context_length"], name
    if family == "gpt":
        reference = lambda m: (lambda row: reference_gpt2(gpt2_tensors(m.state_dict(), cfg["n_layers"], False),
                                                          row, cfg["n_heads"]))
    else:
        assert "factor" not in cfg["rope"] or all(rope_bands(cfg["emb_dim"] // cfg["n_heads"], cfg["rope"])), name
        reference = lambda m: (lambda row: reference_llama(m.state_dict(), row, cfg))
    for attempt in range(100):
        seed = zlib.crc32(("lm/" + name).encode()) + attempt
        torch.manual_seed(seed)
        ids = torch.randint(0, cfg["vocab_size"], (b, T))
        for r, n in enumerate(lengths):
            ids[r, n:] = 0
        model = build_lm(family, cfg, opts, seed)
        io = {name: lm_io(name, model, ids, lengths, reference(model))}
        if "hf" in opts:
            tied = tie_head(model)
            io[opts["hf"][-1]] = lm_io(opts["hf"][-1], tied, ids, lengths, reference(tied))
        if all(v is not None for v in io.values()):
            return model, ids.to(opts.get("ids_dtype", torch.int64)), lengths, io
    raise AssertionError(f"lm/{name}: no seed gives a well-conditioned case")


def lm_model_tensors(model, opts):
    """The file's tensors: the state_dict in the stored dtype, less the book's att.mask buffers unless
    keep_mask (kept F32), less out_head.weight when tied."""
    store = opts.get("store", torch.float32)
    return {k: v if k.endswith("att.mask") else v.to(store) for k, v in model.state_dict().items()
            if (opts.get("keep_mask") or not k.endswith("att.mask")) and not (opts.get("tied") and k == "out_head.weight")}


def write_lm_case(d, model_tensors, model_meta, ids, lengths, logits, tokens, description, config=None):
    d.mkdir(parents=True, exist_ok=True)
    save_safetensors(d / "model.safetensors", model_tensors, model_meta)
    if config is not None:
        (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    io = {"input_ids": ids}
    if any(n != ids.shape[1] for n in lengths):
        io["lengths"] = torch.tensor(lengths, dtype=torch.int64)
    io.update(logits=logits, tokens=tokens)
    save_safetensors(d / "io.safetensors", io, {"tolerance": LM_TOLERANCE, "max_new_tokens": str(LM_NEW_TOKENS),
                                                "description": description})


def write_lm_cases(out):
    for name, (family, cfg, opts, description) in LM_CASES.items():
        model, ids, lengths, io = make_lm_case(name, family, cfg, opts)
        tensors = lm_model_tensors(model, opts)
        meta = gpt_metadata(cfg) if family == "gpt" else llama_metadata(cfg)
        write_lm_case(out / name, tensors, meta, ids, lengths, *io[name], description)
        print(f"lm/{name}: ids {list(ids.shape)} lengths {lengths} max|logits|={io[name][0].abs().max().item():.4g} "
              f"tokens {io[name][1].tolist()} " + " ".join(f"{k}={v}" for k, v in meta.items()))
        for twin in opts.get("hf", ()):
            tied = twin.endswith("_tied")
            hf = gpt2_tensors(tensors, cfg["n_layers"], tied, None if tied or twin.endswith("_prefixed")
                              else cfg["context_length"])
            if twin.endswith("_prefixed"):
                hf = {k if k == "lm_head.weight" else "transformer." + k: v for k, v in hf.items()}
            write_lm_case(out / twin, hf, {"format": "pt"}, ids, lengths, *io[twin if tied else name],
                          HF_DESCRIPTIONS[twin], gpt2_config(cfg, tied))
            if twin in GPT2_QUANT_CASES:
                write_quant_io(out / twin, {kind: reference_gpt2(hf, ids[0, :lengths[0]], cfg["n_heads"],
                                                                 dtype=torch.float32, linear=quantized_linear(kind))
                                            for kind in QUANT_KINDS})
            print(f"lm/{twin}: {len(hf)} tensors max|logits|={io[twin if tied else name][0].abs().max().item():.4g}")
    write_lm_bad_cases(out / "bad")


def write_lm_bad_cases(out):
    """lm/bad/: token_out_of_range and too_long (a valid small GPTModel, F16; the defect in io), and
    unknown_layout (tensor names of no known model); io metadata expect_error="true" and error_hint."""
    cfg = {"vocab_size": 50, "context_length": 8, "emb_dim": 32, "n_heads": 2, "n_layers": 1, "qkv_bias": False}
    opts = {"store": torch.float16}
    cases = {"token_out_of_range": ("input_ids holds 50 == vocab_size", torch.tensor([[3, 17, 50, 8]])),
             "too_long": ("prompt of 9 tokens > context_length 8", torch.arange(1, 10)[None] * 5)}
    for name, (hint, ids) in cases.items():
        model = build_lm("gpt", cfg, opts, zlib.crc32(b"lm/bad/small_gpt"))
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        save_safetensors(d / "model.safetensors", lm_model_tensors(model, opts), gpt_metadata(cfg))
        save_safetensors(d / "io.safetensors", {"input_ids": ids},
                         {"max_new_tokens": str(LM_NEW_TOKENS), "expect_error": "true", "error_hint": hint,
                          "description": "invalid: " + hint})
        print(f"lm/bad/{name}: {hint}")
    name, hint = "unknown_layout", "no known model layout (book GPT, Hugging Face GPT-2, book Llama 3) in the names"
    torch.manual_seed(zlib.crc32(("lm/bad/" + name).encode()))
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    meta = {"expect_error": "true", "error_hint": hint, "description": "invalid: " + hint}
    save_safetensors(d / "model.safetensors", {"embeddings.word_embeddings.weight": torch.randn(16, 8),
                                               "encoder.layer.0.weight": torch.randn(8, 8),
                                               "encoder.layer.0.bias": torch.randn(8),
                                               "classifier.weight": torch.randn(2, 8)}, meta)
    save_safetensors(d / "io.safetensors", {"input_ids": torch.tensor([[1, 2, 3]])},
                     {"max_new_tokens": str(LM_NEW_TOKENS), **meta})
    print(f"lm/bad/{name}: {hint}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "golden")
    parser.add_argument("--only", choices=("mha", "bad", "graph", "lm"),
                        help="(re)write only this family of files (default: all)")
    args = parser.parse_args()
    out, only = args.out, args.only
    torch.set_num_threads(1)  # fixed reduction order, so reruns are byte-identical

    if only in (None, "mha"):
        for stale in out.glob("mha_*.safetensors"):
            stale.unlink()
        write_mha_cases(out)
    if only in (None, "bad"):
        (out / "bad").mkdir(parents=True, exist_ok=True)
        for stale in (out / "bad").glob("*.safetensors"):
            stale.unlink()
        for name, hint, tensors, meta in bad_cases():
            save_safetensors(out / "bad" / f"{name}.safetensors", tensors, meta)
            print(f"bad/{name}: {hint}")
    if only in (None, "graph"):
        (out / "graph").mkdir(parents=True, exist_ok=True)
        for stale in (out / "graph").glob("*.safetensors"):
            stale.unlink()
        write_graph_cases(out)
    if only in (None, "lm"):
        shutil.rmtree(out / "lm", ignore_errors=True)
        write_lm_cases(out / "lm")
        import golden_hf  # Hugging Face's folders; it imports this module's helpers
        golden_hf.write_hf_cases(out / "lm")


def write_mha_cases(out):
    out.mkdir(parents=True, exist_ok=True)
    for name, (b, T, ctx, d_in, d_out, heads, qkv_bias, opts, description) in CASES.items():
        state, x, y = make_case(name, b, T, ctx, d_in, d_out, heads, qkv_bias, opts)
        if name == "book":
            assert [round(v, 4) for v in y[0, 0].tolist()] == [0.3190, 0.4858], y[0, 0]
            assert [round(v, 4) for v in y[0, -1].tolist()] == [0.2575, 0.4028], y[0, -1]
        save_safetensors(out / f"mha_{name}.safetensors", {**state, "input": x, "expected": y},
                         {**metadata(d_in, d_out, heads, ctx, qkv_bias, description), **gqa_metadata(opts)})
        print(f"mha_{name}: b={b} T={T} ctx={ctx} d_in={d_in} d_out={d_out} heads={heads} "
              f"bias={qkv_bias} max|expected|={y.abs().max().item():.4g}"
              + "".join(f" {k}={v}" for k, v in gqa_metadata(opts).items()))


def write_graph_cases(out):
    for name, (kind, b, T, emb, heads, ctx, qkv_bias, n_layers, description) in GRAPH_CASES.items():
        state, x, y = make_graph_case(name, kind, b, T, emb, heads, ctx, qkv_bias, n_layers)
        meta = {key: str(value) for key, value in
                (("num_heads", heads), ("context_length", ctx), ("n_layers", n_layers)) if value}
        meta.update(gqa_metadata(LLAMA_OPTIONS.get(name, {})))
        meta.update(qkv_bias=str(qkv_bias).lower(), tolerance=TOLERANCE, description=description)
        tensors = {**state, "input": x}
        if y is None:
            meta.update(expect_error="true", error_hint="sequence length exceeds context_length")
        else:
            tensors["expected"] = y
        save_safetensors(out / "graph" / f"{name}.safetensors", tensors, meta)
        print(f"graph/{name}: {kind} b={b} T={T} emb={emb} heads={heads} ctx={ctx} bias={qkv_bias} "
              f"layers={n_layers}" + ("" if y is None else f" max|expected|={y.abs().max().item():.4g}"))


if __name__ == "__main__":
    main()
