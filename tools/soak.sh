#!/usr/bin/env bash
# Soak the engine: many calls across random shapes and thread counts, then
# the throughput drift and the memory after warm-up and at the end.
#   tools/soak.sh                        100,000 calls on small shapes
#   tools/soak.sh --seconds 20           a short run (CI)
#   ATTN_BUILD=build-asan tools/soak.sh  another build directory
# Any other flag goes to `attn soak` (see `attn soak --help`); exits non-zero
# when memory grows past --max-growth (1%) or an output goes wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${ATTN_BUILD:-build}/bin/attn"
if [ ! -x "$bin" ]; then
  echo "soak: $bin not found: build first (tools/setup.sh test)" >&2
  exit 2
fi
if [ $# -eq 0 ]; then
  set -- --iterations 100000
fi
exec "$bin" soak "$@"
