#!/usr/bin/env bash
# The seed's overload scenario, reproducible: a Qwen2-1.5B-shaped Q4_0 model
# (synthetic weights, real shapes and vocabulary), `edgelm serve --slots 4
# --ctx 2048` inside a memory cgroup whose limit is the memory plan plus a
# small margin, then 8 clients at 10 requests/s for 30 s (`edgelm load`).
# Prints counts by status, p99 TTFT and TPOT of admitted requests, p99
# latency of 429s, peak and steady RSS, the cgroup's OOM-kill count and an
# unloaded single-stream TPOT and TTFT (medians of a few requests) measured first, then checks issue 6's
# criteria and issue 11's (TTFT p99 within 3x unloaded, goodput at least half of
# `edgelm bench --streams 4` on the same file).
#
# The same run can measure another server under the same memory limit:
#   bench/overload.sh --server-cmd "llama-server -m MODEL -np 4 -c 8192 --port 18090" \
#                     --url http://127.0.0.1:18090 --name llama-server
# See docs/load.md for every option and how to read the output.
#
# Needs root for the cgroup (else --no-cgroup). Cleans up the cgroups and the
# servers it started on exit, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: bench/overload.sh [options]
  --build DIR          edgelm build directory (default: build; built when edgelm is missing)
  --rebuild            run the build even when DIR/edgelm exists
  --model PATH         GGUF to serve (default: models/qwen2-1.5b-synthetic-Q4_0.gguf, written by
                       `edgelm synth` when absent)
  --slots N --ctx N    edgelm's slots and context per slot (default: 4, 2048)
  --threads N          edgelm serve --threads (default: the server's own default)
  --min-stream-rate R  edgelm serve --min-stream-rate (default: the server's default; 0 turns the
                       throughput gate off and leaves only the slots)
  --serve-arg ARG      one more argument for edgelm serve (repeatable)
  --clients N          load: most requests in flight (default 8)
  --rate R             load: Poisson arrivals per second (default 10)
  --duration S         load: seconds of arrivals (default 30)
  --unloaded-seconds S the unloaded yardstick: requests one at a time for S seconds, medians
                       of their TTFT and TPOT (default 8)
  --prompt-tokens N    load: prompt length (default 128)
  --max-tokens N       load: max_tokens, with ignore_eos (default 64)
  --timeout S          load: seconds a request may take (default 600)
  --margin-mib M       cgroup limit = plan total + M MiB (default 128)
  --port P             edgelm's port (default 18080)
  --out DIR            where logs, reports, CSV and plots go (default: BUILD/overload-DATE)
  --no-cgroup          run the servers without a memory cgroup (no root needed; no OOM count)
  --server-cmd CMD     also start this server (a shell command line) in a cgroup of the same
                       limit and measure it the same way; needs --url
  --url URL            the other server's base URL (without --server-cmd: an already running
                       server, measured without cgroup or RSS unless --other-pid is given)
  --name NAME          label of the other server in the output (default: other)
  --other-model FILE   the other server's model file: charged to its cgroup and warmed first,
                       as edgelm's is
  --other-pid PID      RSS of an already running other server
  --skip-edgelm        measure only the other server
  --aggregate-tps T    goodput's yardstick, tokens/s (default: measured first with
                       `edgelm bench --streams 4` on the same file)
  --no-aggregate       do not measure it (no goodput criterion)
EOF
}

