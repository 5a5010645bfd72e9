#!/usr/bin/env bash
# A speed proxy for the ARM boards until there is hardware: guest instructions
# executed per decoded token under `qemu-aarch64 -cpu cortex-a76` (RK3588's big
# core: NEON with dotprod and fp16, no i8mm), edgelm against llama.cpp, both
# cross-built for aarch64, one thread each, same GGUF file.
#
#   LLAMA_A64=/path/to/aarch64/llama-bench bench/aarch64_proxy.sh MODEL.gguf [...]
#
# Each side decodes N1 and then N2 tokens (2 and 6 by default) in two runs;
# per token = (count(N2) - count(N1)) / (N2 - N1), so loading, packing,
# edgelm's step-time calibration and llama-bench's warm-up cancel out.
# edgelm runs `edgelm run -n N --temp 0 --ignore-eos` (its count includes the
# sampling and detokenizing of each token), llama.cpp `llama-bench -p 0 -n N
# -r 1 -t 1` (no sampling). Counting: qemu logs every translated block and
# every block execution (-d in_asm,exec,nochain) into a FIFO read by
# bench/qemu_icount.py; a run is 50-100x slower than plain emulation.
#
# Instructions are not time: a load that misses the cache counts one, and so
# does a cheap add. The proxy compares the work the two programs ask a core
# to do; it says nothing of memory bandwidth, which bounds decode on a board.
#
# edgelm for aarch64: EDGELM_A64=/path/to/edgelm, or unset to cross-build it
# with scripts/build-aarch64-program.sh (into build-aarch64-model/; it
# installs Debian's arm64 libraries when missing).
# llama.cpp for aarch64 (outside this repo, from the node-llama-cpp bundle):
#   cmake -B a64 -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
#     -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
#     -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16 -DGGML_OPENMP=OFF \
#     -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF && cmake --build a64 --target llama-bench
#
# qemu runs the binaries with its default library prefix (/): the multiarch
# libc and its loader. Do not pass `-L /usr/aarch64-linux-gnu` here: that
# loader comes from libc6-arm64-cross, whose version can differ from
# libc6:arm64's, and the mismatched pair spins forever in pthread_create.
# Env: N1 (2), N2 (6), CPU (cortex-a76), OUT (build/bench/aarch64).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
N1="${N1:-2}"; N2="${N2:-6}"; CPU="${CPU:-cortex-a76}"; OUT="${OUT:-build/bench/aarch64}"
LLAMA_A64="${LLAMA_A64:?set LLAMA_A64 to an aarch64 build of llama-bench}"
[[ $# -ge 1 ]] || { echo "usage: $0 MODEL.gguf [...]" >&2; exit 1; }
((N2 > N1 && N1 >= 1)) || { echo "N2 must be greater than N1 >= 1" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

EDGELM_A64="${EDGELM_A64:-$(bash scripts/build-aarch64-program.sh)}"

# count LABEL CMD... -> "instructions executions" of one run under qemu
count() {
  local label="$1" fifo="$OUT/$1.fifo"
  shift
  rm -f "$fifo"; mkfifo "$fifo"
  python3 "$ROOT/bench/qemu_icount.py" "$fifo" > "$OUT/$label.count" &
  local reader=$!
  if ! qemu-aarch64 -cpu "$CPU" -d in_asm,exec,nochain -D "$fifo" "$@" > "$OUT/$label.out" 2>&1; then
    wait "$reader" || true
    rm -f "$fifo"
    echo "failed: qemu-aarch64 -cpu $CPU $*" >&2
    tail -5 "$OUT/$label.out" >&2
    return 1
  fi
  wait "$reader"
  rm -f "$fifo"
}
edgelm_run() { count "$1" "$EDGELM_A64" run -m "$2" --threads 1 --slots 1 --ctx 256 -p Hello -n "$3" \
  --temp 0 --ignore-eos --memory-budget 4GiB; }
llama_run() { count "$1" "$LLAMA_A64" -m "$2" -p 0 -n "$3" -r 1 -t 1; }
per_token() { awk -v a="$(cut -d' ' -f1 "$OUT/$1.count")" -v b="$(cut -d' ' -f1 "$OUT/$2.count")" \
  -v n=$((N2 - N1)) 'BEGIN { printf "%.2f", (b - a) / n / 1e6 }'; }

echo "qemu: $(qemu-aarch64 --version | head -1), -cpu $CPU; tokens $N1 and $N2; instructions per decoded token, millions"
printf '%-28s %10s %10s %8s\n' model edgelm llama.cpp ratio
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for n in "$N1" "$N2"; do
    edgelm_run "e-$name-$n" "$model" "$n" &
    e=$!
    llama_run "l-$name-$n" "$model" "$n"
    wait "$e"
  done
  e=$(per_token "e-$name-$N1" "e-$name-$N2")
  l=$(per_token "l-$name-$N1" "l-$name-$N2")
  printf '%-28s %10s %10s %7.2fx\n' "$name" "$e" "$l" "$(awk -v e="$e" -v l="$l" 'BEGIN { print l / e }')"
done
echo "ratio: llama.cpp's instructions per token over edgelm's (above 1: edgelm asks the core for less work)"
