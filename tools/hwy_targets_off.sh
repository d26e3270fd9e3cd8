#!/usr/bin/env bash
# Prints, for HWY_DISABLED_TARGETS, Highway's x86 targets this CPU does not
# dispatch to: SSSE3 (1 << 12) and SSE4 (1 << 11) always, and AVX2 (1 << 9)
# where AVX-512 runs, else AVX3 and AVX3_DL (1 << 8, 1 << 7). Sanitized and
# fuzzing builds compile only what runs here: the plain build's tests cover
# every target.
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
avx512=1
for f in avx512f avx512vl avx512dq avx512bw; do
  [[ " $flags " == *" $f "* ]] || avx512=0
done
if [ "$avx512" -eq 1 ]; then
  echo $(((1 << 12) | (1 << 11) | (1 << 9)))
else
  echo $(((1 << 12) | (1 << 11) | (1 << 8) | (1 << 7)))
fi
