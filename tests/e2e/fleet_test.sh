#!/usr/bin/env bash
# A fleet on loopback: two edgelm nodes (tiny model, 2 slots and a wait queue
# of 2 each) behind nginx configured by deploy/nginx/edgelm.conf itself (only
# its addresses, port and log path are rewritten). Checks that
#   1. one node alone refuses one of five concurrent streams (429, slots),
#      while the two nodes behind nginx carry all five;
#   2. with every node full, the client gets edgelm's 429 with Retry-After
#      through nginx, after nginx tried both nodes;
#   3. SIGTERM to one node mid-run loses no admitted stream (each ends with
#      [DONE]), the node exits 0, and new streams go to the other node.
#
#   tests/e2e/fleet_test.sh [path/to/edgelm]      (CTest: e2e.fleet)
#
# nginx comes from Debian's package (installed through scripts/install-deps.sh
# when missing and possible); without it the test exits 77, which CTest
# reports as skipped. Every process it starts is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/e2e/listen_port.sh
source "$ROOT/tests/e2e/listen_port.sh"
EDGELM=$(realpath "${1:-$ROOT/build/edgelm}")
SKIP=77
T_START=$(date +%s.%N)

say() { echo "fleet: $*"; }
fail() {
  echo "fleet: FAIL: $*" >&2
  exit 1
}
[[ -x "$EDGELM" ]] || fail "no edgelm binary at $EDGELM"

# ---- nginx from Debian's package -------------------------------------------
find_nginx() {
  command -v nginx 2>/dev/null || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; } || true
}
# FLEET_NGINX=/path/to/nginx picks another nginx (a path that does not exist
# exercises the skip).
NGINX=${FLEET_NGINX-$(find_nginx)}
[[ -n "$NGINX" && ! -x "$NGINX" ]] && NGINX=""
if [[ -z "$NGINX" ]]; then
  if [[ $(id -u) -eq 0 ]] || sudo -n true 2>/dev/null; then
    say "nginx missing; installing it (scripts/install-deps.sh nginx)"
    bash "$ROOT/scripts/install-deps.sh" nginx >&2 || true
    NGINX=$(find_nginx)
  fi
fi
if [[ -z "$NGINX" ]]; then
  echo "fleet: SKIP: nginx is not installed and cannot be installed here (needs root or passwordless sudo:" \
    "bash scripts/install-deps.sh nginx)"
  exit $SKIP
fi
command -v curl >/dev/null || fail "curl is needed (scripts/install-deps.sh installs it)"

