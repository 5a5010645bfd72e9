#!/usr/bin/env bash
# The status page (GET /) in a real browser: Debian's chromium, headless,
# loads it from a live `edgelm serve` on the tiny model and the test checks
# the DOM the page's JavaScript rendered:
#   1. without an API key: the plan's total equals the sum of /metrics'
#      edgelm_memory_reserved_bytes, the slot count is the server's, both
#      slots are busy with the test's streams, and the refusal the test
#      provoked (a third stream on two slots: 429, code `slots`) is shown by
#      its reason; then a screenshot (build/status-page/status.png);
#   2. with --api-key: the page without the key shows only health; with the
#      key (given as #key=..., which the page moves into sessionStorage) it
#      shows the status, and its chat box streams an answer (#say=...).
#
#   tests/e2e/status_page_test.sh [path/to/edgelm] [build dir]  (CTest: e2e.status_page)
#   STATUS_SEED_MODEL=FILE ...: also a screenshot under the seed's load
#   (build/status-page/status-seed.png, the picture in docs/status-page.png)
#
# Without chromium (scripts/install-deps.sh installs it) the test exits 77,
# which CTest reports as skipped. Every process it starts is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/e2e/listen_port.sh
source "$ROOT/tests/e2e/listen_port.sh"
EDGELM=$(realpath "${1:-$ROOT/build/edgelm}")
OUT="${2:-$ROOT/build}/status-page"
SKIP=77

say() { echo "status_page: $*"; }
fail() {
  echo "status_page: FAIL: $*" >&2
  exit 1
}
[[ -x "$EDGELM" ]] || fail "no edgelm binary at $EDGELM"
# STATUS_CHROMIUM=/path/to/chromium picks another browser (a path that does
# not exist exercises the skip).
CHROMIUM=${STATUS_CHROMIUM-$(command -v chromium 2>/dev/null || true)}
if [[ -z "$CHROMIUM" || ! -x "$CHROMIUM" ]]; then
  echo "status_page: SKIP: chromium is not installed (bash scripts/install-deps.sh installs Debian's chromium)"
  exit $SKIP
fi
command -v curl >/dev/null || fail "curl is needed (scripts/install-deps.sh installs it)"
mkdir -p "$OUT"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/edgelm-status.XXXXXX")
PIDS=()
cleanup() {
  local rc=$?
  set +e
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [[ $rc -ne 0 && $rc -ne $SKIP ]]; then
    for f in server.log server-key.log chromium.log; do
      [[ -f "$WORK/$f" ]] && { echo "---- $f (last 30 lines)" >&2; tail -n 30 "$WORK/$f" >&2; }
    done
    for f in "$WORK"/*.html; do
      [[ -f "$f" ]] && { echo "---- $(basename "$f") (first 3000 bytes)" >&2; head -c 3000 "$f" >&2; echo >&2; }
    done
  fi
  if [[ -n "${KEEP_STATUS_WORK:-}" ]]; then echo "status_page: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$EDGELM" synth --shape tiny-llama --type Q8_0 -o "$WORK/tiny.gguf" >/dev/null 2>&1 || fail "edgelm synth failed"

# 2 slots, no wait queue, the tiny model's answers in chatml.
FLAGS=(-m "$WORK/tiny.gguf" --slots 2 --ctx 256 --queue 0 --threads 1 --memory-budget 256MiB
       --max-ttft-slowdown 0 --chat-template chatml --host 127.0.0.1 --port 0)

start_server() {  # log file, extra flags... -> sets PORT
  local log=$1
  shift
  : >"$log"  # the background job opens it later
  "$EDGELM" serve "${FLAGS[@]}" "$@" >"$log" 2>&1 &
  PIDS+=($!)
  PORT=$(listen_port "$log" "$!") || fail "the server did not start (log: $log)"
}

browse() {  # url, dom output file
  # --virtual-time-budget lets the page's polls run (virtual time waits for
  # the fetches) before the DOM is dumped.
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome" \
    --virtual-time-budget=4000 --dump-dom "$1" >"$2" 2>>"$WORK/chromium.log" || fail "chromium --dump-dom $1 failed"
}
screenshot() {  # url, png
  rm -f "$2"
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome" --hide-scrollbars \
    --virtual-time-budget=4000 --window-size=1280,1000 --screenshot="$2" "$1" >>"$WORK/chromium.log" 2>&1 ||
    fail "chromium --screenshot failed"
  [[ -s "$2" ]] || fail "no screenshot at $2"
}
attr() {  # dom file, element id, attribute -> its value ("" when absent)
  grep -ao "id=\"$2\"[^>]*" "$1" | head -1 | sed -n "s/.* $3=\"\([^\"]*\)\".*/\1/p"
}
reserved_sum() {  # /metrics' edgelm_memory_reserved_bytes, summed over kinds
  curl -sf "$@" | awk '/^edgelm_memory_reserved_bytes\{/ { s += $2 } END { printf "%.0f", s }'
}

