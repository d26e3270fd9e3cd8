#!/usr/bin/python3
"""Markdown report (and SVG chart) of the whole-model peers, GPT-2 124M.

Usage: /usr/bin/python3 bench/gpt2_table.py [--svg FILE] RUN.jsonl [...]

Reads the JSON lines of bench/gpt2_peers.sh from one or more files: attn's
own lines (`attn bench --model gpt2-124m --json`, their "dtype" f32 or bf16,
f32 where absent; tagged attn-first / attn-last when gpt2_peers.sh ran it
through ATTN_CMD; untagged ones count too), ggml gpt-2-backend
(f32 / f16 files) and gpt-2-batched, stream_read, PyTorch and the load lines.
Prints, per thread count: prefill of a 128-token prompt at batch 1; decode at
batch 1 with the weight read rates against stream_read's best; decode at batch
8 (tok/s of all sequences); attn bf16 (decode at batch 1 and 8, prefill,
bf16 / f32 decode at batch 1, bf16 weight read rate against stream_read's best),
or a line saying none was measured. Each target cell says "met" or "not met".
Every f32 figure comes from f32 lines only. The top names the CPU and its SIMD
flags (from the first line that has them) and warns if lines of different
"simd" tags are mixed.

Where a figure repeats (attn's two passes, the stream_read runs, several files)
the largest counts; attn's first and last passes are also listed side by side
so that the drift between them shows. Lines that are not JSON objects are
skipped, lines with an "error" field are listed;
missing figures print "-". Standard library only.

--svg FILE also writes a self-contained 900x500 SVG chart: prefill and decode
tok/s at batch 1, grouped by thread count, for attn, ggml f32, ggml f16,
PyTorch and, when bf16 lines exist, attn bf16 (two panels, each on its own linear scale, values on the bars).
"""
import argparse
import json
import math
import os
from xml.sax.saxutils import escape

# f32 weights one GPT-2 124M decode step reads: 124.4M parameters x 4 bytes.
F32_STEP_GB = 0.4975
PREFILL_GOAL, DECODE_GOAL, SHARE_GOAL, BATCH_GOAL = 4.0, 1.15, 0.85, 6.0
# bf16 decode at batch 1 against attn's own f32, on CPUs with AVX512_BF16.
BF16_GOAL = 1.8
SYSTEMS = [("attn", "attn"), ("ggml-f32", "ggml f32"),
           ("ggml-f16", "ggml f16"), ("torch", "PyTorch")]
COLORS = {"attn": "#c0392b", "ggml-f32": "#1f4e96", "ggml-f16": "#6fa8dc",
          "torch": "#e69138", "attn-bf16": "#7d3c98"}
BF16 = ("attn-bf16", "attn bf16")


# ---------------------------------------------------------------- input

def read_rows(paths):
    """Every JSON object line of the files, with its file and kind added."""
    rows = []
    for path in paths:
        with open(path) as f:
            for line in f:
                d = parse_line(line)
                if d is not None:
                    d["_file"], d["_kind"] = os.path.basename(path), kind_of(d)
                    rows.append(d)
    return rows


def parse_line(line):
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        d = json.loads(line)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def kind_of(d):
    system, step = str(d.get("system", "")), str(d.get("step", ""))
    precision = "f16" if "f16" in str(d.get("model", "")) else "f32"
    if d.get("kind") == "load":
        return "load"
    if "error" in d:
        return "error"
    if step.startswith("attn") or (not system and "decode_weights_gb_s" in d):
        return "attn-bf16" if str(d.get("dtype", "f32")) == "bf16" else "attn"
    if system == "ggml-gpt-2-backend":
        return "ggml-" + precision
    if system == "ggml-gpt-2-batched":
        return "ggml-batched-" + precision
    if system == "stream_read":
        return "stream"
    return "torch" if system.startswith("torch") else None


