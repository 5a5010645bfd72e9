#!/usr/bin/env bash
# The whole edgelm program cross-compiled for aarch64 and run under qemu on
# real GGUF files, its greedy text compared with llama.cpp's (the reference
# outputs in ../shared/models, see its README). scripts/test-aarch64.sh checks
# each NEON kernel against the scalar reference; this checks that the pieces
# add up on ARM: loading and repacking, the forward pass with its NEON
# kernels, attention, sampling and the tokenizer, on three cores:
#   cortex-a76 (RK3588's big core): NEON with dotprod, no i8mm;
#   max (qemu's every-extension CPU): NEON with i8mm (smmla for prompts);
#   cortex-a72 (a Raspberry Pi 4): no dotprod, the scalar kernels.
# Built by scripts/build-aarch64-program.sh, which installs the arm64 builds
# of edgelm's libraries (Debian multiarch) when missing (root, or sudo).
#
#   bash scripts/test-aarch64-model.sh      # builds in build-aarch64-model/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="$ROOT/${BUILD:-build-aarch64-model}"
MODELS="$ROOT/../shared/models"
if [[ ! -f "$MODELS/stories260K.llamacpp.json" || ! -f "$MODELS/types/greedy.json" ]]; then
  echo "test-aarch64-model: SKIPPED: ../shared/models (stories260K and types/, with llama.cpp's outputs) is absent"
  exit 0
fi

EDGELM="$(bash scripts/build-aarch64-program.sh "$OUT")"

# qemu runs the binary with its default prefix (/): the multiarch libc and
# its own loader. (`-L /usr/aarch64-linux-gnu` would pair the cross
# toolchain's loader with libc6:arm64, two versions that can differ; such a
# pair hangs in pthread_create.)
fails=0
# check CPU FILE TOKENS REFERENCE.json: edgelm's greedy text of TOKENS tokens
# must be the text of llama.cpp's first TOKENS tokens for that file (their ids
# in the reference, made text by `edgelm detokenize`; both read as UTF-8 with
# invalid bytes replaced, as `run` prints a character split by the end).
check() {
  local cpu="$1" file="$2" n="$3" ref="$4" got="$OUT/out-$cpu-$(basename "$2" .gguf).txt"
  local ids
  ids=$(python3 -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]]["tokens"][:int(sys.argv[3])])))' \
    "$ref" "$(basename "$file")" "$n")
  if ! timeout 300 qemu-aarch64 -cpu "$cpu" "$EDGELM" run -m "$MODELS/$file" -p "Once upon a time" \
    -n "$n" --temp 0 --no-echo --threads 2 --slots 1 --ctx 128 --memory-budget 512MiB \
    > "$got" 2> "$got.err" ||
    ! timeout 300 qemu-aarch64 -cpu "$cpu" "$EDGELM" detokenize -m "$MODELS/$file" -t "$ids" \
    > "$got.want" 2>> "$got.err"; then
    echo "test-aarch64-model: FAIL: edgelm on $file (-cpu $cpu) failed:"; tail -5 "$got.err"
    fails=$((fails + 1)); return
  fi
  if ! python3 - "$got" "$got.want" "$(basename "$file")" "$cpu" "$n" <<'EOF'
import sys
def text(path):
    t = open(path, "rb").read().decode("utf-8", errors="replace")
    return t[:-1] if t.endswith("\n") else t
got, want = text(sys.argv[1]), text(sys.argv[2])
# detokenize drops the first token's leading space (SentencePiece's space
# prefix, as at the start of a text); a continuation keeps it.
if got.startswith(" ") and not want.startswith(" "):
    want = " " + want
if not got or got != want:
    print(f"test-aarch64-model: FAIL: {sys.argv[3]} on {sys.argv[4]}:\n  edgelm:    {got!r}\n  llama.cpp: {want!r}")
    sys.exit(1)
print(f"  {sys.argv[4]:<10} {sys.argv[3]:<24} {sys.argv[5]:>2} tokens as llama.cpp's: {got[:36]!r}")
EOF
  then fails=$((fails + 1)); fi
}
# stories260K (a real trained model): the first 32 generated tokens must be
# llama.cpp's (its README: quantized runs part ways later).
for cpu in cortex-a76 max cortex-a72; do
  for f in stories260K.gguf stories260K-Q8_0.gguf stories260K-Q4_0.gguf; do
    check "$cpu" "$f" 32 "$MODELS/stories260K.llamacpp.json"
  done
done
# One synthetic file per tensor type (random weights, so only the first token
# is held to llama.cpp's): every type's NEON path (row kernels for the K
# formats, interleaved for Q4_0 and Q8_0) on the RK3588's core.
for f in $(python3 -c "import json, sys; print(' '.join(json.load(open(sys.argv[1]))))" "$MODELS/types/greedy.json"); do
  check cortex-a76 "types/$f" 1 "$MODELS/types/greedy.json"
done
# The runs above must have used the kernels each core calls for.
grep -q 'neon' "$OUT/out-cortex-a76-stories260K-Q4_0.txt.err" ||
  { echo "test-aarch64-model: FAIL: cortex-a76 did not run the NEON kernels"; cat "$OUT/out-cortex-a76-stories260K-Q4_0.txt.err"; fails=$((fails + 1)); }
if ((fails)); then echo "test-aarch64-model: $fails check(s) failed"; exit 1; fi
echo "test-aarch64-model: ok (edgelm for aarch64 agrees with llama.cpp on stories260K, three cores, and on every tensor type's first token)"