BUILD=build
REBUILD=0
MODEL=""
SLOTS=4
CTX=2048
THREADS=""
SERVE_ARGS=()
CLIENTS=8
RATE=10
DURATION=30
UNLOADED_S=8
PROMPT_TOKENS=128
MAX_TOKENS=64
TIMEOUT=600
MARGIN_MIB=128
PORT=18080
OUT=""
USE_CGROUP=1
OTHER_CMD=""
OTHER_URL=""
OTHER_NAME=other
OTHER_PID=""
OTHER_MODEL=""
SKIP_EDGELM=0
AGGREGATE=1
AGGREGATE_TPS=""

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --rebuild) REBUILD=1; shift ;;
    --model) MODEL=$2; shift 2 ;;
    --slots) SLOTS=$2; shift 2 ;;
    --ctx) CTX=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --aggregate-tps) AGGREGATE_TPS=$2; shift 2 ;;
    --no-aggregate) AGGREGATE=0; shift ;;
    --serve-arg) SERVE_ARGS+=("$2"); shift 2 ;;
    --min-stream-rate) SERVE_ARGS+=(--min-stream-rate "$2"); shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --unloaded-seconds) UNLOADED_S=$2; shift 2 ;;
    --prompt-tokens) PROMPT_TOKENS=$2; shift 2 ;;
    --max-tokens) MAX_TOKENS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --margin-mib) MARGIN_MIB=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-cgroup) USE_CGROUP=0; shift ;;
    --server-cmd) OTHER_CMD=$2; shift 2 ;;
    --url) OTHER_URL=$2; shift 2 ;;
    --name) OTHER_NAME=$2; shift 2 ;;
    --other-pid) OTHER_PID=$2; shift 2 ;;
    --other-model) OTHER_MODEL=$2; shift 2 ;;
    --skip-edgelm) SKIP_EDGELM=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "overload: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -n "$OTHER_CMD" && -z "$OTHER_URL" ]] && { echo "overload: --server-cmd needs --url" >&2; exit 2; }
[[ $SKIP_EDGELM -eq 1 && -z "$OTHER_URL" ]] && { echo "overload: --skip-edgelm needs --url" >&2; exit 2; }