def best(rows, kind, threads, metric, batch=None, step=None):
    """The largest `metric` among the matching lines, or None."""
    vals = [d[metric] for d in rows
            if d["_kind"] == kind and d.get("threads") == threads
            and (batch is None or d.get("batch", 1) == batch)
            and (step is None or d.get("step") == step)
            and isinstance(d.get(metric), (int, float))]
    return max(vals) if vals else None


def thread_counts(rows):
    found = {d["threads"] for d in rows if isinstance(d.get("threads"), int)}
    return sorted(found | {1, 2})


# ----------------------------------------------------------- formatting

def num(x):
    if x is None:
        return "-"
    return "%.0f" % x if abs(x) >= 100 else "%.1f" % x if abs(x) >= 10 \
        else "%.2f" % x


def ratio(a, b):
    return a / b if a is not None and b else None


def product(a, b):
    return a * b if a is not None and b is not None else None


def times(r):
    return "-" if r is None else "%.2fx" % r


def pct(r):
    return "-" if r is None else "%.0f%%" % (100 * r)


def target(r, goal, fmt):
    if r is None:
        return "-"
    return "%s, %s" % (fmt(r), "met" if r >= goal else "**not met**")


def table(head, body, align=None):
    align = align or ["---"] + ["---:"] * (len(head) - 1)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in body]


def thread_table(section, rows, ts):
    """One row per quantity, one column per thread count."""
    cols = [section(rows, t) for t in ts]
    head = [""] + ["%d thread%s" % (t, "" if t == 1 else "s") for t in ts]
    body = [[label] + [c[i][1] for c in cols]
            for i, (label, _) in enumerate(cols[0])]
    return table(head, body)


# -------------------------------------------------------------- sections

def batch1(rows, t, metric):
    return {k: best(rows, k, t, metric, 1) for k, _ in SYSTEMS}


def prefill_section(rows, t):
    v = batch1(rows, t, "prefill_tok_s")
    a = v["attn"]
    return [(name + " tok/s", num(v[k])) for k, name in SYSTEMS] + [
        ("attn / ggml f32 (target >= %gx)" % PREFILL_GOAL,
         target(ratio(a, v["ggml-f32"]), PREFILL_GOAL, times)),
        ("attn / ggml f16", times(ratio(a, v["ggml-f16"]))),
        ("attn / PyTorch", times(ratio(a, v["torch"])))]


def decode1_section(rows, t):
    v = batch1(rows, t, "decode_tok_s")
    attn_gb = best(rows, "attn", t, "decode_weights_gb_s", 1)
    stream = best(rows, "stream", t, "best_gb_s")
    ggml_gb = product(v["ggml-f32"], F32_STEP_GB)
    return [(name + " tok/s", num(v[k])) for k, name in SYSTEMS] + [
        ("attn / ggml f32 (target >= %gx)" % DECODE_GOAL,
         target(ratio(v["attn"], v["ggml-f32"]), DECODE_GOAL, times)),
        ("attn / PyTorch", times(ratio(v["attn"], v["torch"]))),
        ("attn weights read GB/s", num(attn_gb)),
        ("stream_read best GB/s", num(stream)),
        ("attn share of stream read (target >= %.0f%%)" % (100 * SHARE_GOAL),
         target(ratio(attn_gb, stream), SHARE_GOAL, pct)),
        ("ggml f32 implied read GB/s (tok/s x %.4f GB)" % F32_STEP_GB,
         num(ggml_gb)),
        ("ggml f32 share of stream read", pct(ratio(ggml_gb, stream)))]


