#!/usr/bin/python3
"""Generate the PyTorch golden files for the chapter-3 causal MultiHeadAttention.

Run with Debian's interpreter (it carries python3-torch and numpy):

    /usr/bin/python3 tools/make_golden.py [--out DIR]     # DIR defaults to tests/golden

Everything is seeded, so reruns reproduce the files byte for byte.  Each case
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

DIR/bad/<name>.safetensors are tiny files the engine must reject; their
metadata adds expect_error="true" and an error_hint naming the defect.

DIR/graph/<name>.safetensors are the graph runner's cases (chapter 4): the
book's LayerNorm, GELU, FeedForward and TransformerBlock, and the feed-forward
half of its Llama block (RMSNorm, SwiGLU), in eval mode with
non-trivial norm weights, under their state_dict names ("trf_blocks.{i}."
for a stack run with --layers), plus "input" and "expected" and metadata
num_heads, context_length, n_layers, qkv_bias, tolerance, description.
graph/block_too_long.safetensors has an input longer than context_length
(expect_error="true").
"""

import argparse
import copy
import json
import struct
import zlib
from pathlib import Path

import torch
from torch import nn

TOLERANCE = "1e-5"  # pass: max|out - expected| <= TOLERANCE * max(1, max|expected|)
DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
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
# store (the dtype the weights are rounded to and stored as), store_input (the same for the input).
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
}


def metadata(d_in, d_out, num_heads, context_length, qkv_bias, description):
    return {"d_in": str(d_in), "d_out": str(d_out), "num_heads": str(num_heads),
            "context_length": str(context_length), "qkv_bias": str(qkv_bias).lower(),
            "tolerance": TOLERANCE, "description": description}


def make_case(name, b, T, ctx, d_in, d_out, heads, qkv_bias, opts):
    """Build the seeded module and input; return (state tensors, input, fp32 output)."""
    torch.manual_seed(123 if name == "book" else zlib.crc32(name.encode()))
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


# name: (module, b, T, emb_dim, n_heads, context_length, qkv_bias, n_layers, description);
# module is "layernorm", "gelu", "feedforward", "block" or "stack" (n_layers blocks).
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
    return dict(module.state_dict()), x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "golden")
    out = parser.parse_args().out
    (out / "bad").mkdir(parents=True, exist_ok=True)
    (out / "graph").mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("mha_*.safetensors"), *(out / "bad").glob("*.safetensors"),
                  *(out / "graph").glob("*.safetensors")]:
        stale.unlink()
    torch.set_num_threads(1)  # fixed reduction order, so reruns are byte-identical

    for name, (b, T, ctx, d_in, d_out, heads, qkv_bias, opts, description) in CASES.items():
        state, x, y = make_case(name, b, T, ctx, d_in, d_out, heads, qkv_bias, opts)
        if name == "book":
            assert [round(v, 4) for v in y[0, 0].tolist()] == [0.3190, 0.4858], y[0, 0]
            assert [round(v, 4) for v in y[0, -1].tolist()] == [0.2575, 0.4028], y[0, -1]
        save_safetensors(out / f"mha_{name}.safetensors", {**state, "input": x, "expected": y},
                         metadata(d_in, d_out, heads, ctx, qkv_bias, description))
        print(f"mha_{name}: b={b} T={T} ctx={ctx} d_in={d_in} d_out={d_out} heads={heads} "
              f"bias={qkv_bias} max|expected|={y.abs().max().item():.4g}")
    for name, hint, tensors, meta in bad_cases():
        save_safetensors(out / "bad" / f"{name}.safetensors", tensors, meta)
        print(f"bad/{name}: {hint}")
    for name, (kind, b, T, emb, heads, ctx, qkv_bias, n_layers, description) in GRAPH_CASES.items():
        state, x, y = make_graph_case(name, kind, b, T, emb, heads, ctx, qkv_bias, n_layers)
        meta = {key: str(value) for key, value in
                (("num_heads", heads), ("context_length", ctx), ("n_layers", n_layers)) if value}
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
