#!/usr/bin/env bash
# Cross-compiles the kernels and their tests for aarch64 (the edge boards'
# architecture) and runs them under qemu's user-mode emulator, so the NEON
# kernels are checked against the scalar reference on every CI run even
# without an ARM machine. Here only src/kernels (and the dtype table) is
# built, with GoogleTest; at the end, scripts/test-aarch64-model.sh builds the
# whole program for aarch64 (with Debian's arm64 libraries) and holds its
# output on real GGUF files to llama.cpp's.
#
#   bash scripts/test-aarch64.sh          # builds in build-aarch64/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="$ROOT/${BUILD:-build-aarch64}"

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
[[ -d /usr/src/googletest/googletest ]] || need+=(googletest)
if ((${#need[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

GT=/usr/src/googletest/googletest
export EDGELM_CXX=aarch64-linux-gnu-g++
export EDGELM_FLAGS="-std=c++20 -O2 -g0 -Wall -Wextra -Wshadow=local -Wnon-virtual-dtor \
-Wno-missing-field-initializers -Werror -DEDGELM_ARM64=1 -I$ROOT/src -I$ROOT/tests -I$GT/include"
rm -rf "$OUT"
mkdir -p "$OUT"

# One line per object: OUT.o SRC EXTRA_FLAGS. The kernels as the CMake
# build compiles them on aarch64 (the NEON files with their target flags,
# no x86 files), the kernel tests that need nothing but the kernels, and
# GoogleTest from its Debian source package.
list="$OUT/objects.txt"
: > "$list"
for f in src/kernels/*.cpp src/core/dtype.cpp; do
  case "$f" in *_avx2.cpp | *_avxvnni.cpp | *_avx512.cpp) continue ;; esac
  extra="-DNONE"
  [[ "$f" == *_neon.cpp ]] && extra="-march=armv8.2-a+dotprod+fp16"
  [[ "$f" == *_i8mm.cpp ]] && extra="-march=armv8.2-a+dotprod+fp16+i8mm"
  echo "$OUT/$(basename "$f" .cpp).o $ROOT/$f $extra" >> "$list"
done
for f in tests/kernels/*_test.cpp; do
  # reference_data_test reads GGUF files through src/gguf (spdlog, fmt).
  [[ "$f" == *reference_data_test.cpp ]] && continue
  echo "$OUT/t_$(basename "$f" .cpp).o $ROOT/$f -DNONE" >> "$list"
done
echo "$OUT/gtest-all.o $GT/src/gtest-all.cc -I$GT" >> "$list"
echo "$OUT/gtest_main.o $GT/src/gtest_main.cc -I$GT" >> "$list"
# shellcheck disable=SC2016
xargs -P "$(nproc)" -L 1 sh -c '$EDGELM_CXX $EDGELM_FLAGS "$2" -c "$1" -o "$0"' < "$list"
# shellcheck disable=SC2046
aarch64-linux-gnu-g++ -o "$OUT/edgelm_kernels_tests" $(cut -d' ' -f1 "$list") -lpthread

# qemu's default CPU for aarch64 has the dot-product and fp16 extensions, so
# the NEON kernels run; the run fails if dispatch did not pick them.
run() {  # LOG [qemu and test args]
  local log="$1"
  shift
  if ! qemu-aarch64 "$@" > "$log" 2>&1; then
    cat "$log"
    echo "test-aarch64: kernel tests failed ($*)"
    exit 1
  fi
  grep -E '^\[  PASSED|supported ISAs|neon i8mm' "$log"
}
run "$OUT/test.log" -L /usr/aarch64-linux-gnu "$OUT/edgelm_kernels_tests"
grep -q 'supported ISAs: .*neon' "$OUT/test.log" || { echo "test-aarch64: the NEON kernels were not exercised"; exit 1; }
# qemu's default CPU also has i8mm, so the interleaved prompt kernels ran
# their smmla path; a Cortex-A76 (RK3588's big core) has dotprod and fp16
# but not i8mm, so there they run the sdot path (and must not fault).
grep -q 'neon i8mm: yes' "$OUT/test.log" || { echo "test-aarch64: the i8mm kernels were not exercised"; exit 1; }
run "$OUT/test-a76.log" -cpu cortex-a76 -L /usr/aarch64-linux-gnu "$OUT/edgelm_kernels_tests" \
  --gtest_filter='GemmDispatch.*:Interleaved.*'
grep -q 'supported ISAs: scalar neon $' "$OUT/test-a76.log" && grep -q 'neon i8mm: no' "$OUT/test-a76.log" ||
  { echo "test-aarch64: cortex-a76 did not run the NEON sdot kernels"; exit 1; }

# A core without the dot-product extension (a Raspberry Pi 4's Cortex-A72)
# must take the scalar kernels rather than fault: dispatch, the hand-checked
# cases and the round trips run there (the scalar kernels' full comparison
# is the run above and the x86 build's).
run "$OUT/test-a72.log" -cpu cortex-a72 -L /usr/aarch64-linux-gnu "$OUT/edgelm_kernels_tests" \
  --gtest_filter='GemmDispatch.*:HandChecked.*:Blocks.*:Types/RoundTrip.*:RoundTripEdge.*'
grep -q 'supported ISAs: scalar $' "$OUT/test-a72.log" || { echo "test-aarch64: NEON chosen on a core without dotprod"; exit 1; }
echo "test-aarch64: ok (NEON with i8mm on qemu max, NEON without on cortex-a76, scalar on cortex-a72)"

bash scripts/test-aarch64-model.sh
