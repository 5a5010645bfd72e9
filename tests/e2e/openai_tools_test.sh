#!/usr/bin/env bash
# Tool calls for the official OpenAI Node client (tests/e2e/openai_tools.mjs):
# edgelm serve on a noise-weight synthetic model (the Qwen2 vocabulary when
# fetched, else the built-in one) with Qwen2.5's own chat template, so the
# forced calls are the constraint's doing. Exit 77 (skip) without node, the
# openai npm package or the fetched templates.
set -euo pipefail
EDGELM="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=tests/e2e/listen_port.sh
source "$ROOT/tests/e2e/listen_port.sh"
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
bash "$ROOT/scripts/fetch-openai-client.sh" || { echo "SKIP: the openai npm package is not available"; exit 77; }
TEMPLATE="$ROOT/assets/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
[[ -f "$TEMPLATE" ]] || { echo "SKIP: $TEMPLATE not fetched (scripts/fetch-test-assets.sh)"; exit 77; }
TMP="$(mktemp -d)"
cleanup() { [[ -n "${PID:-}" ]] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
VOCAB="$ROOT/assets/vocab/ggml-vocab-qwen2.gguf"
if [[ -f "$VOCAB" ]]; then
  "$EDGELM" synth --shape tiny-qwen2 --type Q8_0 --vocab "$VOCAB" -o "$TMP/tiny.gguf" >/dev/null
else
  "$EDGELM" synth --shape tiny-llama --type Q8_0 -o "$TMP/tiny.gguf" >/dev/null
fi
# The load gates off (a busy machine must not turn answers into 429s).
"$EDGELM" serve -m "$TMP/tiny.gguf" --slots 2 --ctx 1024 --port 0 --threads 1 --chat-template-file "$TEMPLATE" \
  --max-slowdown 0 --min-stream-rate 0 --max-ttft-slowdown 0 > "$TMP/log" 2>&1 &
PID=$!
PORT=$(listen_port "$TMP/log" "$PID") || { cat "$TMP/log"; echo "server did not start"; exit 1; }
cp "$ROOT/tests/e2e/openai_tools.mjs" "$ROOT/assets/npm/openai_tools.mjs"
node "$ROOT/assets/npm/openai_tools.mjs" "http://127.0.0.1:$PORT/v1" || { tail -20 "$TMP/log"; exit 1; }
