#!/usr/bin/env bash
# response_format end to end: edgelm serve on a noise-weight synthetic model
# (the Qwen2 vocabulary when fetched, else the built-in byte vocabulary),
# 100+ constrained answers validated by python3-jsonschema
# (tests/e2e/json_schema_client.py). Exit 77 (skip) without python3-jsonschema.
set -euo pipefail
EDGELM="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=tests/e2e/listen_port.sh
source "$ROOT/tests/e2e/listen_port.sh"
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null || { echo "SKIP: python3-jsonschema is not installed"; exit 77; }
TMP="$(mktemp -d)"
cleanup() { [[ -n "${PID:-}" ]] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
VOCAB="$ROOT/assets/vocab/ggml-vocab-qwen2.gguf"
if [[ -f "$VOCAB" ]]; then
  "$EDGELM" synth --shape tiny-qwen2 --type Q8_0 --vocab "$VOCAB" -o "$TMP/tiny.gguf" >/dev/null
else
  "$EDGELM" synth --shape tiny-llama --type Q8_0 -o "$TMP/tiny.gguf" >/dev/null
fi
# The load gates off (a busy CI machine must not turn answers into 429s):
# this test is about what the answers are.
"$EDGELM" serve -m "$TMP/tiny.gguf" --slots 4 --ctx 512 --port 0 --threads 1 --chat-template chatml \
  --max-slowdown 0 --min-stream-rate 0 --max-ttft-slowdown 0 --queue 8 > "$TMP/log" 2>&1 &
PID=$!
PORT=$(listen_port "$TMP/log" "$PID") || { cat "$TMP/log"; echo "server did not start"; exit 1; }
# Sanitizer builds (CI sets their options) run ten times slower: fewer answers.
N=100
[[ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]] && N=20
/usr/bin/python3 "$ROOT/tests/e2e/json_schema_client.py" "http://127.0.0.1:$PORT" "$N"