def decode8_section(rows, t):
    a8 = best(rows, "attn", t, "decode_tok_s", 8)
    a1 = best(rows, "attn", t, "decode_tok_s", 1)
    g32 = best(rows, "ggml-batched-f32", t, "decode_tok_s", 8)
    g16 = best(rows, "ggml-batched-f16", t, "decode_tok_s", 8)
    return [("attn tok/s", num(a8)),
            ("attn batch 8 / batch 1 (target >= %gx)" % BATCH_GOAL,
             target(ratio(a8, a1), BATCH_GOAL, times)),
            ("ggml gpt-2-batched f32 tok/s", num(g32)),
            ("ggml gpt-2-batched f16 tok/s", num(g16)),
            ("PyTorch tok/s", num(best(rows, "torch", t, "decode_tok_s", 8))),
            ("attn / ggml batched f32", times(ratio(a8, g32))),
            ("attn / ggml batched f16", times(ratio(a8, g16)))]


def bf16_section(rows, t):
    b1 = best(rows, "attn-bf16", t, "decode_tok_s", 1)
    f1 = best(rows, "attn", t, "decode_tok_s", 1)
    stream = best(rows, "stream", t, "best_gb_s")
    gb = product(b1, F32_STEP_GB / 2)
    return [("attn bf16 decode tok/s, batch 1", num(b1)),
            ("attn bf16 decode tok/s, batch 8",
             num(best(rows, "attn-bf16", t, "decode_tok_s", 8))),
            ("attn bf16 prefill tok/s",
             num(best(rows, "attn-bf16", t, "prefill_tok_s", 1))),
            ("attn f32 decode tok/s, batch 1", num(f1)),
            ("bf16 / f32 decode, batch 1 (target >= %gx, CPUs with "
             "AVX512_BF16)" % BF16_GOAL, target(ratio(b1, f1), BF16_GOAL, times)),
            ("attn bf16 implied read GB/s (tok/s x %.4f GB)"
             % (F32_STEP_GB / 2), num(gb)),
            ("stream_read best GB/s", num(stream)),
            ("attn bf16 share of stream read", pct(ratio(gb, stream)))]


def passes_section(rows):
    """attn's first and last pass side by side, per (threads, batch)."""
    keys = sorted({(d.get("threads"), d.get("batch", 1)) for d in rows
                   if d["_kind"] == "attn"})
    if not keys:
        return ["No attn lines (run gpt2_peers.sh with ATTN_CMD set to "
                "`attn bench --model gpt2-124m --json ...`)."]
    head = ["threads", "batch", "prefill first", "prefill last",
            "decode first", "decode last", "decode last / first"]
    return table(head, [pass_row(rows, t, b) for t, b in keys])


def pass_row(rows, t, b):
    get = lambda m, s: best(rows, "attn", t, m, b, "attn-" + s)
    d1, d2 = get("decode_tok_s", "first"), get("decode_tok_s", "last")
    return [str(t), str(b), num(get("prefill_tok_s", "first")),
            num(get("prefill_tok_s", "last")), num(d1), num(d2),
            times(ratio(d2, d1))]


def load_section(rows):
    files = sorted({d["_file"] for d in rows})
    head = ["file", "load at start", "load at end", "1-min load, all lines"]
    return table(head, [load_row(rows, f) for f in files], ["---"] * 4)


def load_row(rows, name):
    mine = [d for d in rows if d["_file"] == name]
    at = lambda s: next((str(d.get("uptime", "")).replace("load average: ", "")
                         for d in mine if d["_kind"] == "load"
                         and d.get("step") == s), "-")
    return [name, at("start"), at("end"), load_range(mine)]


def load_range(rows):
    vals = [float(d["loadavg"][0]) for d in rows
            if isinstance(d.get("loadavg"), list) and d["loadavg"]]
    return "%.1f - %.1f" % (min(vals), max(vals)) if vals else "-"


def header(rows, paths):
    first = lambda k: next((str(d[k]) for d in rows if k in d), "-")
    simds = sorted({str(d["simd"]) for d in rows if "simd" in d})
    errors = [d for d in rows if d["_kind"] == "error"]
    out = ["# GPT-2 124M: attn against ggml, PyTorch and stream_read", "",
           "CPU: %s; SIMD: %s.  " % (first("cpu"), first("simd") or "-"),
           "Inputs: " + ", ".join("`%s`" % p for p in paths) + "."]
    if len(simds) > 1:
        out += ["", "**Warning: lines from different CPUs are mixed** "
                "(simd tags: %s); cross-line ratios compare machines." %
                "; ".join("`%s`" % s for s in simds)]
    if errors:
        out += ["", "Skipped, with an error field: " + "; ".join(
            "%s %s, %s threads" % (d.get("system"), d.get("model"),
                                   d.get("threads")) for d in errors) + "."]
    return out + [""] + load_section(rows)


