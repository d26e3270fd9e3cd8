#!/bin/sh
# The engine and ONNX Runtime back to back per shape, so that both see the
# same load (bench/README.md).
#   bench/interleaved.sh BUILD_DIR ANCHORS_DIR OUT_DIR THREADS
set -eu
build=$(realpath "$1") anchors=$(realpath "$2") out=$(realpath -m "$3")
threads=$4
mkdir -p "$out"
export MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=4000000000
: >"$out/attn_t$threads.jsonl"
: >"$out/ort_t$threads.jsonl"
for shape in gpt2-128 gpt2-1k gpt2-1k-b4 long-4k; do
  "$build/bin/attn" bench --shape $shape --threads "$threads" --json \
    >>"$out/attn_t$threads.jsonl"
  (cd "$anchors/ort" && node bench_ort.mjs --shapes $shape \
    --threads "$threads" | grep median_ms >>"$out/ort_t$threads.jsonl")
done
uptime >>"$out/uptime.txt"
/usr/bin/python3 "$(dirname "$0")/results.py" \
  --attn "$out/attn_t$threads.jsonl" --ort "$out/ort_t$threads.jsonl"
