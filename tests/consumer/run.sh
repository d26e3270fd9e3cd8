#!/usr/bin/env bash
# Installs attn from a build tree into a temporary prefix, then builds the
# consumer programs (mha_c.c, mha_cpp.cc, lm_c.c) against that install twice,
# through CMake's find_package(attn) and through pkg-config, and runs each on
# a golden file: lm_c must generate a golden language model's greedy tokens.
# Also checks that libattn exports only the public API and that the
# installed `attn` command runs.
#   tests/consumer/run.sh BUILD_DIR [GOLDEN.safetensors [GOLDEN_LM_DIR]]
# ctest runs it as the `consumer` test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
golden=${2:-$here/../golden/mha_book.safetensors}
lm=${3:-$here/../golden/lm/hf_gpt2}
work=$(mktemp -d "${TMPDIR:-/tmp}/attn-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

# The README's "Using attn as a library" shows these very programs.
readme=$here/../../README.md
for src in mha_c.c mha_cpp.cc lm_c.c; do
  if [[ "$(cat "$readme")" != *"$(cat "$here/$src")"* ]]; then
    echo "README.md does not show tests/consumer/$src verbatim: copy it in" >&2
    exit 1
  fi
done

echo "== install into $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null

lib=$(find "$prefix" -name 'libattn.so*' -type f | head -n1)
if [ -n "$lib" ]; then
  echo "== exported symbols of $(basename "$lib")"
  # Public API only: the C functions attn_* and the C++ namespace attn,
  # without the classes' internals (their Impl and Plan).
  bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt |
        grep -v -E '^(attn_[a-z0-9_]+|attn::.*)$' || true)
  internals=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt |
              grep -E '::(Impl|Plan)\b' || true)
  bad=$(printf '%s\n%s' "$bad" "$internals" | sed '/^$/d')
  if [ -n "$bad" ]; then
    echo "libattn exports symbols outside the public API:" >&2
    echo "$bad" | head -n 20 >&2
    exit 1
  fi
  echo "$(nm -D --defined-only "$lib" | grep -c ' attn_') C functions," \
       "$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt |
          grep -c '^attn::') C++ symbols, nothing else"
fi

if [ -x "$build/bin/attn" ]; then  # a build with ATTN_BUILD_TOOLS
  echo "== the installed attn command"
  # Its RPATH finds the libattn installed beside it, without LD_LIBRARY_PATH.
  version=$(env -u LD_LIBRARY_PATH "$prefix/bin/attn" --version)
  echo "$version"
  pc=$(find "$prefix" -name attn.pc | head -n1)
  [[ "$version" == "attn $(sed -n 's/^Version: //p' "$pc")" ]]
fi

# Runs lm_c ($1) on the golden model's first prompt; its output must be the
# golden greedy tokens.
check_lm() {
  local ids want got len print_ids=$work/cmake-build/print_ids
  ids=$("$print_ids" "$lm/io.safetensors" input_ids | head -n1)
  if len=$("$print_ids" "$lm/io.safetensors" lengths 2>/dev/null); then
    ids=$(cut -d' ' -f1-"${len%% *}" <<<"$ids")  # without its padding
  fi
  want=$("$print_ids" "$lm/io.safetensors" tokens | head -n1)
  got=$("$@" "$lm/model.safetensors" "$(wc -w <<<"$want")" $ids)
  if [[ "$got" != "$want" ]]; then
    echo "lm_c generated '$got', want the golden '$want'" >&2
    exit 1
  fi
  echo "C: generated the golden greedy tokens: $got"
}

echo "== CMake find_package(attn)"
cmake -S "$here" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/mha_c" "$golden"
"$work/cmake-build/mha_cpp" "$golden"
check_lm "$work/cmake-build/lm_c"

echo "== pkg-config"
export PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name attn.pc | head -n1)")"
pkg-config --exists --print-errors attn
libdir=$(pkg-config --variable=libdir attn)
# As the README says: the rpath lets the program find libattn in a prefix
# the dynamic loader does not search.
cc -std=c99 -Wall -Wextra -Werror -o "$work/mha_c" "$here/mha_c.c" \
  $(pkg-config --cflags attn) $(pkg-config --libs attn) -lm \
  -Wl,-rpath,"$libdir"
cc -std=c99 -Wall -Wextra -Werror -o "$work/lm_c" "$here/lm_c.c" \
  $(pkg-config --cflags attn) $(pkg-config --libs attn) -Wl,-rpath,"$libdir"
c++ -std=c++17 -Wall -Wextra -Werror -o "$work/mha_cpp" "$here/mha_cpp.cc" \
  $(pkg-config --cflags attn) $(pkg-config --libs attn) -pthread \
  -Wl,-rpath,"$libdir"
env -u LD_LIBRARY_PATH "$work/mha_c" "$golden"
env -u LD_LIBRARY_PATH "$work/mha_cpp" "$golden"
check_lm env -u LD_LIBRARY_PATH "$work/lm_c"
echo "consumer: OK (version $(pkg-config --modversion attn))"
