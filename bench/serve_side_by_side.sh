#!/usr/bin/env bash
# attn serve beside llama.cpp's llama-server, driven by the same client
# (tests/serve/load.mjs --fixed: one prompt, greedy, streamed), the servers
# taking turns: for each round, each type and each count of concurrent
# streams, attn then llama-server. One JSON line per run on stdout:
# generated tokens/s, p50/p99 time to first token and per output token.
#
#   bench/serve_side_by_side.sh ATTN_FOLDER GGUF_PREFIX LLAMA_SERVER \
#       [TYPES=f32,q8_0,q4_0] [STREAMS=1,8,32] [ROUNDS=2]
#
# ATTN_FOLDER: a model's folder with its tokenizer (attn serve --model; a
# type other than f32 quantizes at load); GGUF_PREFIX: the same weights as
# GGUF files GGUF_PREFIX-TYPE.gguf (llama-quantize --pure for q8_0 and
# q4_0); LLAMA_SERVER: llama.cpp's build/bin/llama-server, built outside
# this repository. Both servers get --parallel 8, 2 threads and 1024 tokens
# per sequence. THREADS, REQUESTS_PER_STREAM (default 4), PROMPT_WORDS (100)
# and MAX_TOKENS (64) override the defaults. Run nothing else meanwhile.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
folder=$1 gguf=$2 llama_server=$3
types=${4:-f32,q8_0,q4_0} streams=${5:-1,8,32} rounds=${6:-2}
threads=${THREADS:-2}
per_stream=${REQUESTS_PER_STREAM:-4}
attn="$here/../build/bin/attn"
load="$here/../tests/serve/load.mjs"
port=18765
server=

stop_server() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true  # llama-server exits 1 on SIGTERM
  fi
  server=
}
trap stop_server EXIT

wait_ready() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    sleep 0.2
  done
  echo "serve_side_by_side: the server did not become ready" >&2
  exit 1
}

cpu="$(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu |
  sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p'))"

run() {  # run ENGINE TYPE: one pass over the stream counts
  local engine=$1 type=$2
  if [ "$engine" = attn ]; then
    local dtype=()
    [ "$type" = f32 ] || dtype=(--dtype "$type")
    "$attn" serve --model "$folder" --port "$port" --threads "$threads" \
      --parallel 8 --ctx-size 1024 "${dtype[@]}" 2>/dev/null &
  else
    "$llama_server" -m "$gguf-$type.gguf" --port "$port" -t "$threads" \
      --parallel 8 -c 8192 --no-webui >/dev/null 2>&1 &
  fi
  server=$!
  wait_ready
  for s in ${streams//,/ }; do
    local report
    report=$(node "$load" --url "http://127.0.0.1:$port" --fixed \
      --clients "$s" --requests $((s * per_stream)) \
      --prompt-words "${PROMPT_WORDS:-100}" --max-tokens "${MAX_TOKENS:-64}" \
      --deadline 600 --tolerate 1000000)
    echo "{\"engine\": \"$engine\", \"type\": \"$type\", \"streams\": $s," \
         "\"threads\": $threads, \"cpu\": \"$cpu\", \"report\": $report}"
  done
  stop_server
}

for round in $(seq "$rounds"); do
  for type in ${types//,/ }; do
    run attn "$type"
    run llama-server "$type"
  done
done
