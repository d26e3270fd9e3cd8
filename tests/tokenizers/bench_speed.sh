#!/usr/bin/env bash
# Tokens per second of attn (bench/tokenizer_speed) beside Hugging Face's
# tokenizers (npm binding: encode per document, and encodeBatch), one
# thread each, on English prose (the GPL-3 text), code (this repository's
# engine/ sources) and CJK (vim's Chinese and Japanese tutors), cut into
# documents of about 2 KB, for each vocabulary check_real.sh fetched.
#
#   tests/tokenizers/bench_speed.sh [BUILD_DIR]   (default build)
#
# Run check_real.sh first: it fills the cache (ATTN_TOKCHECK_CACHE).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
build="$(realpath "${1:-$root/build}")"
cache="${ATTN_TOKCHECK_CACHE:-$HOME/.cache/attn-tokcheck}"
seconds="${ATTN_BENCH_SECONDS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 - "$work" "$root" <<'PY'
import glob, json, sys
work, root = sys.argv[1:]
def docs(texts, name):
    text = "\n".join(texts)
    with open(f"{work}/{name}.jsonl", "w") as f:
        for i in range(0, len(text), 2000):
            f.write(json.dumps({"text": text[i:i + 2000]}, ensure_ascii=False) + "\n")
docs([open("/usr/share/common-licenses/GPL-3").read()], "english")
docs([open(p).read() for p in sorted(glob.glob(f"{root}/engine/*/*.cc"))][:40], "code")
docs([open(f"/usr/share/vim/vim90/tutor/tutor.{l}.utf-8").read()
      for l in ("zh_cn", "ja")], "cjk")
PY

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p')"
printf "%-8s %-8s %12s %12s %12s %8s\n" vocab text attn_tok/s hf_encode hf_batch ratio
for name in gpt2 llama3 llama2 qwen3 gemma3; do
  dir="$cache/models/$name"
  [ -f "$dir/tokenizer.json" ] || continue
  for text in english code cjk; do
    ours=$(ATTN_NUM_THREADS=1 "$build/bin/tokenizer_speed" "$dir" "$work/$text.jsonl" "$seconds")
    theirs=$(NODE_PATH="$cache/node/node_modules" RAYON_NUM_THREADS=1 \
      node "$here/hf_speed.js" "$dir/tokenizer.json" "$work/$text.jsonl" "$seconds")
    python3 - "$name" "$text" "$ours" "$theirs" <<'PY'
import json, sys
name, text, ours, theirs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
a = ours["tokens_per_s"]; e = theirs["encode"]["tokens_per_s"]; b = theirs["encodeBatch"]["tokens_per_s"]
print(f"{name:8} {text:8} {a:12.0f} {e:12.0f} {b:12.0f} {a / max(e, b):7.2f}x")
PY
  done
done
