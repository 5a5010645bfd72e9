#!/usr/bin/env bash
# Starts edgelm on a tiny synthetic model and runs the official OpenAI Node
# client against it (tests/e2e/openai_client.mjs). Exit 77 (skip) when the
# npm package cannot be installed.
set -euo pipefail
EDGELM="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=tests/e2e/listen_port.sh
source "$ROOT/tests/e2e/listen_port.sh"
bash "$ROOT/scripts/fetch-openai-client.sh" || { echo "SKIP: the openai npm package is not available"; exit 77; }
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
TMP="$(mktemp -d)"
cleanup() { [[ -n "${PID:-}" ]] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
"$EDGELM" synth --shape tiny-llama --type Q8_0 -o "$TMP/tiny.gguf" >/dev/null
"$EDGELM" serve -m "$TMP/tiny.gguf" --slots 2 --ctx 512 --port 0 --threads 1 --chat-template chatml > "$TMP/log" 2>&1 &
PID=$!
PORT=$(listen_port "$TMP/log" "$PID") || { cat "$TMP/log"; echo "server did not start"; exit 1; }
cp "$ROOT/tests/e2e/openai_client.mjs" "$ROOT/assets/npm/openai_client.mjs"
node "$ROOT/assets/npm/openai_client.mjs" "http://127.0.0.1:$PORT/v1"