# ---- processes, cleaned up on any exit -------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/edgelm-fleet.XXXXXX")
C="$WORK/clients"
mkdir -p "$C"
PID_A="" PID_B="" PID_NGINX=""
CLIENTS=()
cleanup() {
  local rc=$?
  set +e
  for p in "${CLIENTS[@]}"; do kill "$p" 2>/dev/null; done
  for p in $PID_NGINX $PID_A $PID_B; do kill -TERM "$p" 2>/dev/null; done
  # edgelm drains (refuses new work, lets running streams end): give it a moment.
  for _ in $(seq 50); do
    local alive=0
    for p in $PID_NGINX $PID_A $PID_B; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for p in $PID_NGINX $PID_A $PID_B; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [[ $rc -ne 0 && $rc -ne $SKIP ]]; then
    for f in node-a.log node-b.log nginx-error.log edgelm.log; do
      [[ -f "$WORK/$f" ]] && { echo "---- $f (last 40 lines)" >&2; tail -n 40 "$WORK/$f" >&2; }
    done
  fi
  if [[ -n "${KEEP_FLEET_WORK:-}" ]]; then echo "fleet: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- two edgelm nodes ------------------------------------------------------
"$EDGELM" synth --shape tiny-llama --type Q8_0 -o "$WORK/tiny.gguf" >/dev/null 2>&1 || fail "edgelm synth failed"

# 2 slots and a wait queue of 2 per node: a node holds 4 requests (2 running,
# 2 waiting) and refuses the fifth. Every engine step takes >= 20 ms, so a
# stream of N tokens lasts >= N x 20 ms and the clients below overlap.
# The first-token promise is off: this measures slots, the queue and nginx,
# and a sanitizer build's step times would make it refuse at random.
NODE_FLAGS=(-m "$WORK/tiny.gguf" --slots 2 --ctx 256 --queue 2 --threads 1 --memory-budget 256MiB
            --debug-step-ms 20 --max-ttft-slowdown 0 --host 127.0.0.1 --port 0)
"$EDGELM" serve "${NODE_FLAGS[@]}" --model-id fleet-a >"$WORK/node-a.log" 2>&1 &
PID_A=$!
"$EDGELM" serve "${NODE_FLAGS[@]}" --model-id fleet-b >"$WORK/node-b.log" 2>&1 &
PID_B=$!

PORT_A=$(listen_port "$WORK/node-a.log" "$PID_A") || fail "node a did not start"
PORT_B=$(listen_port "$WORK/node-b.log" "$PID_B") || fail "node b did not start"
A="http://127.0.0.1:$PORT_A"
B="http://127.0.0.1:$PORT_B"
for u in "$A" "$B"; do
  curl -sf "$u/health" >/dev/null || fail "$u/health is not 200"
done

# ---- nginx with deploy/nginx/edgelm.conf -----------------------------------
# The shipped file with loopback addresses: the first two `server` lines of
# the upstream become the two nodes (their parameters kept), the rest go.
make_conf() {  # nginx port
  awk -v a="127.0.0.1:$PORT_A" -v b="127.0.0.1:$PORT_B" -v listen="127.0.0.1:$1" -v work="$WORK/" '
    /^upstream edgelm *\{/ { up = 1 }
    up && /^\}/ { up = 0 }
    up && /^[ \t]*server[ \t]+[^ \t;]+:[0-9]+/ {
      n++
      if (n > 2) next
      sub(/[^ \t;]+:[0-9]+/, n == 1 ? a : b)
      servers++
    }
    /^[ \t]*listen[ \t]+8080;/ { sub(/8080/, listen); listens++ }
    { gsub(/\/var\/log\/nginx\//, work); print }
    END { if (servers != 2 || listens != 1) exit 3 }
  ' "$ROOT/deploy/nginx/edgelm.conf" >"$WORK/edgelm.conf" ||
    fail "deploy/nginx/edgelm.conf no longer has 'upstream edgelm' with server lines and 'listen 8080;'"
  local user=""
  [[ $(id -u) -eq 0 ]] && user="user $(id -un) $(id -gn);"
  cat >"$WORK/nginx.conf" <<EOF
$user
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log notice;
events { worker_connections 512; }
http {
    client_body_temp_path $WORK/tmp/body;
    proxy_temp_path $WORK/tmp/proxy;
    fastcgi_temp_path $WORK/tmp/fastcgi;
    uwsgi_temp_path $WORK/tmp/uwsgi;
    scgi_temp_path $WORK/tmp/scgi;
    access_log off;
    include $WORK/edgelm.conf;
}
EOF
}
mkdir -p "$WORK/tmp"
for attempt in 1 2 3 4 5; do
  PORT_N=$((20000 + RANDOM % 40000))
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT_N") 2>/dev/null && continue  # taken
  make_conf "$PORT_N"
  "$NGINX" -t -q -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/nginx-error.log" ||
    fail "nginx -t rejects the configuration built from deploy/nginx/edgelm.conf"
  "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/nginx-error.log" -g 'daemon off;' &
  PID_NGINX=$!
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT_N/health" && break
    kill -0 "$PID_NGINX" 2>/dev/null || break
    sleep 0.05
  done
  curl -sf -o /dev/null "http://127.0.0.1:$PORT_N/health" && break
  kill -TERM "$PID_NGINX" 2>/dev/null || true
  wait "$PID_NGINX" 2>/dev/null || true
  PID_NGINX=""
done
[[ -n "$PID_NGINX" ]] || fail "nginx did not start (see nginx-error.log)"
N="http://127.0.0.1:$PORT_N"
say "nodes a=$A b=$B, nginx $N ($("$NGINX" -v 2>&1 | sed 's/.*: //'))"

# ---- clients -----------------------------------------------------------------
# One streaming completion in the background: status, headers, body per name.
client() {  # name base-url max-tokens
  curl -sN --max-time 40 -D "$C/$1.hdr" -o "$C/$1.body" -w '%{http_code}' \
    -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"fleet $1\",\"max_tokens\":$3,\"stream\":true,\"ignore_eos\":true}" \
    "$2/v1/completions" >"$C/$1.code" 2>/dev/null || true
}
start() {  # name base-url max-tokens
  client "$@" &
  CLIENTS+=($!)
}
finish_all() {
  wait "${CLIENTS[@]}" 2>/dev/null || true
  CLIENTS=()
}
code() { cat "$C/$1.code" 2>/dev/null || echo none; }
completed() { [[ $(code "$1") == 200 ]] && grep -q '^data: \[DONE\]' "$C/$1.body"; }
served_by() {  # the node whose --model-id is in the stream's events
  if grep -q '"model":"fleet-a"' "$C/$1.body"; then echo a
  elif grep -q '"model":"fleet-b"' "$C/$1.body"; then echo b
  else echo "?"; fi
}
refused_429() {  # edgelm's refusal: 429, Retry-After, OpenAI error with code slots/throughput
  [[ $(code "$1") == 429 ]] && grep -qi '^retry-after: *[0-9]' "$C/$1.hdr" &&
    grep -Eq '"code":"(slots|throughput)"' "$C/$1.body"
}
retry_after() { sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*/\1/p' "$C/$1.hdr" | head -1; }
busy() {  # slots busy + queued on a node
  curl -s "$1/metrics" | awk '/^edgelm_slots_busy |^edgelm_queue_depth / { s += $2 } END { print s + 0 }'
}
wait_idle() {
  for _ in $(seq 200); do
    [[ $(busy "$A") == 0 && $(busy "$B") == 0 ]] && return 0
    sleep 0.05
  done
  fail "the nodes did not become idle"
}

# ---- 1. one node alone vs two nodes behind nginx ----------------------------
for i in 1 2 3 4 5; do start "one$i" "$A" 40; done
finish_all
one_ok=0 one_refused=0
for i in 1 2 3 4 5; do
  if completed "one$i"; then one_ok=$((one_ok + 1))
  elif refused_429 "one$i"; then one_refused=$((one_refused + 1))
  else fail "one node: stream one$i ended with $(code "one$i"): $(head -c 300 "$C/one$i.body")"; fi
done
say "one node alone: $one_ok of 5 concurrent streams admitted, $one_refused refused with 429"
[[ $one_ok -eq 4 && $one_refused -eq 1 ]] || fail "one node should admit 4 (2 slots + 2 queued) and refuse 1"
wait_idle

for i in 1 2 3 4 5; do start "two$i" "$N" 40; done
finish_all
two_ok=0 on_a=0 on_b=0
for i in 1 2 3 4 5; do
  completed "two$i" || fail "two nodes: stream two$i ended with $(code "two$i"): $(head -c 300 "$C/two$i.body")"
  two_ok=$((two_ok + 1))
  case $(served_by "two$i") in a) on_a=$((on_a + 1)) ;; b) on_b=$((on_b + 1)) ;; esac
done
say "two nodes behind nginx: $two_ok of 5 admitted and completed (node a $on_a, node b $on_b)"
[[ $on_a -gt 0 && $on_b -gt 0 ]] || fail "nginx did not spread the streams over both nodes"
wait_idle

# ---- 2. every node full: edgelm's 429 and Retry-After through nginx ---------
lines_before=$(wc -l <"$WORK/edgelm.log")
for i in $(seq 10); do start "full$i" "$N" 60; done
sleep 0.4
fleet_ready=$(curl -s -o /dev/null -w '%{http_code}' "$N/ready")
finish_all
full_ok=0 full_refused=0 ra=""
for i in $(seq 10); do
  if completed "full$i"; then full_ok=$((full_ok + 1))
  elif refused_429 "full$i"; then full_refused=$((full_refused + 1)); ra=$(retry_after "full$i")
  else fail "full fleet: full$i ended with $(code "full$i"): $(head -c 300 "$C/full$i.body")"; fi
done
say "fleet full: $full_ok of 10 admitted, $full_refused got 429 with Retry-After: $ra through nginx; fleet /ready said $fleet_ready"
[[ $full_ok -eq 8 && $full_refused -eq 2 ]] || fail "a full fleet of 2 x (2 slots + 2 queued) should admit 8 of 10"
[[ $fleet_ready == 503 ]] || fail "nginx /ready should be 503 while every node is full"
# nginx tried both nodes before passing the last 429 on.
tried_both=$(tail -n +"$((lines_before + 1))" "$WORK/edgelm.log" | grep -c '" 429 .*upstream_status=429, 429 ' || true)
[[ $tried_both -eq 2 ]] || fail "expected 2 requests refused by both nodes in nginx's log, found $tried_both"
wait_idle
[[ $(curl -s -o /dev/null -w '%{http_code}' "$N/ready") == 200 ]] || fail "nginx /ready should be 200 with free slots"

# ---- 3. SIGTERM to one node mid-run -------------------------------------------
for i in 1 2 3 4; do start "drain$i" "$N" 100; done
for _ in $(seq 100); do  # every stream has its first token
  n=0
  for i in 1 2 3 4; do grep -q '^data: {' "$C/drain$i.body" 2>/dev/null && n=$((n + 1)); done
  [[ $n -eq 4 ]] && break
  sleep 0.05
done
[[ $n -eq 4 ]] || fail "the 4 streams did not start"
kill -TERM "$PID_A"
sleep 0.2
for i in 1 2; do start "late$i" "$N" 20; done
finish_all
set +e
wait "$PID_A"
rc_a=$?
set -e
PID_A=""
drained_a=0
for i in 1 2 3 4; do
  completed "drain$i" || fail "admitted stream drain$i was lost: $(code "drain$i"), $(tail -c 200 "$C/drain$i.body")"
  [[ $(served_by "drain$i") == a ]] && drained_a=$((drained_a + 1))
done
for i in 1 2; do
  completed "late$i" || fail "new stream late$i after SIGTERM failed: $(code "late$i"): $(head -c 300 "$C/late$i.body")"
  [[ $(served_by "late$i") == b ]] || fail "new stream late$i went to the draining node"
done
[[ $drained_a -gt 0 ]] || fail "no stream was running on node a when it got SIGTERM"
[[ $rc_a -eq 0 ]] || fail "node a exited $rc_a after SIGTERM (expected 0)"
grep -q 'draining' "$WORK/node-a.log" || fail "node a did not log its drain"
# Node a is gone: its port refuses connections and nginx moves on (`error`).
start after1 "$N" 5
finish_all
completed after1 && [[ $(served_by after1) == b ]] || fail "a request after node a stopped failed: $(code after1)"
say "SIGTERM to node a with $drained_a streams running: all 4 admitted streams ended with [DONE]," \
  "node a exited 0, new streams went to node b"

T_END=$(date +%s.%N)
say "PASS in $(awk -v a="$T_START" -v b="$T_END" 'BEGIN { printf "%.1f", b - a }') s" \
  "(admitted: one node $one_ok/5, two nodes $two_ok/5, full fleet $full_ok/10)"