# ---- 1. no API key ---------------------------------------------------------
# Every engine step takes >= 100 ms. A stream asks for 240 tokens, but the
# 256-token slot leaves room for 189 after its 67-token prompt, so it runs
# for >= 18.9 s: long enough to be seen running by the browser, which can
# start 7 s after the streams under ASan (at 50 ms a step, 9.5 s were once
# too short: the page showed both slots free).
start_server "$WORK/server.log" --debug-step-ms 100
URL="http://127.0.0.1:$PORT"
say "server on $URL"
curl -sf "$URL/health" >/dev/null || fail "/health is not 200"
STREAM='{"messages":[{"role":"user","content":"tell me about the board"}],"max_tokens":240,"stream":true,"ignore_eos":true}'
for i in 1 2; do
  curl -sN -o "$WORK/stream$i.txt" -H 'Content-Type: application/json' -d "$STREAM" "$URL/v1/chat/completions" &
  PIDS+=($!)
done
busy=0
for _ in $(seq 100); do
  busy=$(curl -sf "$URL/slots" | grep -o '"state":"[a-z]*"' | grep -vc '"free"' || true)
  [[ $busy -eq 2 ]] && break
  sleep 0.05
done
[[ $busy -eq 2 ]] || fail "the two streams did not take both slots (busy: $busy): $(head -c 300 "$WORK/stream1.txt")"
code=$(curl -s -o "$WORK/refused.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"a third"}],"max_tokens":8}' "$URL/v1/chat/completions")
[[ $code == 429 ]] || fail "a third stream on two busy slots got $code, not 429: $(cat "$WORK/refused.json")"
grep -q '"code":"slots"' "$WORK/refused.json" || fail "the 429 is not for slots: $(cat "$WORK/refused.json")"
say "provoked a refusal: 429, code slots"
# The ring samples once a second: wait until the refusal is in its history.
for _ in $(seq 60); do
  curl -sf "$URL/status" | grep -q '"slots":\[[0-9,]*[1-9]' && break
  sleep 0.05
done

SUM=$(reserved_sum "$URL/metrics")
[[ $SUM -gt 0 ]] || fail "no edgelm_memory_reserved_bytes in /metrics"
browse "$URL/" "$WORK/open.html"
grep -aq '<body data-view="status"' "$WORK/open.html" || fail "the page did not show the status (no key needed)"
total=$(attr "$WORK/open.html" plan-total data-bytes)
[[ "$total" == "$SUM" ]] || fail "the page's plan total is '$total', /metrics' reserved bytes sum to $SUM"
say "plan total on the page: $total bytes = the sum of /metrics' reserved bytes"
count=$(attr "$WORK/open.html" slot-count data-count)
[[ "$count" == 2 ]] || fail "the page shows $count slots, the server has 2"
shown_busy=$(attr "$WORK/open.html" slot-count data-busy)
[[ "$shown_busy" == 2 ]] || fail "the page shows $shown_busy busy slots while both streams run"
rows=$(grep -ao '<tr data-slot="[0-9]*" data-state="[a-z]*"' "$WORK/open.html" | wc -l)
[[ $rows -eq 2 ]] || fail "the slot table has $rows rows, not 2"
refused=$(grep -ao '<li data-reason="slots" data-count="[0-9]*"' "$WORK/open.html" | sed 's/.*data-count="\([0-9]*\)"/\1/')
[[ -n "$refused" && "$refused" -ge 1 ]] || fail "the page does not show the refusal by its reason (slots)"
grep -aq 'data-series="refused: slots"' "$WORK/open.html" || fail "the requests chart has no 'refused: slots' series"
say "slots: $count ($shown_busy busy), refused for slots: $refused"
# STATUS_LOAD_SECONDS=N: N seconds of load (three clients looping on the two
# slots, so some are refused) before the screenshot, for a picture of a busy
# server (docs/status-page.png was taken with 90).
LOAD=${STATUS_LOAD_SECONDS:-0}
if [[ $LOAD -gt 0 ]]; then
  say "load for $LOAD s before the screenshot"
  end=$(( $(date +%s) + LOAD + 60 ))  # still running when the picture is taken
  LOADERS=()
  for c in 1 2 3; do
    (
      while [[ $(date +%s) -lt $end ]]; do
        curl -s -o /dev/null -H 'Content-Type: application/json' "$URL/v1/chat/completions" \
          -d "{\"messages\":[{\"role\":\"user\",\"content\":\"client $c: how is the board?\"}],\"max_tokens\":$((20 + RANDOM % 80)),\"stream\":true,\"ignore_eos\":true}"
        sleep 0.$((RANDOM % 10))
      done
    ) &
    PIDS+=($!)
    LOADERS+=($!)
  done
  sleep "$LOAD"
fi
screenshot "$URL/" "$OUT/status.png"
if [[ $LOAD -gt 0 ]]; then kill "${LOADERS[@]}" 2>/dev/null || true; fi
say "screenshot: $OUT/status.png"

# STATUS_SEED_MODEL=FILE: also a picture of the seed's load (docs/status-page.png):
# FILE (the Qwen2-1.5B-shaped Q4_0 of bench/overload.sh) served on 4 slots x
# 2048 with a 3 GiB budget, 8 clients at 10 requests/s (edgelm load, open
# loop), the screenshot taken after STATUS_LOAD_SECONDS (default 40) of it.
if [[ -n "${STATUS_SEED_MODEL:-}" ]]; then
  SEED_LOG="$WORK/server-seed.log"
  : >"$SEED_LOG"
  "$EDGELM" serve -m "$STATUS_SEED_MODEL" --slots 4 --ctx 2048 --memory-budget 3GiB --host 127.0.0.1 --port 0 \
    >"$SEED_LOG" 2>&1 &
  PIDS+=($!)
  SPORT=""
  for _ in $(seq 1200); do
    SPORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$SEED_LOG" | head -1)
    [[ -n "$SPORT" ]] && break
    sleep 0.05
  done
  [[ -n "$SPORT" ]] || fail "the seed model's server did not start (log: $SEED_LOG)"
  SLOAD=${STATUS_LOAD_SECONDS:-40}
  [[ $SLOAD -gt 0 ]] || SLOAD=40
  "$EDGELM" load --url "http://127.0.0.1:$SPORT" --chat --stream --clients 8 --rate 10 \
    --duration $((SLOAD + 30)) --prompt-tokens 128 --max-tokens 64 -q >"$WORK/seed-load.log" 2>&1 &
  PIDS+=($!)
  say "the seed's load on $STATUS_SEED_MODEL for $SLOAD s before the screenshot"
  sleep "$SLOAD"
  screenshot "http://127.0.0.1:$SPORT/" "$OUT/status-seed.png"
  say "screenshot: $OUT/status-seed.png"
fi

# ---- 2. with an API key ----------------------------------------------------
# Full speed: the chat box's answer (below) streams to its end before the
# browser dumps the page.
start_server "$WORK/server-key.log" --api-key sesame
KURL="http://127.0.0.1:$PORT"
code=$(curl -s -o /dev/null -w '%{http_code}' "$KURL/status")
[[ $code == 401 ]] || fail "/status without the key answered $code, not 401"
code=$(curl -s -o /dev/null -w '%{http_code}' "$KURL/")
[[ $code == 200 ]] || fail "GET / without the key answered $code, not 200"
browse "$KURL/" "$WORK/nokey.html"
grep -aq '<body data-view="health"' "$WORK/nokey.html" || fail "without the key the page should show only health"
[[ "$(attr "$WORK/nokey.html" health data-status)" == ok ]] || fail "without the key the page does not show /health's status"
[[ -z "$(attr "$WORK/nokey.html" plan-total data-bytes)" ]] || fail "without the key the page shows the plan"
say "with --api-key, the page without the key shows only health"
screenshot "$KURL/" "$OUT/status-nokey.png"
rm -rf "$WORK/chrome"  # a fresh profile: the key must come from the address
# The fragment also sends a first chat message: the page streams the answer
# from /v1/chat/completions with the key.
browse "$KURL/#key=sesame&say=Hello%20board&max_tokens=12" "$WORK/key.html"
grep -aq '<body data-view="status"' "$WORK/key.html" || fail "with the key the page did not show the status"
KSUM=$(reserved_sum -H 'Authorization: Bearer sesame' "$KURL/metrics")
total=$(attr "$WORK/key.html" plan-total data-bytes)
[[ "$total" == "$KSUM" ]] || fail "with the key the plan total is '$total', /metrics says $KSUM"
finish=$(grep -ao 'data-role="model"[^>]*' "$WORK/key.html" | sed -n 's/.*data-finish="\([a-z]*\)".*/\1/p' | head -1)
grep -aq 'data-role="error"' "$WORK/key.html" && fail "the chat box shows an error: $(grep -ao 'data-role="error".\{0,300\}' "$WORK/key.html")"
LC_ALL=C grep -aqP '[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]' "$WORK/key.html" &&
  fail "the page holds raw control characters (the model's answer should show them as control pictures)"
[[ $finish == length || $finish == stop ]] || fail "the chat box did not stream an answer to its end (finish: '$finish')"
say "with the key (#key=...): the status, plan total $total; the chat box streamed an answer (finish_reason $finish)"
say "PASS"