NOTES = [
    "attn's f32 figures come from f32 lines only (no \"dtype\" or "
    "\"dtype\": \"f32\"), its bf16 figures from bf16 lines. Each figure is the best (largest) of its lines: attn's "
    "first and last pass, the stream_read runs, every input file.",
    "Decode tok/s at batch 8 counts every sequence's tokens.",
    "ggml f32's implied read rate assumes one decode step reads all the f32 "
    "weights of GPT-2 124M, 124.4M parameters x 4 bytes = %.4f GB; attn's own "
    "decode_weights_gb_s counts only the weight matrices (123.5M, 0.494 GB), "
    "so ggml's figure is about 0.7%% high on the same footing."
    % F32_STEP_GB,
    "On a shared machine only same-run ratios count (see bench/README.md); "
    "the load table above says who else ran."]


def report(rows, paths):
    ts = thread_counts(rows)
    out = header(rows, paths)
    out += ["", "## Prefill, 128-token prompt, batch 1 (tok/s)", ""]
    out += thread_table(prefill_section, rows, ts)
    out += ["", "## Decode, batch 1 (tok/s)", ""]
    out += thread_table(decode1_section, rows, ts)
    out += ["", "## Decode, batch 8 (tok/s of all 8 sequences)", ""]
    out += thread_table(decode8_section, rows, ts)
    out += ["", "## attn bf16 weights", ""]
    if any(d["_kind"] == "attn-bf16" for d in rows):
        out += thread_table(bf16_section, rows, ts)
        out += ["", "A bf16 step reads half the bytes of an f32 one: %.4f GB."
                % (F32_STEP_GB / 2)]
    else:
        out += ["No attn bf16 lines were measured (attn bench lines with "
                "\"dtype\": \"bf16\")."]
    out += ["", "## attn's two passes (tok/s): drift between first and last",
            ""] + passes_section(rows)
    out += ["", "Notes:", ""] + ["- " + n for n in NOTES]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ SVG

W, H, TOP, BOTTOM = 900, 500, 100, 420


def nice_axis(vmax):
    """(tick step, axis top) for values up to vmax, with room for labels."""
    if not vmax or vmax <= 0:
        return 1.0, 5.0
    raw = vmax / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return step, math.ceil(vmax * 1.1 / step) * step


def text(x, y, s, size=12, anchor="middle", extra=""):
    return ('<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s"%s>%s'
            "</text>" % (x, y, size, anchor, extra, escape(str(s))))


def axis(x0, w, step, top):
    out, v = [], 0.0
    while v <= top + step / 2:
        y = BOTTOM - v / top * (BOTTOM - TOP)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" '
                   'stroke="#ddd"/>' % (x0, y, x0 + w, y))
        out.append(text(x0 - 6, y + 4, "%g" % round(v, 6), 11, "end"))
        v += step
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>'
               % (x0, BOTTOM, x0 + w, BOTTOM))
    mid = (TOP + BOTTOM) / 2
    return out + [text(x0 - 48, mid, "tokens / s", 12, "middle",
                       ' transform="rotate(-90 %.1f %.1f)"' % (x0 - 48, mid))]


def chart_systems(rows):
    """SYSTEMS, plus attn bf16 where bf16 lines exist."""
    has = any(d["_kind"] == "attn-bf16" for d in rows)
    return SYSTEMS + [BF16] if has else list(SYSTEMS)


