#!/usr/bin/python3
"""Build ONNX models of a grouped-query attention block with RoPE, for ONNX Runtime's
com.microsoft.GroupQueryAttention (CPU), the ORT side of `attn bench --shape llama-2k`.

Run with the Debian interpreter (python3-onnx + numpy only):
    /usr/bin/python3 make_gqa_models.py [--shapes llama-2k,decode-4k] [--outdir models] [--theta 500000]

Block (no Q/K/V biases; fp32):
  x[b,S,d] -> q = x Wq^T [b,S,h*hd], k = x Wk^T, v = x Wv^T [b,S,kv*hd]
  -> GroupQueryAttention(q, k, v, past_key, past_value, seqlens_k, total_sequence_length,
                         cos_cache, sin_cache; num_heads=h, kv_num_heads=kv, do_rotary=1,
                         rotary_interleaved=0, scale left at its default 1/sqrt(hd))
  -> y = attn Wo^T + bo                                         [b,S,d]
RoPE: rotate-half (Llama/GPT-NeoX), cos/sin caches [max_seq, hd/2] with
cos_cache[p,i] = cos(p * theta^(-2i/hd)) computed in float64 and stored as float32.
GQA: query head j uses K/V head j // (h/kv) (PyTorch repeat_interleave).

Shapes (all d=2048, h=32, hd=64):
  llama-2k       prefill b=1, S=T=2048, kv=8, no past (seqlens_k=[T-1], total_sequence_length=T)
  decode-4k      b=1, one new token at position 4095 against 4095 cached tokens, kv=8
  decode-4k-mha  same, kv=32 (no grouping)
  decode-4k-b4 / decode-4k-b4-mha   the same at b=4
Decode models take past_key/past_value [b, kv, P, hd] (BNSH, keys already rotated) with a
symbolic P: P=4095 (ORT copies past into a new present [b,kv,4096,hd] each step) or P=4096 =
max length with the new token's slot free, fed as the same buffer as the present_key/present_value
outputs (ORT's CPU kernel then appends in place: it shares past and present when their data
pointers are equal). seqlens_k=[4095]*b (total length - 1), total_sequence_length=4096 (int32 scalar).

Weights, input and cache come from np.random.default_rng(0) per shape, in this order:
  Wq[h*hd,d], Wk[kv*hd,d], Wv[kv*hd,d] (uniform +-1/sqrt(d)), Wo[d,h*hd], bo[d] (+-1/sqrt(h*hd)),
  x[b,S,d] standard normal, then for decode past_k, past_v [b,kv,4095,hd] = 0.5*standard normal.
The reference output is float64 numpy of the same math from the float32 values, stored float32.

Variants per shape: ort_gqa (the whole block, from x) and ort_gqa_core (the GroupQueryAttention
node alone, from q/k/v = the block's projections rounded to float32; its expected output is the
float64 attention output before out_proj). The core variant isolates attention: at decode the
block also streams ~40-64 MB of projection weights per step, which grouping does not shrink.

Outputs in --outdir (default models/, git-ignored): <shape>.<variant>.onnx, <shape>.<input>.bin
(raw little-endian, C order), <shape>.<variant>.expected.bin, manifest.json.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D, H, HD = 2048, 32, 64
SHAPES = {
    # name: (b, S new tokens, past tokens, kv heads)
    "llama-2k": (1, 2048, 0, 8),
    "decode-4k": (1, 1, 4095, 8),
    "decode-4k-mha": (1, 1, 4095, 32),
    "decode-4k-b4": (4, 1, 4095, 8),
    "decode-4k-b4-mha": (4, 1, 4095, 32),
}
DEFAULT = "llama-2k,decode-4k,decode-4k-mha"


def make_data(b, S, P, kv):
    rng = np.random.default_rng(0)
    bi, bo_ = 1.0 / math.sqrt(D), 1.0 / math.sqrt(H * HD)
    w = dict(Wq=rng.uniform(-bi, bi, (H * HD, D)), Wk=rng.uniform(-bi, bi, (kv * HD, D)),
             Wv=rng.uniform(-bi, bi, (kv * HD, D)), Wo=rng.uniform(-bo_, bo_, (D, H * HD)),
             bo=rng.uniform(-bo_, bo_, (D,)), x=rng.standard_normal((b, S, D)))
    if P:
        w["past_key"] = 0.5 * rng.standard_normal((b, kv, P, HD))
        w["past_value"] = 0.5 * rng.standard_normal((b, kv, P, HD))
    return {k: v.astype(np.float32) for k, v in w.items()}


def rope_tables(max_seq, theta):
    inv = theta ** (-np.arange(0, HD, 2, dtype=np.float64) / HD)  # [hd/2]
    ang = np.arange(max_seq, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang), np.sin(ang)  # float64 [max_seq, hd/2]


def rope(t, cos, sin, pos):
    """t [..., S, hd] float64, rotate-half; positions pos [S]."""
    c, s = cos[pos], sin[pos]
    t1, t2 = t[..., : HD // 2], t[..., HD // 2:]
    return np.concatenate([t1 * c - t2 * s, t2 * c + t1 * s], axis=-1)


def reference(w, P, kv, cos, sin):
    """Returns (q, k, v) float64 projections [b,S,n*hd] (before RoPE), o [b,S,h*hd] (attention
    output, heads merged) and y [b,S,d]."""
    f = {k: v.astype(np.float64) for k, v in w.items()}
    x = f["x"]
    b, S, _ = x.shape
    pos = np.arange(P, P + S)
    heads = lambda t, n: t.reshape(b, S, n, HD).transpose(0, 2, 1, 3)  # -> [b,n,S,hd]
    qkv = (x @ f["Wq"].T, x @ f["Wk"].T, x @ f["Wv"].T)
    q = rope(heads(qkv[0], H), cos, sin, pos)
    k = rope(heads(qkv[1], kv), cos, sin, pos)
    v = heads(qkv[2], kv)
    if P:
        k = np.concatenate([f["past_key"], k], axis=2)
        v = np.concatenate([f["past_value"], v], axis=2)
    L = P + S
    future = np.arange(L)[None, :] > pos[:, None]  # [S, L]: query at pos sees keys 0..pos
    o = np.empty((b, S, H * HD))
    g = H // kv
    for bi in range(b):
        for hi in range(H):
            s = q[bi, hi] @ k[bi, hi // g].T / math.sqrt(HD)
            s[future] = -np.inf
            s -= s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            o[bi, :, hi * HD:(hi + 1) * HD] = p @ v[bi, hi // g]
    return qkv, o, o @ f["Wo"].T + f["bo"]


def build(w, b, S, P, kv, cos32, sin32, core):
    init = lambda n, a: numpy_helper.from_array(np.ascontiguousarray(a), n)
    io = lambda n, t, s: helper.make_tensor_value_info(n, t, s)
    F, I32 = TensorProto.FLOAT, TensorProto.INT32
    inits = [init("cos_cache", cos32), init("sin_cache", sin32)]
    if core:  # the GroupQueryAttention node alone: q, k, v are inputs, its output is y
        inputs = [io("q", F, [b, S, H * HD]), io("k", F, [b, S, kv * HD]), io("v", F, [b, S, kv * HD])]
        outputs = [io("y", F, [b, S, H * HD])]
    else:
        inits += [init("WqT", w["Wq"].T), init("WkT", w["Wk"].T), init("WvT", w["Wv"].T),
                  init("WoT", w["Wo"].T), init("bo", w["bo"])]
        inputs = [io("x", F, [b, S, D])]
        outputs = [io("y", F, [b, S, D])]
    inputs += [io("seqlens_k", I32, [b]), io("total_sequence_length", I32, [])]
    past = ["", ""]
    if P:
        inputs[-2:-2] = [io("past_key", F, [b, kv, "past_seq", HD]), io("past_value", F, [b, kv, "past_seq", HD])]
        outputs += [io("present_key", F, [b, kv, "present_seq", HD]), io("present_value", F, [b, kv, "present_seq", HD])]
        past = ["past_key", "past_value"]
    N = helper.make_node
    gqa = N("GroupQueryAttention",
            ["q", "k", "v", *past, "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache"],
            ["y" if core else "attn", "present_key", "present_value"], name="gqa", domain="com.microsoft",
            num_heads=H, kv_num_heads=kv, do_rotary=1, rotary_interleaved=0)
    nodes = [gqa] if core else [
        N("MatMul", ["x", "WqT"], ["q"], name="q_proj"),
        N("MatMul", ["x", "WkT"], ["k"], name="k_proj"),
        N("MatMul", ["x", "WvT"], ["v"], name="v_proj"),
        gqa,
        N("MatMul", ["attn", "WoT"], ["proj"], name="out_proj_matmul"),
        N("Add", ["proj", "bo"], ["y"], name="out_proj_bias"),
    ]
    g = helper.make_graph(nodes, "gqa_core" if core else "gqa_block", inputs, outputs, initializer=inits)
    return helper.make_model(g, producer_name="bench/ort_gqa/make_gqa_models.py",
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT, help=f"comma list of {','.join(SHAPES)}; default {DEFAULT}")
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
    ap.add_argument("--theta", type=float, default=500000.0, help="RoPE base (Llama 3: 500000; Llama 2: 10000)")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    man_path = os.path.join(args.outdir, "manifest.json")
    man = json.load(open(man_path)) if os.path.exists(man_path) else {}
    man.update(onnx_version=onnx.__version__)
    man.setdefault("shapes", {})
    for name in args.shapes.split(","):
        if name not in SHAPES:
            sys.exit(f"unknown shape {name}; known: {','.join(SHAPES)}")
        t0 = time.time()
        b, S, P, kv = SHAPES[name]
        L = P + S  # total (present) length; also the cos/sin cache length
        w = make_data(b, S, P, kv)
        cos, sin = rope_tables(L, args.theta)
        (qp, kp, vp), o, y = reference(w, P, kv, cos, sin)
        w.update(q=qp.astype(np.float32), k=kp.astype(np.float32), v=vp.astype(np.float32))
        common = [dict(name="seqlens_k", dtype="int32", dims=[b], values=[L - 1] * b),
                  dict(name="total_sequence_length", dtype="int32", dims=[], values=[L])]
        if P:
            common = [dict(name=n, dtype="float32", dims=[b, kv, P, HD], file=f"{name}.{n}.bin")
                      for n in ("past_key", "past_value")] + common
        # FLOPs: projections, out_proj, and QK^T + PV over the causal part (prefill: T*T/2 pairs)
        pairs = b * S * P + b * S * (S + 1) / 2 if P else b * S * S / 2
        attn_flops = 4 * pairs * H * HD
        proj_flops = 2 * b * S * D * (H * HD + 2 * kv * HD) + 2 * b * S * H * HD * D
        variants = {}
        for variant, core in (("ort_gqa", False), ("ort_gqa_core", True)):
            feeds = ([dict(name=n, dtype="float32", dims=[b, S, (H if n == "q" else kv) * HD],
                           file=f"{name}.{n}.bin") for n in "qkv"] if core
                     else [dict(name="x", dtype="float32", dims=[b, S, D], file=f"{name}.x.bin")]) + common
            model = build(w, b, S, P, kv, cos.astype(np.float32), sin.astype(np.float32), core)
            onnx.checker.check_model(model)
            onnx.save(model, os.path.join(args.outdir, f"{name}.{variant}.onnx"))
            (o if core else y).astype(np.float32).tofile(os.path.join(args.outdir, f"{name}.{variant}.expected.bin"))
            variants[variant] = dict(model=f"{name}.{variant}.onnx", feeds=feeds, output="y",
                                     expected=f"{name}.{variant}.expected.bin",
                                     flops=attn_flops + (0 if core else proj_flops))
        for f in {f["file"]: f for v_ in variants.values() for f in v_["feeds"] if "file" in f}.values():
            w[f["name"]].tofile(os.path.join(args.outdir, f["file"]))
        man["shapes"][name] = dict(
            b=b, S=S, past=P, context=L, d=D, heads=H, kv_heads=kv, head_dim=HD, theta=args.theta,
            kind="decode" if P else "prefill", kv_cache_bytes=2 * b * kv * L * HD * 4, variants=variants)
        print(f"{name}: b={b} S={S} past={P} kv={kv} built in {time.time() - t0:.1f}s", flush=True)
    json.dump(man, open(man_path, "w"), indent=1)


if __name__ == "__main__":
    main()
