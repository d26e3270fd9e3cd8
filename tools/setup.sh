#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine: installs what is missing,
# builds, and runs the main job or the tests.
#   tools/setup.sh bench       deps + release build + `attn bench` on the grid
#   tools/setup.sh test        deps + release build + every test (ctest, then
#                              tests/serve/run.sh: attn serve with curl, the
#                              OpenAI client, load and HAProxy)
#   tools/setup.sh test-asan   deps + ASan/UBSan build + every test
#   tools/setup.sh fuzz [S]    deps + clang + the libFuzzer targets, S s at once (60)
#   tools/setup.sh deps        only install the Debian packages
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libdnnl-dev ocl-icd-opencl-dev
          libhwy-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
          nlohmann-json3-dev libonig-dev libutf8proc-dev libcpp-httplib-dev)

install_deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build() {  # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -DATTN_WARNINGS_AS_ERRORS=ON "$@" >/dev/null
  # One job more than cores: the many test executables' links are serial
  # and wait on the disk, leaving a core idle.
  cmake --build "$dir" -j"$(($(nproc) + 1))"
}

# Highway's x86 targets this CPU does not dispatch to, as a number for
# HWY_DISABLED_TARGETS: SSSE3 (1 << 12) and SSE4 (1 << 11) always, and
# AVX2 (1 << 9) where AVX-512 runs, else AVX3 and AVX3_DL (1 << 8, 1 << 7).
sanitized_targets_off() {
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  local avx512=1
  for f in avx512f avx512vl avx512dq avx512bw; do
    [[ " $flags " == *" $f "* ]] || avx512=0
  done
  if [ "$avx512" -eq 1 ]; then
    echo $(((1 << 12) | (1 << 11) | (1 << 9)))
  else
    echo $(((1 << 12) | (1 << 11) | (1 << 8) | (1 << 7)))
  fi
}

case "${1:-}" in
  deps) install_deps ;;
  test)
    # The server's client-side tests: Node.js (Debian's, unless one is
    # installed), curl and HAProxy.
    PACKAGES+=(curl haproxy)
    command -v npm >/dev/null || PACKAGES+=(nodejs npm)
    install_deps
    build build
    ctest --test-dir build --output-on-failure -j"$(nproc)"
    tests/serve/run.sh build ;;
  fuzz)
    PACKAGES+=(clang-14 libclang-rt-14-dev libomp-14-dev)
    install_deps
    tests/fuzz/run.sh "${2:-60}" ;;
  bench)
    install_deps
    build build
    build/bin/attn bench ;;
  test-asan)
    install_deps
    # -O1 and line tables: all a sanitizer's reports need, and half the
    # compile time of -O2 -g (this build was most of CI's time). Highway
    # compiles the kernels for the target this CPU dispatches to and the
    # portable baseline only: the plain build's tests run every target.
    skip_targets="-DHWY_DISABLED_TARGETS=$(sanitized_targets_off)"
    build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DATTN_SANITIZE=address;undefined" \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG $skip_targets" \
      -DATTN_BUILD_BENCHMARKS=OFF
    # Not the slow repeats as on an AVX2-only CPU (oneDNN's ISA cap and
    # the determinism twins: the kernels' tests cover every Highway target
    # here already) nor the installed package: CI's 30 minutes.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -LE slow ;;
  *)
    echo "usage: tools/setup.sh bench|test|test-asan|fuzz [SECONDS]|deps" >&2
    exit 2 ;;
esac
