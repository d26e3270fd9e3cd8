#!/usr/bin/python3
"""The book's chapter-4 TransformerBlock in PyTorch, side by side with
`attn bench --graph tools/graphs/transformer_block.json`, in the same run.

    /usr/bin/python3 bench/torch_transformer_block.py [--attn build/bin/attn]
        [--shapes gpt2-128,gpt2-1k] [--threads 1,2] [--dtypes f32,bf16] [--min-time 2]

For each shape and thread count it times PyTorch (fp32, eval,
torch.inference_mode, torch.set_num_threads), then attn on the same shape and
threads in each of --dtypes, and prints one JSON line per measurement and a
Markdown table with the speed-ups.
PyTorch runs with glibc's malloc told to keep its memory
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_: on VMs with free-page
reporting, refaulting returned pages slows PyTorch 5-12x) and without
OPENBLAS_CORETYPE; the script re-executes itself to set them.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "4000000000"}
if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()) or "OPENBLAS_CORETYPE" in os.environ:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(MALLOC_ENV)
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import torch  # noqa: E402  (after the re-exec, so malloc is configured first)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from make_golden import TransformerBlock  # noqa: E402  (the book's classes)

SHAPES = {"gpt2-128": (8, 128, 768, 12), "gpt2-1k": (1, 1024, 768, 12), "gpt2-1k-b4": (4, 1024, 768, 12)}


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def time_torch(b, T, e, h, threads, min_time):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    block = TransformerBlock(e, T, h, qkv_bias=False).eval()
    x = torch.randn(b, T, e)
    times = []
    with torch.inference_mode():
        for _ in range(2):
            block(x)
        start = time.perf_counter()
        while len(times) < 5 or time.perf_counter() - start < min_time:
            t0 = time.perf_counter()
            block(x)
            times.append((time.perf_counter() - t0) * 1e3)
    return median(times), min(times), len(times)


def time_attn(attn, shape, threads, dtype, min_time):
    out = subprocess.run([attn, "bench", "--graph", str(ROOT / "tools/graphs/transformer_block.json"),
                          "--shape", shape, "--threads", str(threads), "--dtype", dtype,
                          "--min-time", str(min_time), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attn", default=str(ROOT / "build/bin/attn"), help="the attn binary ('' to skip attn)")
    parser.add_argument("--shapes", default="gpt2-128,gpt2-1k")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dtypes", default="f32", help="attn precisions to time, e.g. f32,bf16")
    parser.add_argument("--min-time", type=float, default=2.0, help="seconds per measurement")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        parser.error(f"--shapes: unknown {', '.join(unknown)}, want some of {', '.join(SHAPES)}")
    rows = []
    for shape in args.shapes.split(","):
        b, T, e, h = SHAPES[shape]
        flops = 2 * b * T * 12 * e * e + 2 * b * T * T * e
        for threads in map(int, args.threads.split(",")):
            t_med, t_min, reps = time_torch(b, T, e, h, threads, args.min_time)
            line = {"kind": "torch", "shape": shape, "b": b, "T": T, "e": e, "h": h, "threads": threads,
                    "median_ms": t_med, "min_ms": t_min, "reps": reps, "tokens_per_s": b * T / t_med * 1e3,
                    "gflops": flops / t_med / 1e6, "torch": torch.__version__}
            print(json.dumps(line), flush=True)
            attn_ms = []
            for dtype in dtypes if args.attn else []:
                a = time_attn(args.attn, shape, threads, dtype, args.min_time)
                print(json.dumps(a), flush=True)
                attn_ms.append(a["median_ms"])
            rows.append((shape, b, T, threads, t_med, attn_ms))
    head = "".join(f" attn {d} ms | speed-up {d} |" for d in dtypes)
    print(f"\n| shape | b | T | threads | PyTorch ms |{head}")
    print("|---" * (5 + 2 * len(dtypes)) + "|")
    for shape, b, T, threads, t_ms, attn_ms in rows:
        cells = "".join(f" {a:.1f} | {t_ms / a:.2f}x |" for a in attn_ms)
        print(f"| {shape} | {b} | {T} | {threads} | {t_ms:.1f} |{cells}")


if __name__ == "__main__":
    main()
