#!/usr/bin/env bash
# Whole-model peers for GPT-2 124M, one after the other in one run, as JSON
# lines on stdout (every line tagged with the CPU and its SIMD flags):
#   ggml gpt-2-backend   f32 and f16 files, 1 and 2 threads (run_ggml.sh:
#                        128-token prefill, decode tok/s at batch 1)
#   ggml gpt-2-batched   -np 8, 1 and 2 threads (8 sequences, one shared prompt)
#   stream_read          read GB/s at 1 and 2 threads, RUNS processes
#   PyTorch 1.13         the book's GPTModel, batch 1 and 8, 1 and 2 threads
#
#   bench/gpt2_peers.sh GGML_BIN F32_MODEL F16_MODEL STREAM_READ ANCHORS_GPT2 \
#       > peers.jsonl
#
# GGML_BIN: ggml's build/bin (gpt-2-backend, gpt-2-batched); the models come
# from ANCHORS_GPT2/make_ggml_gpt2.py (--ftype 0 and 1); STREAM_READ: this
# project's build/bin/stream_read; ANCHORS_GPT2: the peers' GPT-2 runners
# (run_ggml.sh, make_ggml_gpt2.py, bench_torch_gpt2.py), kept outside this
# repository (bench/README.md).
# ATTN_CMD (optional): a command printing the engine's JSON lines; it runs
# first and again last, so its figures bracket the peers' in the same run.
# RUNS (default 3) repeats the stream_read pass; SKIP_TORCH=1 leaves it out.
# Run nothing else meanwhile: on 2 shared cores only same-run ratios count;
# each line carries /proc/loadavg as it was printed, to show who else ran.
# ggml is built with -march=native (GGML_NATIVE=ON): rebuild it whenever
# lscpu shows another CPU, or its binaries may be slow or fault.
set -eu
bin=$1 f32=$2 f16=$3 stream=$4 anchors=$5
runs=${RUNS:-3}
here=$(cd "$(dirname "$0")" && pwd)

# lscpu's model name alone ("AMD EPYC") does not tell Zen 3, 4 and 5 apart.
cpu="$(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu |
  sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p'))"
simd=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
       grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|avx512_vnni|amx_bf16)$' |
       tr '\n' ' ' | sed 's/ $//')
tag() {  # adds cpu, simd, the step's name ($1) and fields from $2 (JSON)
  /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): continue
    d = json.loads(line); d.update(cpu=sys.argv[1], simd=sys.argv[2], step=sys.argv[3],
                                   loadavg=open("/proc/loadavg").read().split()[:3])
    d.update(json.loads(sys.argv[4]))
    print(json.dumps(d), flush=True)' "$cpu" "$simd" "$1" "${2:-{\}}"
}
load() { echo "{\"kind\": \"load\", \"uptime\": \"$(uptime | sed 's/.*load/load/')\"}" | tag "$1"; }

load start
[ -n "${ATTN_CMD:-}" ] && bash -c "$ATTN_CMD" | tag attn-first

for model in "$f32" "$f16"; do
  for t in 1 2; do
    "$anchors/run_ggml.sh" "$bin" "$model" "$t" | tag ggml
  done
done

# gpt-2-batched: 8 sequences share the 128-token prompt (its eval is not in
# "predict time"), then 64 steps of 8 new tokens; decode tok/s = n_decoded
# (all sequences' tokens) / predict time. The example samples top-k, not argmax.
P=$(/usr/bin/python3 -c "print(''.join(chr(97+(i*7)%26) for i in range(128)))")
for model in "$f32" "$f16"; do
  for t in 1 2; do
    "$bin/gpt-2-batched" -m "$model" -p "$P" -np 8 -n 65 -t $t -s 1 --ignore-eos 2>&1 |
      /usr/bin/python3 -c '
import json, re, sys
out = sys.stdin.read()
n = re.search(r"n_decoded = *(\d+)", out); p = re.search(r"predict time = *([0-9.]+) ms", out)
d = dict(system="ggml-gpt-2-batched", model=sys.argv[1], threads=int(sys.argv[2]), batch=8, prompt=128)
if n and p:
    d.update(n_decoded=int(n.group(1)), predict_ms=float(p.group(1)),
             decode_tok_s=int(n.group(1)) / float(p.group(1)) * 1e3)
else: d.update(error="no timing lines", tail=out[-400:])
print(json.dumps(d))' "$(basename "$model")" $t | tag ggml-batched
  done
done

for r in $(seq "$runs"); do
  "$stream" --benchmark_format=json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
for b in j["benchmarks"]:
    print(json.dumps(dict(system="stream_read", run=int(sys.argv[1]), threads=int(b["threads"]),
        mib=int(j["context"].get("array_mib", 0)), highway_target=j["context"].get("highway_target"),
        passes=b["iterations"], mean_gb_s=b["bytes/s"] / 1e9, best_gb_s=b["best_bytes/s"] / 1e9)))' "$r" |
    tag stream
done

# PyTorch's matmuls go through libblas.so.3: Debian's reference (netlib) BLAS
# runs them at ~1 GFLOP/s, 40x slower than OpenBLAS. Where libopenblas0-openmp
# is not installed, OPENBLAS_LIB names the folder of an unpacked copy
# (apt-get download libopenblas0-openmp; dpkg -x ... root; then
# root/usr/lib/x86_64-linux-gnu/openblas-openmp); each line records the BLAS.
if [ -z "${SKIP_TORCH:-}" ]; then
  lib=${OPENBLAS_LIB:+$OPENBLAS_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
  lib=${lib:-${LD_LIBRARY_PATH:-}}
  torch_cpu=$(/usr/bin/python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')
  blas=$(LD_LIBRARY_PATH=$lib ldd "$torch_cpu" | awk '/libblas.so.3/ {print $3}')
  blas=$(realpath "$blas")
  for t in 1 2; do
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=$t LD_LIBRARY_PATH=$lib \
      /usr/bin/python3 "$anchors/bench_torch_gpt2.py" --threads $t --batch 1,8 |
      tag torch "{\"blas\": \"$blas\"}"
  done
fi

[ -n "${ATTN_CMD:-}" ] && bash -c "$ATTN_CMD" | tag attn-last
load end
