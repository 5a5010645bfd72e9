#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds edgelm,
# starts `edgelm serve` on a model, shows it answering a chat request and
# refusing a burst beyond its slots, then keeps serving until Ctrl-C (which
# drains the server: running requests finish, new ones get 503).
#
# Model: $EDGELM_MODEL when set (any llama/qwen2/qwen3 GGUF), else a
# Qwen2-0.5B-shaped model with the real Qwen2 vocabulary and SYNTHETIC
# weights, written by `edgelm synth`: its words are noise, its speed and
# memory are real.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8080}"
SLOTS="${SLOTS:-2}"

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target edgelm

MODEL="${EDGELM_MODEL:-}"
if [[ -z "$MODEL" ]]; then
  MODEL=models/qwen2-0.5b-synthetic-Q4_0.gguf
  if [[ ! -f "$MODEL" ]]; then
    bash scripts/fetch-test-assets.sh
    mkdir -p models
    ./build/edgelm synth --shape qwen2-0.5b --type Q4_0 --vocab assets/vocab/ggml-vocab-qwen2.gguf -o "$MODEL"
  fi
  echo "demo: using $MODEL (synthetic weights: the words are noise; speed and memory are real)"
fi

echo "demo: server log in build/demo-server.log"
./build/edgelm serve -m "$MODEL" --slots "$SLOTS" --ctx 2048 --port "$PORT" > build/demo-server.log 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER' INT TERM
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "demo: the server did not start" >&2; exit 1; }
  sleep 0.5
done

echo
echo "== a chat request"
curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello! Who are you?"}],"max_tokens":24}'
echo; echo
echo "== a burst of $((SLOTS + 2)) streaming requests on $SLOTS slots: the extra ones get 429 at once"
for i in $(seq 1 $((SLOTS + 2))); do
  curl -s -o /dev/null -D - "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":64,"stream":true}' \
    | awk -v n="$i" 'NR==1{status=$2} tolower($1)=="retry-after:"{ra=$2} END{printf "request %s: HTTP %s%s\n", n, status, (ra ? ", Retry-After " ra : "")}' &
done
wait $(jobs -p | grep -v "^$SERVER$") 2>/dev/null || true
echo
echo "== the server keeps running at http://127.0.0.1:$PORT (metrics: /metrics, readiness: /ready); Ctrl-C to stop"
echo "== its status page, with a chat box to try the model: open http://127.0.0.1:$PORT/ in a browser"
wait $SERVER
