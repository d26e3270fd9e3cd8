#!/usr/bin/env bash
# attn serve as clients use it, on the small chat folder write_chat_folder
# makes: curl; the official OpenAI client for Node (openai_client.mjs); a
# bounded load test (load.mjs: 64 clients, 2,000 requests of mixed
# lengths); two replicas behind HAProxy (tools/deploy/haproxy.cfg) under
# load, one killed with SIGKILL and restarted; SIGTERM on each server.
#
#   tests/serve/run.sh [BUILD_DIR]      (default build; needs node, npm,
#                                        curl and haproxy: tools/setup.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$(realpath "${1:-$root/build}")"
attn="$build/bin/attn"
work="$(mktemp -d)"
declare -A pid=()

cleanup() {
  for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "serve test: FAIL: $*" >&2; exit 1; }

for tool in node npm curl haproxy python3; do
  command -v "$tool" >/dev/null ||
    fail "'$tool' is not installed (tools/setup.sh test installs it)"
done

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME PORT [attn serve flags...]: a replica, waited on until healthy.
start() {
  local name=$1 port=$2; shift 2
  "$attn" serve --model "$work/model" --port "$port" --threads 1 "$@" \
    2>>"$work/$name.log" &
  pid[$name]=$!
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 "${pid[$name]}" 2>/dev/null || break
    sleep 0.05
  done
  cat "$work/$name.log" >&2
  fail "$name did not become healthy on port $port"
}

# stop NAME: SIGTERM, which must end the server with exit 0.
stop() {
  local name=$1 status=0
  kill -TERM "${pid[$name]}"
  wait "${pid[$name]}" || status=$?
  unset "pid[$name]"
  [ "$status" -eq 0 ] || fail "$name exited $status after SIGTERM"
}

"$build/bin/write_chat_folder" "$work/model"
(cd "$here" && npm ci --silent --no-audit --no-fund >/dev/null)
key=serve-test-key

# --- one server: curl, the OpenAI client, the load test ----------------
port=$(free_port)
start main "$port" --parallel 8 --max-queue 64 --api-key "$key"
url="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer $key" -H "Content-Type: application/json")

reply=$(curl -sf "${auth[@]}" "$url/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0}')
echo "$reply" | grep -q '"finish_reason":"length"' || fail "chat: $reply"
echo "$reply" | grep -q '"completion_tokens":5' || fail "chat usage: $reply"
stream=$(curl -sfN "${auth[@]}" "$url/v1/completions" \
  -d '{"prompt": "Hi", "max_tokens": 4, "stream": true, "n": 2, "temperature": 0}')
[ "$(echo "$stream" | grep -c '"finish_reason":"length"')" -eq 2 ] \
  || fail "stream of n=2: $stream"
echo "$stream" | tail -2 | grep -q '^data: \[DONE\]$' || fail "no [DONE]: $stream"
code=$(curl -s -o "$work/body" -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] && grep -q '"invalid_api_key"' "$work/body" \
  || fail "no key: $code $(cat "$work/body")"
code=$(curl -s -o "$work/body" -w '%{http_code}' "${auth[@]}" \
  "$url/v1/completions" -d '{"prompt": "x", "max_tokens": 0}')
[ "$code" = 400 ] && grep -q '"param":"max_tokens"' "$work/body" \
  || fail "max_tokens 0: $code $(cat "$work/body")"
echo "ok   curl: chat, a stream of n=2, 401 and 400 in OpenAI's shape"

"$attn" generate --model "$work/model" --prompt "Once upon" \
  --max-new-tokens 12 >"$work/expected.txt"
node "$here/openai_client.mjs" "$url/v1" "$key" "$work/expected.txt"

node "$here/load.mjs" --url "$url" --key "$key" --clients 64 --requests 2000 \
  | tee "$work/load.json"
echo "ok   load: 64 clients, 2000 requests, every one answered"
curl -sf "${auth[@]}" "$url/metrics" | grep -q '^attn_running_sequences 0$' \
  || fail "sequences left running after the load"
stop main
echo "ok   SIGTERM: exit 0"

# --- two replicas behind HAProxy, one killed under load ------------------
port_a=$(free_port); port_b=$(free_port); port_lb=$(free_port)
start a "$port_a" --parallel 4 --max-queue 32
start b "$port_b" --parallel 4 --max-queue 32
ATTN_LB_BIND="127.0.0.1:$port_lb" ATTN_REPLICA_A="127.0.0.1:$port_a" \
  ATTN_REPLICA_B="127.0.0.1:$port_b" \
  haproxy -f "$root/tools/deploy/haproxy.cfg" -db 2>"$work/haproxy.log" &
pid[haproxy]=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port_lb/health" >/dev/null && break
  sleep 0.05
done
# Requests running or queued on the killed replica may be lost: at most
# its --parallel + --max-queue.
node "$here/load.mjs" --url "http://127.0.0.1:$port_lb" --clients 32 \
  --requests 2000 --seed 2 --tolerate 36 >"$work/lb.json" &
load=$!
sleep 1
kill -9 "${pid[a]}"
wait "${pid[a]}" 2>/dev/null || true
unset "pid[a]"
start a "$port_a" --parallel 4 --max-queue 32
# The restarted replica rejoins: it answers requests the balancer sends.
rejoined=0
for _ in $(seq 100); do
  if curl -sf "http://127.0.0.1:$port_a/metrics" \
      | grep -q 'attn_requests_total{route="/v1/completions",status="200"}'; then
    rejoined=1
    break
  fi
  sleep 0.1
done
wait "$load" || { cat "$work/lb.json"; fail "load through HAProxy"; }
cat "$work/lb.json"
[ "$rejoined" -eq 1 ] || fail "the restarted replica got no requests"
echo "ok   HAProxy: replica killed under load, the rest served, it rejoined"
stop a
stop b
kill "${pid[haproxy]}"
unset "pid[haproxy]"
echo "serve test: all passed"
