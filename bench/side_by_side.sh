#!/bin/sh
# One side-by-side measurement run for bench/README.md: the engine (f32 and
# bf16), ONNX Runtime 1.30 and PyTorch 1.13 on the same grid, one after the
# other on this machine, then the table and the plot.
#   bench/side_by_side.sh BUILD_DIR ANCHORS_DIR OUT_DIR
# ANCHORS_DIR is a set-up folder of the peer runners (see bench/README.md: npm ci
# and make_models.py done). Takes about 10 minutes on 2 cores.
set -eu
build=$(realpath "$1") anchors=$(realpath "$2") out=$(realpath -m "$3")
mkdir -p "$out"
grid=seed,gpt2-128,gpt2-1k,gpt2-1k-b4,long-4k
# glibc returning freed memory to the OS costs PyTorch 5-12x on this VM
# (../peers/NOTES.md); the engine gets the same environment, to be fair.
export MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=4000000000

uptime >"$out/uptime.txt"
"$build/bin/attn" bench --shape $grid --threads 1,2 --json >"$out/attn.jsonl"
(cd "$anchors/ort" && node bench_ort.mjs --shapes $grid --threads 1,2 \
  >"$out/ort.jsonl")
(cd "$anchors/torch" && env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
  /usr/bin/python3 bench_torch.py --shapes $grid --threads 1,2 \
  >"$out/torch.jsonl")
"$build/bin/attn" bench --shape $grid --threads 1,2 --dtype bf16 --json \
  >"$out/attn_bf16.jsonl"
uptime >>"$out/uptime.txt"
/usr/bin/python3 "$(dirname "$0")/results.py" \
  --attn "$out/attn.jsonl" "$out/attn_bf16.jsonl" \
  --torch "$out/torch.jsonl" --ort "$out/ort.jsonl" \
  --plot "$out/results.png" | tee "$out/table.md"