def bars(x0, w, top, data, ts, systems):
    out, gw = [], w / len(ts)
    bw = gw * 0.8 / len(systems)
    for gi, t in enumerate(ts):
        for si, (k, _) in enumerate(systems):
            x = x0 + gi * gw + gw * 0.1 + si * bw
            out += bar(x, bw, data[t][k], top, COLORS[k])
        out.append(text(x0 + (gi + 0.5) * gw, BOTTOM + 20,
                        "%d thread%s" % (t, "" if t == 1 else "s"), 13))
    return out


def bar(x, bw, v, top, color):
    if v is None:
        return [text(x + bw / 2, BOTTOM - 4, "-", 11, "middle",
                     ' fill="#888"')]
    h = v / top * (BOTTOM - TOP)
    return ['<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
            % (x + 1, BOTTOM - h, bw - 2, h, color),
            text(x + bw / 2, BOTTOM - h - 4, num(v), 11)]


def panel(x0, w, title, data, ts, systems):
    vals = [v for t in ts for v in data[t].values() if v is not None]
    step, top = nice_axis(max(vals) if vals else 0)
    return ([text(x0 + w / 2, TOP - 14, title, 14, "middle",
                  ' font-weight="bold"')]
            + axis(x0, w, step, top) + bars(x0, w, top, data, ts, systems))


def legend(systems):
    gap = min(150, (W - 40) / len(systems))
    out, x = [], W / 2 - gap / 2 * len(systems)
    for k, name in systems:
        out.append('<rect x="%.1f" y="46" width="14" height="14" fill="%s"/>'
                   % (x, COLORS[k]))
        out.append(text(x + 20, 58, name + (" (f32)" if k == "attn" else ""),
                        13, "start"))
        x += gap
    return out


def short(s, n):
    return s if len(s) <= n else s[:n - 3] + "..."


def svg(rows, paths):
    ts = thread_counts(rows)
    systems = chart_systems(rows)
    pre = {t: batch1(rows, t, "prefill_tok_s") for t in ts}
    dec = {t: batch1(rows, t, "decode_tok_s") for t in ts}
    for t in ts:
        if len(systems) > len(SYSTEMS):
            pre[t][BF16[0]] = best(rows, BF16[0], t, "prefill_tok_s", 1)
            dec[t][BF16[0]] = best(rows, BF16[0], t, "decode_tok_s", 1)
    cpu = short(next((str(d["cpu"]) for d in rows if "cpu" in d), "-"), 40)
    load = load_range(rows)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">'
           % (W, H, W, H),
           "<title>GPT-2 124M tokens/s: attn, ggml, PyTorch</title>",
           '<rect width="100%" height="100%" fill="white"/>',
           text(W / 2, 28, "GPT-2 124M on %s: tokens/s, batch 1 "
                "(higher is better)" % cpu, 17, "middle",
                ' font-weight="bold"')]
    out += legend(systems)
    out += panel(75, 360, "Prefill, 128-token prompt", pre, ts, systems)
    out += panel(525, 360, "Decode, one token per step", dec, ts, systems)
    names = ", ".join(os.path.basename(p) for p in paths)
    out += [text(W / 2, 468, "Each panel has its own scale; attn: best of its"
                 " first and last pass; 1-min load average over the lines: "
                 + load, 11, "middle", ' fill="#555"'),
            text(W / 2, 486, "Inputs: " + short(names, 140), 11, "middle",
                 ' fill="#555"')]
    return "\n".join(out + ["</svg>"]) + "\n"


def main():
    ap = argparse.ArgumentParser(
        description="Markdown report of gpt2_peers.sh's JSON lines.")
    ap.add_argument("files", nargs="+",
                    help="JSON-lines files of gpt2_peers.sh")
    ap.add_argument("--svg", metavar="FILE", help="also write an SVG chart")
    args = ap.parse_args()
    rows = read_rows(args.files)
    print(report(rows, args.files), end="")
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(svg(rows, args.files))


if __name__ == "__main__":
    main()
