#!/bin/bash
S=seed,gpt2-128,gpt2-1k,gpt2-1k-b4,long-4k
for pass in 3 4; do
  LD_LIBRARY_PATH=/work/base-bin/engine /work/base-bin/bin/attn bench --shape $S --threads 2 --json > base.$pass.jsonl 2>&1
  /work/main/build/bin/attn bench --shape $S --threads 2 --json > new.$pass.jsonl 2>&1
  (cd /work/anchors-run/anchors/ort && node bench_ort.mjs --shapes $S --threads 2) > /tmp/sbs2/ort.$pass.jsonl 2>&1
done
echo done
