#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, ASan + UBSan, build-fuzz/) and runs
# all at once for a bounded time from their seed corpora; fails on any
# finding.
#   tests/fuzz/run.sh [SECONDS] [TARGET...]     (default 60, all)
# New inputs go to build-fuzz/corpus/<target>/ (not the repository); a
# finding is written to build-fuzz/findings/ and must become a regression:
# copy it to tests/fuzz/regressions/, fix the code, and fuzz_regression_test
# then checks it is refused cleanly (see tests/fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] &&
  targets=(fuzz_safetensors fuzz_run fuzz_graph fuzz_tokenizer fuzz_chat_template)
build="${ATTN_FUZZ_BUILD:-build-fuzz}"

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_BUILD_FUZZERS=ON \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCHMARKS=OFF -DATTN_BUILD_TOOLS=OFF \
    >/dev/null
fi
cmake --build "$build" -j"${ATTN_JOBS:-$(nproc)}" --target "${targets[@]}"

# oneDNN must share GCC's libgomp with us, never LLVM's libomp.
if ldd "$build/bin/${targets[0]}" | grep -q 'libomp\.so'; then
  echo "fuzz: ${targets[0]} links LLVM's libomp; want libgomp only" >&2
  exit 1
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export ATTN_NUM_THREADS=1
mkdir -p "$build/findings"

fuzz() {  # fuzz TARGET: runs it, its log in $build/TARGET.log
  local t=$1 work="$build/corpus/$1" dict=()
  mkdir -p "$work"
  case $t in
    fuzz_safetensors | fuzz_run) dict=(-dict=tests/fuzz/safetensors.dict) ;;
    fuzz_chat_template) dict=(-dict=tests/fuzz/jinja.dict) ;;
  esac
  "$build/bin/$t" "$work" "tests/fuzz/corpus/$t" "${dict[@]}" \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t-" 2>"$build/$t.log"
}

# All targets at once: the stage takes SECONDS, not SECONDS per target, and
# no core idles (each fuzzer is one process of one thread).
echo "fuzz: ${targets[*]} for ${seconds}s at once" >&2
pids=()
for t in "${targets[@]}"; do
  fuzz "$t" &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if ! wait "${pids[$i]}"; then
    echo "fuzz: $t found a problem; the input is in $build/findings/:" >&2
    ls "$build/findings" >&2
    tail -n 60 "$build/$t.log" >&2
    status=1
  else
    echo "fuzz: $t" >&2
    grep -E "^stat::number_of_executed_units|^Done" "$build/$t.log" >&2 || true
  fi
done
exit $status
