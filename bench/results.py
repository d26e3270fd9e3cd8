#!/usr/bin/python3
"""Side-by-side table and plot from one measurement run (bench/README.md).

Reads the JSON lines of `attn bench --json` (one or more files: f32, bf16),
of the peer runners' torch/bench_torch.py and of ort/bench_ort.mjs; takes
each peer's best variant per (shape, threads), prints a Markdown table with
the engine's ratio to each peer and, with --plot, draws tokens/s per shape.

  /usr/bin/python3 bench/results.py --attn attn.jsonl attn_bf16.jsonl \
      --torch torch.jsonl --ort ort.jsonl --plot results.png
"""
import argparse
import json

SHAPES = ["seed", "gpt2-128", "gpt2-1k", "gpt2-1k-b4", "long-4k", "long-32k"]


def timing_lines(paths):
    for path in paths or []:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                row = json.loads(line)
                # torch marks timings with kind; ORT and attn lines have none.
                if "median_ms" in row and row.get("kind", "timing") == "timing":
                    yield row


def best(paths, label):
    """(shape, threads) -> the fastest row (by median) and its variant."""
    out = {}
    for row in timing_lines(paths):
        if row.get("ok") is False:
            continue
        key = (row["shape"], int(row["threads"]))
        if key not in out or row["median_ms"] < out[key]["median_ms"]:
            row = dict(row)
            row["who"] = label + (f" {row['variant']}" if "variant" in row else "")
            out[key] = row
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attn", nargs="+", required=True)
    ap.add_argument("--torch", nargs="*")
    ap.add_argument("--ort", nargs="*")
    ap.add_argument("--plot", help="PNG to write")
    args = ap.parse_args()

    attn_rows = list(timing_lines(args.attn))
    attn = {(r["shape"], int(r["threads"]), r.get("dtype", "f32")): r
            for r in attn_rows}
    torch = best(args.torch, "torch")
    ort = best(args.ort, "ort")
    keys = sorted({(s, t) for s, t, _ in attn},
                  key=lambda k: (SHAPES.index(k[0]) if k[0] in SHAPES else 99,
                                 k[1]))

    def ms(row):
        return f"{row['median_ms']:.4g}" if row else "-"

    def ratio(a, b):
        return f"{b['median_ms'] / a['median_ms']:.2f}x" if a and b else "-"

    print("| shape | threads | attn f32 ms | attn bf16 ms | PyTorch 1.13 best ms "
          "| ORT 1.30 best ms | f32 vs ORT | f32 vs PyTorch | bf16 vs own f32 "
          "| attn f32 peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape, threads in keys:
        f32 = attn.get((shape, threads, "f32"))
        bf16 = attn.get((shape, threads, "bf16"))
        t = torch.get((shape, threads))
        o = ort.get((shape, threads))
        peak = f"{f32['peak_rss_mb']:.0f}" if f32 else "-"
        print(f"| {shape} | {threads} | {ms(f32)} | {ms(bf16)} | {ms(t)} "
              f"| {ms(o)} | {ratio(f32, o)} | {ratio(f32, t)} "
              f"| {ratio(bf16, f32)} | {peak} |")
    print()
    print("Fastest peer variant per point: " + "; ".join(
        f"{s}/{n} {r['who']}" for peer in (torch, ort)
        for (s, n), r in sorted(peer.items())))
    for shape in ("gpt2-1k-b4", "long-4k"):
        one = attn.get((shape, 1, "f32"))
        two = attn.get((shape, 2, "f32"))
        if one and two:
            print(f"\n2-thread scaling, {shape} f32: "
                  f"{one['median_ms'] / two['median_ms']:.2f}x")

    if not args.plot:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thread_counts = sorted({t for _, t in keys})
    shapes = [s for s in SHAPES if any(k[0] == s for k in keys)]
    series = [("attn f32", lambda s, t: attn.get((s, t, "f32"))),
              ("attn bf16", lambda s, t: attn.get((s, t, "bf16"))),
              ("ONNX Runtime 1.30 (best)", lambda s, t: ort.get((s, t))),
              ("PyTorch 1.13 (best)", lambda s, t: torch.get((s, t)))]
    fig, axes = plt.subplots(1, len(thread_counts),
                             figsize=(6 * len(thread_counts), 4.5),
                             squeeze=False, sharey=True)
    width = 0.8 / len(series)
    lowest = min(row["tokens_per_s"] for rows in (attn, ort, torch)
                 for row in rows.values())
    for ax, threads in zip(axes[0], thread_counts):
        for i, (label, get) in enumerate(series):
            xs, ys = [], []
            for j, shape in enumerate(shapes):
                row = get(shape, threads)
                if row:
                    xs.append(j + (i - (len(series) - 1) / 2) * width)
                    ys.append(row["tokens_per_s"])
            if xs:
                ax.bar(xs, ys, width, label=label)
        ax.set_yscale("log")
        ax.set_ylim(bottom=lowest / 2)  # log bars need a floor below all
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=20)
        ax.set_title(f"{threads} thread{'s' if threads > 1 else ''}")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("tokens/s (higher is better, log scale)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Causal MHA block, tokens/s, one run on this machine")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