log() { echo "overload: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- tools, build, model ----------------------------------------------------
if ! command -v jq >/dev/null || ! command -v curl >/dev/null; then
  bash scripts/install-deps.sh jq curl
fi
EDGELM=$BUILD/edgelm
if [[ ! -x $EDGELM || $REBUILD -eq 1 ]]; then
  bash scripts/install-deps.sh
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target edgelm
fi
if [[ -z "$MODEL" ]]; then
  MODEL=models/qwen2-1.5b-synthetic-Q4_0.gguf
  if [[ ! -f $MODEL ]]; then
    bash scripts/fetch-test-assets.sh
    mkdir -p models
    # Written beside and renamed: nobody ever sees half a model.
    "$EDGELM" synth --shape qwen2-1.5b --type Q4_0 --vocab assets/vocab/ggml-vocab-qwen2.gguf -o "$MODEL.tmp.$$"
    mv "$MODEL.tmp.$$" "$MODEL"
  fi
fi
[[ -f $MODEL ]] || die "no model at $MODEL"
OUT=${OUT:-$BUILD/overload-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
log "output in $OUT"

# ---- the memory plan and the cgroup limit -----------------------------------
# Goodput's yardstick: edgelm bench's aggregate decode of 4 streams on the
# same file and threads, before any server runs.
if [[ $AGGREGATE -eq 1 && -z ${AGGREGATE_TPS:-} ]]; then
  log "edgelm bench --streams 4 (the goodput yardstick; load average $(cut -d" " -f1-3 /proc/loadavg))"
  AGGREGATE_TPS=$("$EDGELM" bench -m "$MODEL" --slots 4 --ctx "$CTX" -p "$PROMPT_TOKENS" -n "$MAX_TOKENS" --streams 4 -r 3 \
    ${THREADS:+--threads "$THREADS"} --json 2>/dev/null | jq '.streams[] | select(.streams == 4) | .decode_tokens_per_s')
  log "4-stream aggregate decode: ${AGGREGATE_TPS:-n/a} tokens/s"
fi
PLAN_JSON=$OUT/plan.json
plan_rc=0
"$EDGELM" plan -m "$MODEL" --slots "$SLOTS" --ctx "$CTX" --json >"$PLAN_JSON" || plan_rc=$?
[[ $plan_rc -eq 0 ]] || die "edgelm plan failed (exit $plan_rc); see $PLAN_JSON"
PLAN_TOTAL=$(jq '.bytes.total' "$PLAN_JSON")
LIMIT=$(( (PLAN_TOTAL + MARGIN_MIB * 1024 * 1024 + 4095) / 4096 * 4096 ))
mib() { awk -v b="$1" 'BEGIN { if (b == "" || b == "null") print "n/a"; else printf "%.1f MiB", b / 1048576 }'; }
log "plan total $(mib "$PLAN_TOTAL") (weights $(mib "$(jq .bytes.weights "$PLAN_JSON")"), KV $(mib "$(jq .bytes.kv "$PLAN_JSON")")); cgroup limit $(mib "$LIMIT") (+${MARGIN_MIB} MiB)"

# ---- cgroups: v2 (unified, memory controller) or v1 ----------------------------
CG_VER=0
CG_ROOT=""
if [[ $USE_CGROUP -eq 1 ]]; then
  [[ $(id -u) -eq 0 ]] || die "a memory cgroup needs root; run as root or pass --no-cgroup"
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
    CG_VER=2; CG_ROOT=/sys/fs/cgroup
  elif [[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
    CG_VER=1; CG_ROOT=/sys/fs/cgroup/memory
  else
    die "no memory cgroup controller found (neither v2 at /sys/fs/cgroup nor v1 at /sys/fs/cgroup/memory); use --no-cgroup"
  fi
  log "cgroup v$CG_VER at $CG_ROOT"
fi
CGROUPS=()

# Creates a memory cgroup NAME with LIMIT bytes, under this shell's own cgroup
# when possible (so whatever manages it keeps accounting for us); sets CG to
# its path. (Not run in $(...): CGROUPS must be this shell's, for the cleanup.)
cg_create() {
  local name=$1 limit=$2 own parent dir
  if [[ $CG_VER -eq 1 ]]; then
    own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
    parent=$CG_ROOT$own
    [[ -d $parent ]] || parent=$CG_ROOT
    dir=$parent/$name
    mkdir "$dir"
    echo "$limit" >"$dir/memory.limit_in_bytes"
    # With swap accounting, the same limit on memory+swap: swapping must not hide growth.
    [[ -f $dir/memory.memsw.limit_in_bytes ]] && echo "$limit" >"$dir/memory.memsw.limit_in_bytes" 2>/dev/null || true
  else
    own=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
    parent=$CG_ROOT${own%/}
    # v2 forbids processes in a cgroup that delegates controllers to children:
    # a child of our own cgroup works only if memory is already delegated there.
    if [[ ! -d $parent ]] || ! grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null; then
      parent=$CG_ROOT
      grep -qw memory "$parent/cgroup.subtree_control" || echo +memory >"$parent/cgroup.subtree_control"
    fi
    dir=$parent/$name
    mkdir "$dir"
    echo "$limit" >"$dir/memory.max"
    [[ -f $dir/memory.swap.max ]] && echo 0 >"$dir/memory.swap.max"
  fi
  CGROUPS+=("$dir")
  CG=$dir
}
cg_oom_kills() {  # OOM kills inside the cgroup
  local f=$1/memory.oom_control
  [[ $CG_VER -eq 2 ]] && f=$1/memory.events
  awk '$1 == "oom_kill" { print $2; found = 1 } END { if (!found) print "n/a" }' "$f"
}
cg_peak() {  # the most memory the cgroup was charged
  if [[ $CG_VER -eq 1 ]]; then cat "$1/memory.max_usage_in_bytes"
  elif [[ -f $1/memory.peak ]]; then cat "$1/memory.peak"
  else echo null; fi
}
cg_limit_hits() {  # v1: times usage hit the limit; v2: memory.events "max"
  if [[ $CG_VER -eq 1 ]]; then cat "$1/memory.failcnt"
  else awk '$1 == "max" { print $2 }' "$1/memory.events"; fi
}
cg_remove() {
  local dir=$1 i
  [[ -d $dir ]] || return 0
  for i in $(seq 1 50); do rmdir "$dir" 2>/dev/null && return 0; sleep 0.2; done
  log "could not remove cgroup $dir (processes left: $(cat "$dir/cgroup.procs" | tr '\n' ' '))"
}

# ---- servers ----------------------------------------------------------------
SERVERS=()
# SIGTERM (edgelm drains), then SIGKILL after 60 s; sets STOP_RC to the exit
# code. (Not run in $(...): only this shell can wait for its children.)
stop_server() {
  local pid=$1 i
  STOP_RC=0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid ignored SIGTERM for 60 s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || STOP_RC=$?
  SERVERS=()
}
cleanup() {
  local pid dir
  for pid in "${SERVERS[@]:-}"; do [[ -n $pid ]] && stop_server "$pid"; done
  for dir in "${CGROUPS[@]:-}"; do [[ -n $dir ]] && cg_remove "$dir"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts `bash -c CMD` inside cgroup CG ("" for none), logging to LOG; sets
# SERVER_PID. The shell joins the cgroup before it execs the server, so every
# page the server touches is charged there.
start_in_cgroup() {
  local cg=$1 logf=$2 cmd=$3
  if [[ -n $cg ]]; then
    bash -c 'echo $$ >"$1/cgroup.procs" && exec bash -c "exec $2"' _ "$cg" "$cmd" >"$logf" 2>&1 &
  else
    bash -c "exec $cmd" >"$logf" 2>&1 &
  fi
  SERVER_PID=$!
  SERVERS+=("$SERVER_PID")
}
wait_healthy() {  # URL PID: up to 10 minutes for the model to load
  local url=$1 pid=$2 i
  for i in $(seq 1 1200); do
    curl -sf -o /dev/null "$url/health" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# Page cache is charged to the cgroup of whoever reads a page first. Evict
# FILE's clean pages (this file only, and only pages nobody maps), then read
# it from inside cgroup CG: the weights are charged to the server's cgroup,
# and warm before the server times its first steps (edgelm calibrates its
# step-time model at start-up).
prefault() {
  local cg=$1 file=$2
  dd if="$file" iflag=nocache count=0 status=none 2>/dev/null || true
  if [[ -n $cg ]]; then
    bash -c 'echo $$ >"$1/cgroup.procs" && exec cat "$2"' _ "$cg" "$file" >/dev/null
  else
    cat "$file" >/dev/null
  fi
}

# ---- one measurement --------------------------------------------------------
# measure LABEL URL PID CG LOG: warm-up, unloaded single stream, the scenario;
# then prints the figures and checks the criteria. PID and CG may be "".
FAILED=0
measure() {
  local label=$1 url=$2 pid=$3 cg=$4 slog=$5
  local pfx=$OUT/$label
  local common=(--url "$url" --prompt-tokens "$PROMPT_TOKENS" --timeout "$TIMEOUT" --stream)
  log "[$label] warm-up request"
  "$EDGELM" load "${common[@]}" --clients 1 --duration 0.1 --max-tokens 4 --seed 99 -q --report "$pfx-warmup.json" || true
  # Several requests one after another, each with its own prompt: their
  # medians are the yardstick (one request's TTFT moved 20% between runs).
  log "[$label] unloaded: streams of $MAX_TOKENS tokens one at a time for ${UNLOADED_S} s (load average $(loadavg))"
  "$EDGELM" load "${common[@]}" --clients 1 --duration "$UNLOADED_S" --max-tokens "$MAX_TOKENS" --seed 98 -q \
    --report "$pfx-unloaded.json" --csv "$pfx-unloaded.csv"
  local la_before la_after pid_args=()
  [[ -n $pid ]] && pid_args=(--pid "$pid")
  la_before=$(loadavg)
  log "[$label] scenario: $CLIENTS clients, $RATE requests/s (Poisson), ${DURATION} s (load average $la_before)"
  local load_rc=0
  "$EDGELM" load "${common[@]}" --clients "$CLIENTS" --rate "$RATE" --duration "$DURATION" --max-tokens "$MAX_TOKENS" \
    "${pid_args[@]}" --report "$pfx-load.json" --csv "$pfx-load.csv" --plot "$pfx-load.png" | tee "$pfx-load.txt" || load_rc=$?
  la_after=$(loadavg)
  [[ $load_rc -eq 0 ]] || { log "[$label] edgelm load failed (exit $load_rc)"; FAILED=1; return; }
  curl -s -m 5 "$url/metrics" >"$pfx-metrics.txt" 2>/dev/null || true

  local R=$pfx-load.json U=$pfx-unloaded.json
  local unloaded_tpot oom=n/a peak=null hits=n/a alive=n/a reserved=null
  unloaded_tpot=$(jq '.ok.tpot_ms.p50' "$U")
  local unloaded_ttft
  unloaded_ttft=$(jq '.ok.ttft_ms.p50' "$U")
  if [[ -n $cg ]]; then oom=$(cg_oom_kills "$cg"); peak=$(cg_peak "$cg"); hits=$(cg_limit_hits "$cg"); fi
  if [[ -n $pid ]]; then kill -0 "$pid" 2>/dev/null && alive=yes || alive=NO; fi
  # edgelm reports its own plan (with the HTTP buffers) on /metrics.
  if grep -q '^edgelm_memory_reserved_bytes' "$pfx-metrics.txt" 2>/dev/null; then
    reserved=$(awk '/^edgelm_memory_reserved_bytes/ { s += $2 } END { printf "%.0f", s }' "$pfx-metrics.txt")
  fi
  local plan_ref=$reserved
  [[ $plan_ref == null ]] && plan_ref=$PLAN_TOTAL

  {
    echo
    echo "==== $label: $CLIENTS clients, $RATE requests/s, ${DURATION} s, prompt ~$PROMPT_TOKENS, max_tokens $MAX_TOKENS"
    echo "machine: $(nproc) CPUs; load average before $la_before, after $la_after"
    jq -r '"replies by status: " + ([.requests.by_status | to_entries[] | "\(.key)=\(.value)"] | join(" "))
           + "; transport errors: \(.requests.transport_errors.total)"
           + (if .requests.transport_errors.total > 0 then " " + (.requests.transport_errors.by_kind | tostring) else "" end)
           + "; client-side drops: \(.requests.client_dropped)"' "$R"
    jq -r '"error codes: " + ([.requests.error_codes | to_entries[] | "\(.key)=\(.value)"] | join(" "))' "$R"
    jq -r --arg u "$unloaded_tpot" 'def f: if . == null then "n/a" else (. * 10 | round / 10 | tostring) end;
      "admitted (200): \(.ok.count), TTFT p50 \(.ok.ttft_ms.p50 | f) / p99 \(.ok.ttft_ms.p99 | f) ms, TPOT p50 \(.ok.tpot_ms.p50 | f) / p99 \(.ok.tpot_ms.p99 | f) ms (unloaded single stream: \($u | tonumber? // null | f) ms), gaps between tokens p99 \(.ok.itl_ms.p99 | f) / max \(.ok.itl_ms.max | f) ms, latency p99 \(.ok.latency_ms.p99 | f) ms",
      "429s: \(.status_429.count), latency p50 \(.status_429.latency_ms.p50 | f) / p99 \(.status_429.latency_ms.p99 | f) / max \(.status_429.latency_ms.max | f) ms from the scheduled arrival; from send p50 \(.status_429.latency_from_send_ms.p50 | f) / p99 \(.status_429.latency_from_send_ms.p99 | f) / max \(.status_429.latency_from_send_ms.max | f) ms (the load generator lagged its schedule by p99 \(.client_lag_ms.p99 | f) / max \(.client_lag_ms.max | f) ms)",
      "throughput: \(.throughput.tokens_per_s | f) tokens/s, \(.throughput.requests_per_s | f) replies/s; the load generator used \(.client_cpu_s | f) s of CPU"' "$R"
    # edgelm times its refusals itself: the part of a 429's latency that is the server's.
    if grep -q '^edgelm_rejection_duration_seconds_count' "$pfx-metrics.txt" 2>/dev/null; then
      awk '/^edgelm_rejection_duration_seconds_sum/ { s = $2 } /^edgelm_rejection_duration_seconds_count/ { n = $2 }
           /^edgelm_rejection_duration_seconds_bucket\{le="0.005"\}/ { b = $2 }
           END { if (n > 0) printf "server-side time of refusals (/metrics): mean %.3f ms, %d of %d under 5 ms\n", s / n * 1000, b, n }' \
        "$pfx-metrics.txt"
    fi
    if jq -e '.rss != null and .rss.samples > 0' "$R" >/dev/null; then
      jq -r 'def m: if . == null then "n/a" else (. / 1048576 * 10 | round / 10 | tostring) + " MiB" end;
        "server RSS: peak \(.rss.peak_bytes | m), steady \(.rss.steady_bytes | m) (second half \(.rss.second_half_min_bytes | m) .. \(.rss.second_half_max_bytes | m)), after warm-up \(.rss.after_warmup.bytes | m), anon peak \(.rss.peak_anon_bytes | m)"' "$R"
    fi
    echo "plan: $(mib "$plan_ref")$([[ $reserved != null ]] && echo " (the server's, from /metrics)"); cgroup limit: $([[ -n $cg ]] && mib "$LIMIT" || echo none), peak charged $(mib "$peak"), times at the limit $hits, OOM kills: $oom; server alive after the run: $alive"
  } | tee "$pfx-summary.txt"

  # Issue 6's criteria, and issue 11's (first token, goodput).
  local verdict
  verdict=$(jq -r --arg u "$unloaded_tpot" --arg oom "$oom" --arg plan "$plan_ref" --arg alive "$alive" \
    --arg ut "$unloaded_ttft" --arg agg "${AGGREGATE_TPS:-}" '
    def pass(c): if c then "PASS" else "FAIL" end;
    [ "\(pass((.requests.by_status | keys - ["200","429"] | length) == 0 and .requests.transport_errors.total == 0)) every reply 200 or 429, no transport errors",
      "\(if $oom == "n/a" then "n/a " else pass($oom == "0") end) zero OOM kills",
      "\(pass($alive != "NO")) server still running",
      (if .rss != null and .rss.samples > 0 then
         "\(pass(.rss.steady_vs_warmup != null and (.rss.steady_vs_warmup | fabs) <= 0.02)) steady RSS within 2% of its value after warm-up (\(if .rss.steady_vs_warmup == null then "n/a" else (.rss.steady_vs_warmup * 10000 | round / 100 | tostring) + "%" end))",
         "\(pass(.rss.steady_bytes < ($plan | tonumber))) steady RSS below the plan"
       else "n/a  RSS not sampled" end),
      "\(pass(.status_429.latency_from_send_ms.p99 != null and .status_429.latency_from_send_ms.p99 < 20)) p99 latency of 429s under 20 ms, from send (\(.status_429.latency_from_send_ms.p99 // "n/a") ms; from the scheduled arrival, the load generator'"'"'s lag included: \(.status_429.latency_ms.p99 // "n/a") ms)",
      "\(pass(.ok.tpot_ms.p99 != null and ($u | tonumber? // null) != null and .ok.tpot_ms.p99 <= 2 * ($u | tonumber))) p99 TPOT of admitted streams within 2x of the unloaded figure",
      "\(pass(.ok.ttft_ms.p99 != null and ($ut | tonumber? // null) != null and .ok.ttft_ms.p99 <= 3 * ($ut | tonumber))) p99 TTFT of admitted requests within 3x of the unloaded figure (\(.ok.ttft_ms.p99 // "n/a") vs \($ut) ms)",
      (if ($agg | tonumber? // null) != null then
         "\(pass(.throughput.tokens_per_s >= 0.5 * ($agg | tonumber))) goodput \(.throughput.tokens_per_s * 10 | round / 10) tokens/s of admitted requests, \(.throughput.tokens_per_s / ($agg | tonumber) * 100 | round)% of the 4-stream aggregate decode (\($agg) tokens/s, edgelm bench --streams 4)"
       else "n/a  goodput: no 4-stream aggregate measured (--aggregate)" end)
    ] | .[]' "$R")
  echo "$verdict" | tee -a "$pfx-summary.txt"
  grep -q '^FAIL' <<<"$verdict" && FAILED=1

  # Evidence from the server's log: refusals by reason, errors and warnings.
  if [[ -n $slog && -f $slog ]]; then
    {
      echo "server log ($slog): $(grep -c 'admit accept' "$slog" || true) admitted, refusals by reason: $(grep -o 'admit reject .*reason=[a-z_]*' "$slog" | sed 's/.*reason=//' | sort | uniq -c | awk '{ printf "%s=%s ", $2, $1 }')"
      local errs
      errs=$(grep -Ei '\[(error|critical)\]|\[warning\]|exception|killed' "$slog" | tail -5 || true)
      if [[ -n $errs ]]; then
        echo "last errors/warnings in the log:"
        echo "$errs"
      fi
    } | tee -a "$pfx-summary.txt"
  fi
}

# ---- edgelm ----------------------------------------------------------------
if [[ $SKIP_EDGELM -eq 0 ]]; then
  CG=""
  if [[ $CG_VER -ne 0 ]]; then cg_create "edgelm-overload-$$-edgelm" "$LIMIT"; fi
  prefault "$CG" "$MODEL"
  # The cgroup limit is the budget, given explicitly: the 'auto' budget would
  # subtract what the cgroup is already charged, the prefaulted weights included.
  cmd="$(printf '%q ' "$EDGELM" serve -m "$MODEL" --slots "$SLOTS" --ctx "$CTX" --port "$PORT" --memory-budget "$LIMIT" \
    ${THREADS:+--threads "$THREADS"} "${SERVE_ARGS[@]}")"
  log "[edgelm] starting: $cmd${CG:+ (cgroup $CG)}"
  start_in_cgroup "$CG" "$OUT/edgelm-server.log" "$cmd"
  if ! wait_healthy "http://127.0.0.1:$PORT" "$SERVER_PID"; then
    tail -20 "$OUT/edgelm-server.log" >&2
    die "edgelm did not become healthy; log: $OUT/edgelm-server.log"
  fi
  measure edgelm "http://127.0.0.1:$PORT" "$SERVER_PID" "$CG" "$OUT/edgelm-server.log"
  stop_server "$SERVER_PID"
  rc=$STOP_RC
  echo "edgelm serve exited with $rc after SIGTERM ($(grep -c 'release' "$OUT/edgelm-server.log" || true) releases logged)" | tee -a "$OUT/edgelm-summary.txt"
  [[ $rc -eq 0 ]] || FAILED=1
  [[ -n $CG ]] && echo "cgroup after exit: OOM kills $(cg_oom_kills "$CG"), peak charged $(mib "$(cg_peak "$CG")")" | tee -a "$OUT/edgelm-summary.txt"
  [[ -n $CG ]] && cg_remove "$CG"
fi

# ---- another server ---------------------------------------------------------
if [[ -n $OTHER_URL ]]; then
  OTHER_URL=${OTHER_URL%/}
  if [[ -n $OTHER_CMD ]]; then
    CG=""
    if [[ $CG_VER -ne 0 ]]; then cg_create "edgelm-overload-$$-$OTHER_NAME" "$LIMIT"; fi
    [[ -n $OTHER_MODEL ]] && prefault "$CG" "$OTHER_MODEL"
    log "[$OTHER_NAME] starting: $OTHER_CMD${CG:+ (cgroup $CG)}"
    start_in_cgroup "$CG" "$OUT/$OTHER_NAME-server.log" "$OTHER_CMD"
    if ! wait_healthy "$OTHER_URL" "$SERVER_PID"; then
      tail -20 "$OUT/$OTHER_NAME-server.log" >&2
      die "$OTHER_NAME did not become healthy; log: $OUT/$OTHER_NAME-server.log"
    fi
    measure "$OTHER_NAME" "$OTHER_URL" "$SERVER_PID" "$CG" "$OUT/$OTHER_NAME-server.log"
    stop_server "$SERVER_PID"
    rc=$STOP_RC
    echo "$OTHER_NAME exited with $rc after SIGTERM" | tee -a "$OUT/$OTHER_NAME-summary.txt"
    [[ -n $CG ]] && cg_remove "$CG"
  else
    measure "$OTHER_NAME" "$OTHER_URL" "$OTHER_PID" "" ""
  fi
fi

log "reports, CSVs, plots and logs in $OUT"
exit $FAILED
