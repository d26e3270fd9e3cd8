#!/bin/bash
# Interleaved passes: attn and ORT (bench/ort_gqa) alternating, thread order alternating.
cd "$(git rev-parse --show-toplevel)"
# The FMA peak probe: g++ -O2 -mavx2 -mfma -pthread /work/shared/anchors/peak/fma_peak_avx2.cpp -o /tmp/b1_fma_peak
FMA=${FMA:-/tmp/b1_fma_peak}
A=build/bin/attn
R=${R:-bench/results/issue13}
ORT="node bench/ort_gqa/bench_ort_gqa.mjs"
$FMA 1 >> $R/peak.txt; $FMA 2 >> $R/peak.txt
for pass in 4 5 6; do
  if [ $((pass % 2)) = 1 ]; then T=1,2; else T=2,1; fi
  echo "pass $pass threads $T $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log.txt
  $A bench --shape llama-2k --threads $T --min-time 3 --json 2>/dev/null | sed "s/^{/{\"pass\":$pass,/" >> $R/attn_prefill.jsonl
  $ORT --shapes llama-2k --variants ort_gqa,ort_gqa_core --threads $T 2>>$R/ort.err | sed "s/^{/{\"pass\":$pass,/" >> $R/ort.jsonl
  $A bench --shape 1,2048,2048,2048,32 --kv-heads 8 --threads $T --min-time 3 --json 2>/dev/null | sed "s/^{/{\"pass\":$pass,/" >> $R/attn_norope.jsonl
  for kv in 8 32; do
    $A bench --decode --context 16,4096 --batch 1 --dims 2048,2048,32 --kv-heads $kv --rope-theta 500000 \
      --no-recompute --threads $T --min-time 2 --json 2>/dev/null | sed "s/^{/{\"pass\":$pass,/" >> $R/decode.jsonl
  done
  $ORT --shapes decode-4k,decode-4k-mha --variants ort_gqa,ort_gqa_core --modes shared,copy --threads $T 2>>$R/ort.err | sed "s/^{/{\"pass\":$pass,/" >> $R/ort.jsonl
  $A bench --shape 1,8192,512,512,8 --threads $T --min-time 2 --json 2>/dev/null | sed "s/^{/{\"pass\":$pass,/" >> $R/window.jsonl
  $A bench --shape 1,8192,512,512,8 --sliding-window 512 --threads $T --min-time 2 --json 2>/dev/null | sed "s/^{/{\"pass\":$pass,/" >> $R/window.jsonl
  build/bin/rope_bench --benchmark_min_time=1 2>/dev/null | grep "^rope" | sed "s/^/pass $pass /" >> $R/rope.txt
  build/bin/attention_bench --benchmark_filter=core_window --benchmark_min_time=1 2>/dev/null | grep "^core" | sed "s/^/pass $pass /" >> $R/core_window.txt
done
$FMA 1 >> $R/peak.txt; $FMA 2 >> $R/peak.txt
echo "end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log.txt
