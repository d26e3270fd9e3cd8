#!/usr/bin/python3
"""PyTorch 1.13 baselines for `attn bench --decode`.

recompute: the chapter-3 way. The book's MultiHeadAttention has no cache, so
  the output for one new token per sequence costs a forward pass over the
  whole prefix [batch, context, d_in]. One line per (context, batch).
kv_cache: the same module's weights with a hand-written K/V cache in torch
  (preallocated [batch, heads, context, head_dim] tensors, one q.K^T, softmax,
  P.V per step), for an apples-to-apples decode step in PyTorch.

Run with the machine's malloc tuning (see /work/peers/NOTES.md):
  env -u OPENBLAS_CORETYPE MALLOC_MMAP_THRESHOLD_=1000000000 \
      MALLOC_TRIM_THRESHOLD_=4000000000 /usr/bin/python3 bench/torch_decode.py
Prints one JSON object per line. At batch 8 and context 4096 the book's module
would hold 8 x 12 x 4096^2 fp32 scores (6.4 GB) twice over; there the prefix
is recomputed one sequence at a time (the same arithmetic) and marked so.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from make_golden import MultiHeadAttention  # noqa: E402  (the book's class)


def kv_cache_step(mha, x1, k_cache, v_cache, pos):
    """One decode step: x1 [b, 1, d_in] at position pos of every sequence."""
    b = x1.shape[0]
    h, hd = mha.num_heads, mha.head_dim
    q = mha.W_query(x1).view(b, h, 1, hd)
    k_cache[:, :, pos:pos + 1] = mha.W_key(x1).view(b, 1, h, hd).transpose(1, 2)
    v_cache[:, :, pos:pos + 1] = mha.W_value(x1).view(b, 1, h, hd).transpose(1, 2)
    k = k_cache[:, :, :pos + 1]
    v = v_cache[:, :, :pos + 1]
    w = torch.softmax((q @ k.transpose(2, 3)) / hd**0.5, dim=-1)
    ctx = (w @ v).transpose(1, 2).reshape(b, 1, mha.d_out)
    return mha.out_proj(ctx)


def timed(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", default="1024,4096")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dims", default="768,768,12")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d_in, d_out, heads = (int(v) for v in args.dims.split(","))
    for context in (int(v) for v in args.context.split(",")):
        mha = MultiHeadAttention(d_in, d_out, context, 0.0, heads).eval()
        for batch in (int(v) for v in args.batch.split(",")):
            x = torch.rand(batch, context, d_in)
            # 6.4 GB of scores at b=8, T=4096: one sequence at a time there.
            chunked = batch * heads * context * context * 4 > 2e9
            with torch.inference_mode():
                if chunked:
                    recompute = lambda: [mha(x[i:i + 1]) for i in range(batch)]
                else:
                    recompute = lambda: mha(x)
                recompute()  # warm-up: first touch of every buffer
                recompute_s = timed(recompute, max(1, args.reps - 1))
                hd = d_out // heads
                k_cache = torch.zeros(batch, heads, context, hd)
                v_cache = torch.zeros(batch, heads, context, hd)
                k_cache.normal_()
                v_cache.normal_()
                x1 = torch.rand(batch, 1, d_in)
                step = lambda: kv_cache_step(mha, x1, k_cache, v_cache,
                                             context - 1)
                step()
                step_s = timed(step, 10 * args.reps)
            kv_bytes = 2 * batch * context * d_out * 4
            print(json.dumps({
                "kind": "torch_decode", "torch": torch.__version__,
                "threads": torch.get_num_threads(), "context": context,
                "batch": batch, "d_in": d_in, "d_out": d_out, "heads": heads,
                "recompute_ms": recompute_s * 1e3,
                "recompute_chunked": chunked,
                "recompute_tokens_per_s": batch / recompute_s,
                "kv_step_ms": step_s * 1e3,
                "kv_tokens_per_s": batch / step_s,
                "kv_gb_per_s": kv_bytes / step_s / 1e9,
            }), flush=True)


if __name__ == "__main__":
    main()
