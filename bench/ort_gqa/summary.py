#!/usr/bin/python3
"""Summarise bench_ort_gqa.mjs JSONL (one or more files, several passes allowed): per point the best
min and the best (lowest) per-pass median over passes, wall (JS) and ORT-internal (model_run) times, GFLOP/s at
the ORT-internal median, and the grouping ratio (kv=32 over kv=8) of each decode point.

    /usr/bin/python3 summary.py run1.jsonl [run2.jsonl ...]
"""
import json
import sys

rows = [json.loads(line) for f in sys.argv[1:] for line in open(f) if line.startswith("{")]
rows = [r for r in rows if "median_ms" in r]
best = {}
for r in rows:
    key = (r["shape"], r["variant"], r["kv_mode"], r["threads"])
    b = best.setdefault(key, dict(r, passes=0))
    b["passes"] += 1
    for k in ("min_ms", "median_ms", "ort_run_min_ms", "ort_run_median_ms", "gqa_min_ms", "gqa_median_ms"):
        b[k] = min(b[k], r[k])
print("| shape | variant | kv_mode | threads | wall min / median ms | ORT run min / median ms "
      "| GQA kernel median ms | GFLOP/s at ORT run median | passes |")
print("|---|---|---|---|---|---|---|---|---|")
for key in sorted(best):
    b = best[key]
    gf = b["flops"] / (b["ort_run_median_ms"] / 1e3) / 1e9
    print(f"| {' | '.join(map(str, key))} | {b['min_ms']:.4g} / {b['median_ms']:.4g} | "
          f"{b['ort_run_min_ms']:.4g} / {b['ort_run_median_ms']:.4g} | {b['gqa_median_ms']:.4g} | {gf:.3g} | {b['passes']} |")
print("\nGrouping (kv=32 time / kv=8 time, ORT run min and median):")
for (shape, variant, mode, t), b in sorted(best.items()):
    m = best.get((shape + "-mha", variant, mode, t)) if not shape.endswith("mha") else None
    if m:
        print(f"  {shape} {variant} {mode} t={t}: min {m['ort_run_min_ms'] / b['ort_run_min_ms']:.2f}x, "
              f"median {m['ort_run_median_ms'] / b['ort_run_median_ms']:.2f}x")
