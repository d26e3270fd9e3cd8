#!/bin/bash
cd "$(git rev-parse --show-toplevel)"; R=${R:-bench/results/issue13}
for round in 1 2 3; do
  echo "round $round $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log3.txt
  build/bin/attention_bench --benchmark_filter=core_gqa/llama --benchmark_min_time=1 2>/dev/null | grep "^core" | sed "s/^/round $round /" >> $R/core_llama.txt
  node bench/ort_gqa/bench_ort_gqa.mjs --shapes llama-2k --variants ort_gqa_core --threads 1,2 2>/dev/null | sed "s/^{/{\"round\":$round,/" >> $R/ort_core3.jsonl
done
echo "end $(date -u +%T)" >> $R/log3.txt
