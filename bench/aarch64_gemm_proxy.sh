#!/usr/bin/env bash
# Instructions per weight of one NEON gemm call, counted under
# `qemu-aarch64 -cpu cortex-a76` (the speed proxy for the ARM boards, as
# bench/aarch64_proxy.sh is for a whole decoded token, but per kernel and in
# seconds): 11 calls minus 1 call of a 64 x 1536 product, divided by 10 and by
# the weights. NTOK tokens per call (1: decode; 8: a prompt tile).
#
#   bash bench/aarch64_gemm_proxy.sh [TYPE ...]     # default: every quant type
#   NTOK=8 bash bench/aarch64_gemm_proxy.sh Q4_K
#   bash bench/aarch64_gemm_proxy.sh ATTN           # a decode step's attention block
#
# ATTN counts one block of decode attention (6 query rows x 64 F16 cache
# rows of 128: scores, max, exp, weighted values) and gives instructions per
# (query row, cache row) pair instead of per weight.
#
# The kernels are compiled at -O3, as the Release build compiles them, into
# build/bench/gemm-a64/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${OUT:-build/bench/gemm-a64}"
NTOK="${NTOK:-1}"
CPU="${CPU:-cortex-a76}"
types=("$@")
((${#types[@]})) || types=(Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K)

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
if ((${#need[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
list="$OUT/objects.txt"
: > "$list"
for f in src/kernels/*.cpp src/core/dtype.cpp bench/aarch64_gemm_count.cpp; do
  case "$f" in *_avx2.cpp | *_avxvnni.cpp | *_avx512.cpp) continue ;; esac
  extra="-DNONE"  # xargs -L joins a line that ends in a blank to the next
  [[ "$f" == *_neon.cpp ]] && extra="-march=armv8.2-a+dotprod+fp16"
  [[ "$f" == *_i8mm.cpp ]] && extra="-march=armv8.2-a+dotprod+fp16+i8mm"
  echo "$OUT/$(basename "$f" .cpp).o $ROOT/$f $extra" >> "$list"
done
export FLAGS="-std=c++20 -O3 -DNDEBUG -DEDGELM_ARM64=1 -I$ROOT/src"
# shellcheck disable=SC2016
xargs -P "$(nproc)" -L 1 sh -c 'aarch64-linux-gnu-g++ $FLAGS "$2" -c "$1" -o "$0"' < "$list"
# shellcheck disable=SC2046
aarch64-linux-gnu-g++ -static -o "$OUT/gemm_count" $(cut -d' ' -f1 "$list") -lpthread

count() {  # CALLS TYPE -> instructions
  local log="$OUT/qemu.log"
  qemu-aarch64 -cpu "$CPU" -d in_asm,exec,nochain -D "$log" "$OUT/gemm_count" "$2" "$1" "$NTOK" > /dev/null
  python3 "$ROOT/bench/qemu_icount.py" "$log" | cut -d' ' -f1
  rm -f "$log"
}
echo "qemu: $(qemu-aarch64 --version | head -1), -cpu $CPU; 64 x 1536, $NTOK token(s) per call"
printf '%-6s %14s %18s\n' type instr/call "instr/weight/token"
for t in "${types[@]}"; do
  a=$(count 1 "$t")
  b=$(count 11 "$t")
  if [[ "$t" == ATTN ]]; then
    awk -v a="$a" -v b="$b" 'BEGIN { c = (b - a) / 10; printf "%-6s %14d %18.3f per (query row, cache row)\n", "ATTN", c, c / (6 * 64) }'
    continue
  fi
  awk -v t="$t" -v a="$a" -v b="$b" -v k="$NTOK" \
    'BEGIN { c = (b - a) / 10; printf "%-6s %14d %18.3f\n", t, c, c / (64 * 1536) / k }'
done
