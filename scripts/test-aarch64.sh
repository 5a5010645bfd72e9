#!/usr/bin/env bash
# Cross-compiles the kernels and their tests for aarch64 (the edge boards'
# architecture) and runs them under qemu's user-mode emulator, so the NEON
# kernels are checked against the scalar reference on every CI run even
# without an ARM machine. Only src/kernels (and the dtype table) is built:
# the rest of edgelm would need arm64 builds of every library, and has no
# architecture-specific code.
#
#   bash scripts/test-aarch64.sh          # builds in build-aarch64/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${BUILD:-build-aarch64}"

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
[[ -d /usr/src/googletest/googletest ]] || need+=(googletest)
if ((${#need[@]})); then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

CXX=aarch64-linux-gnu-g++
GT=/usr/src/googletest/googletest
FLAGS=(-std=c++20 -O2 -g0 -Wall -Wextra -Wshadow=local -Wnon-virtual-dtor -Wno-missing-field-initializers -Werror
       -DEDGELM_ARM64=1 -I"$ROOT/src" -I"$ROOT/tests" -I"$GT/include")
mkdir -p "$OUT"

# Sources: the kernels as the CMake build compiles them on aarch64 (the NEON
# files with their target flags, no x86 files), the kernel tests that need
# nothing but the kernels, and GoogleTest from its Debian source package.
jobs=()
compile() {  # OUT.o SRC [extra flags]
  local o="$OUT/$1" src="$2"
  shift 2
  if [[ ! -f "$o" || "$src" -nt "$o" || -n "$(find "$ROOT/src" "$ROOT/tests/kernels" -name '*.h' -newer "$o" -print -quit)" ]]; then
    "$CXX" "${FLAGS[@]}" "$@" -c "$src" -o "$o" &
    jobs+=($!)
  fi
}
objs=()
for f in src/kernels/*.cpp src/core/dtype.cpp; do
  case "$f" in *_avx2.cpp|*_avx512.cpp) continue ;; esac
  extra=()
  [[ "$f" == *_neon.cpp ]] && extra=(-march=armv8.2-a+dotprod+fp16)
  o="$(basename "$f" .cpp).o"
  compile "$o" "$ROOT/$f" "${extra[@]}"
  objs+=("$OUT/$o")
done
for f in tests/kernels/*_test.cpp; do
  # reference_data_test reads GGUF files through src/gguf (spdlog, fmt).
  [[ "$f" == *reference_data_test.cpp ]] && continue
  o="t_$(basename "$f" .cpp).o"
  compile "$o" "$ROOT/$f"
  objs+=("$OUT/$o")
done
compile gtest-all.o "$GT/src/gtest-all.cc" -I"$GT" -w
compile gtest_main.o "$GT/src/gtest_main.cc" -I"$GT" -w
objs+=("$OUT/gtest-all.o" "$OUT/gtest_main.o")
for j in "${jobs[@]}"; do
  wait "$j"
done
"$CXX" -o "$OUT/edgelm_kernels_tests" "${objs[@]}" -lpthread

# qemu's default CPU for aarch64 has the dot-product and fp16 extensions, so
# the NEON kernels run; the test run fails if dispatch did not pick them.
log="$OUT/test.log"
qemu-aarch64 -L /usr/aarch64-linux-gnu "$OUT/edgelm_kernels_tests" 2>&1 | tee "$log" | grep -E '^\[  (PASSED|FAILED)|supported ISAs|FAILED' || true
grep -q '^\[  PASSED  \]' "$log" && ! grep -q '^\[  FAILED  \]' "$log" || { echo "test-aarch64: kernel tests failed"; exit 1; }
grep -q 'supported ISAs: .*neon' "$log" || { echo "test-aarch64: the NEON kernels were not exercised"; exit 1; }

# A core without the dot-product extension (a Raspberry Pi 4's Cortex-A72)
# must fall back to the scalar kernels rather than fault.
qemu-aarch64 -cpu cortex-a72 -L /usr/aarch64-linux-gnu "$OUT/edgelm_kernels_tests" \
  --gtest_filter='GemmDispatch.*:HandChecked.*' > "$OUT/test-a72.log" 2>&1 || { cat "$OUT/test-a72.log"; exit 1; }
grep -q 'supported ISAs: scalar $' "$OUT/test-a72.log" || { echo "test-aarch64: NEON chosen on a core without dotprod"; exit 1; }
echo "test-aarch64: ok (NEON on armv8.2+dotprod+fp16, scalar on cortex-a72)"
