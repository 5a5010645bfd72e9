#!/usr/bin/env bash
# edgelm and llama.cpp side by side, same file, same threads, one run:
#   prompt tokens/s (-p), single-stream decode tokens/s (-n), both again at a
#   context depth (llama-bench -d), and aggregate decode tokens/s at several
#   parallel streams (edgelm's continuous batching vs llama-batched-bench),
#   with the ratios, and a PNG of tokens/s against streams.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin bench/compare_llamacpp.sh MODEL.gguf [MODEL2.gguf ...]
#
# Both sides are reported by the same statistic: the median of the
# repetitions (llama-bench's per-repetition samples_ts; llama-batched-bench run
# REPS times), with the spread (min..max) beside it, and ratios of medians.
# edgelm's decode at depth against its decode from an empty context is the
# median of pairs run alternately (edgelm bench --with-depth-0).
#
# A shared host's memory speed moves in phases of seconds to minutes (on a
# KVM guest: single-stream decode of one binary at 40 or at 55 tokens/s,
# minute to minute), and the blocks above run each side for minutes
# apart, so a ratio of their medians can be one side's phase. So decode is
# also measured in PAIRS (5): one repetition of each side back to back,
# the order swapped every pair (edgelm from an 8-token prompt, llama-bench
# from an empty context), and the ratio is the median of the pairs'
# ratios.
# The load average is printed before and after each model; QUIET=1 first waits
# (up to 10 minutes) for a 1-minute load average under 0.5.
#
# llama.cpp is not part of edgelm: build it yourself (outside this repo) and
# point LLAMA_BIN at its bin/ folder. Its errors are shown, never discarded.
# Env: THREADS (2), PROMPT (128), GEN (64), DEPTH (2048; 0 skips the depth
# rows), STREAMS (1,2,4,8), REPS (5), PAIRS (5; 0 skips), OUT (build/bench), QUIET (0),
# EDGELM_ARGS (extra flags for edgelm bench, e.g. "--isa avx2" beside a
# llama.cpp built without AVX-512).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN="${LLAMA_BIN:?set LLAMA_BIN to the bin folder of a llama.cpp build}"
THREADS="${THREADS:-2}"; PROMPT="${PROMPT:-128}"; GEN="${GEN:-64}"; DEPTH="${DEPTH:-2048}"
STREAMS="${STREAMS:-1,2,4,8}"; REPS="${REPS:-5}"; PAIRS="${PAIRS:-5}"; OUT="${OUT:-build/bench}"; QUIET="${QUIET:-0}"
EDGELM="${EDGELM:-./build/edgelm}"
mkdir -p "$OUT"
[[ $# -ge 1 ]] || { echo "usage: $0 MODEL.gguf [...]" >&2; exit 1; }

load1() { cut -d' ' -f1 /proc/loadavg; }
wait_quiet() {
  [[ "$QUIET" == 1 ]] || return 0
  for _ in $(seq 120); do
    awk -v l="$(load1)" 'BEGIN { exit !(l < 0.5) }' && return 0
    sleep 5
  done
  echo "warning: the load average stayed at or above 0.5 for 10 minutes; measuring anyway (load $(load1))" >&2
}
# Runs a llama.cpp tool; on failure prints the command and the end of its stderr.
run_llama() {
  local err="$1"; shift
  if ! "$@" 2> "$err"; then
    echo "error: llama.cpp failed: $*" >&2
    tail -n 20 "$err" >&2
    return 1
  fi
}

# One repetition of single-stream decode a side, for the alternated pairs:
# pair_edgelm / pair_llama MODEL NAME.
pair_edgelm() {
  "$EDGELM" bench -m "$1" --threads "$THREADS" -p 8 -n "$GEN" --streams 1 -r 1 --json ${EDGELM_ARGS:-} \
    > "$OUT/$2.pair-edgelm.json"
}
pair_llama() {
  run_llama "$OUT/$2.llama-bench.err" "$LLAMA_BIN/llama-bench" -m "$1" -t "$THREADS" -p 0 -n "$GEN" \
    -r 1 -o json > "$OUT/$2.pair-llama.json"
}

summary="$OUT/summary.txt"
: > "$summary"
for model in "$@"; do
  name=$(basename "$model" .gguf)
  wait_quiet
  before=$(load1)
  depth_args=()
  [[ "$DEPTH" -gt 0 ]] && depth_args=(-d "0,$DEPTH")
  "$EDGELM" bench -m "$model" --threads "$THREADS" -p "$PROMPT" -n "$GEN" --streams "$STREAMS" -r "$REPS" \
    --bandwidth --json ${EDGELM_ARGS:-} > "$OUT/$name.edgelm.json"
  if [[ "$DEPTH" -gt 0 ]]; then
    "$EDGELM" bench -m "$model" --threads "$THREADS" -p "$PROMPT" -n "$GEN" --streams 1 -r "$REPS" -d "$DEPTH" \
      --with-depth-0 --json ${EDGELM_ARGS:-} > "$OUT/$name.edgelm-depth.json"
  else
    echo '{}' > "$OUT/$name.edgelm-depth.json"
  fi
  run_llama "$OUT/$name.llama-bench.err" "$LLAMA_BIN/llama-bench" -m "$model" -t "$THREADS" -p "$PROMPT" -n "$GEN" \
    "${depth_args[@]}" -r "$REPS" -o json > "$OUT/$name.llama-bench.json"
  : > "$OUT/$name.llama-batched.jsonl"
  for _ in $(seq "$REPS"); do
    run_llama "$OUT/$name.llama-batched.err" "$LLAMA_BIN/llama-batched-bench" -m "$model" -t "$THREADS" -c 8192 \
      -b 2048 -ub 512 -npp 16 -ntg "$GEN" -npl "$STREAMS" --output-format jsonl \
      | grep '^{' >> "$OUT/$name.llama-batched.jsonl"
  done
  # Decode in alternated pairs: lines "edgelm_tps llama_tps".
  : > "$OUT/$name.pairs.txt"
  for i in $(seq "$PAIRS"); do
    if (( i % 2 )); then
      pair_edgelm "$model" "$name"; pair_llama "$model" "$name"
    else
      pair_llama "$model" "$name"; pair_edgelm "$model" "$name"
    fi
    python3 -c 'import json, sys
e = json.load(open(sys.argv[1])); l = json.load(open(sys.argv[2]))
print(e["decode_samples"][0], next(r["samples_ts"][0] for r in l if r["n_gen"] > 0))' \
      "$OUT/$name.pair-edgelm.json" "$OUT/$name.pair-llama.json" >> "$OUT/$name.pairs.txt"
  done
  after=$(load1)
  echo "== $name ($THREADS threads, $REPS repetitions a side; load average $before before, $after after)" | tee -a "$summary"
  python3 - "$OUT/$name" <<'PY' | tee -a "$summary"
import json, statistics, sys
base = sys.argv[1]
e = json.load(open(base + ".edgelm.json"))
ed = json.load(open(base + ".edgelm-depth.json"))
lb = json.load(open(base + ".llama-bench.json"))

def spread(v):
    return (statistics.median(v), min(v), max(v)) if v else (float("nan"),) * 3

def bench_row(n_prompt, n_gen, depth):
    for r in lb:
        if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen and r.get("n_depth", 0) == depth:
            return spread(r["samples_ts"])
    return spread([])

batched = {}
for line in open(base + ".llama-batched.jsonl"):
    r = json.loads(line)
    batched.setdefault(r["pl"], []).append(r.get("speed_tg", 0))

def row(what, ours, theirs):
    m1, lo1, hi1 = ours
    m2, lo2, hi2 = theirs
    ratio = m1 / m2 if m2 else float("nan")
    print(f"  {what:<30} edgelm {m1:7.1f} ({lo1:6.1f}..{hi1:6.1f})   "
          f"llama.cpp {m2:7.1f} ({lo2:6.1f}..{hi2:6.1f})   ratio {ratio:5.2f}")

pp, tg = e["prompt_tokens"], e["gen_tokens"]
row(f"prompt {pp} tokens/s", spread(e["prompt_samples"]), bench_row(pp, 0, 0))
row("decode tokens/s", spread(e["decode_samples"]), bench_row(0, tg, 0))
print(f"  (edgelm decodes after its {pp}-token prompt, llama-bench from an empty context)")
if ed:
    d = ed["depth"]
    row(f"prompt {pp} at depth {d}", spread(ed["prompt_samples"]), bench_row(pp, 0, d))
    row(f"decode at depth {d}", spread(ed["decode_samples"]), bench_row(0, tg, d))
    lo, hi = min(ed["depth_ratio_samples"]), max(ed["depth_ratio_samples"])
    print(f"  edgelm decode at depth {d} / at depth 0: {ed['depth_ratio']:.2f} ({lo:.2f}..{hi:.2f}), "
          f"the median of {len(ed['depth_ratio_samples'])} pairs run alternately")
single = e["decode_tokens_per_s"]
with open(base + ".streams.dat", "w") as f:
    for s in e["streams"]:
        n = s["streams"]
        theirs = spread(batched.get(n, []))
        row(f"{n} streams aggregate t/s", spread(s["samples"]), theirs)
        f.write(f"{n} {s['decode_tokens_per_s']} {theirs[0]}\n")
four = next((s["decode_tokens_per_s"] for s in e["streams"] if s["streams"] == 4), None)
if four:
    print(f"  4 streams / own single stream: {four / single:.2f}x")
pairs = [tuple(map(float, line.split())) for line in open(base + ".pairs.txt") if line.strip()]
if pairs:
    ratios = [a / b for a, b in pairs]
    print(f"  decode in {len(pairs)} alternated pairs: edgelm {statistics.median(a for a, _ in pairs):.1f}, "
          f"llama.cpp {statistics.median(b for _, b in pairs):.1f}; ratio of each pair {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}..{max(ratios):.2f}), median")
if "bandwidth_gb_per_s" in e:
    tg_theirs = bench_row(0, tg, 0)[0]
    print(f"  bandwidth {e['bandwidth_gb_per_s']:.1f} GB/s -> decode limit {e['decode_limit_tokens_per_s']:.1f} t/s; "
          f"edgelm reaches {100*single/e['decode_limit_tokens_per_s']:.0f}%, llama.cpp {100*tg_theirs/e['decode_limit_tokens_per_s']:.0f}%")
if "weights_read_gb_per_s" in e:
    # The same probe over edgelm's packed weights, the bytes its decode reads
    # (a fresh buffer and the weights can read at different speeds on a VM).
    limit = e["weights_read_gb_per_s"] * 1e9 / e["weights_bytes"]
    print(f"  edgelm's packed weights read at {e['weights_read_gb_per_s']:.1f} GB/s -> decode limit {limit:.1f} t/s; "
          f"edgelm reaches {100*single/limit:.0f}% of that")
if "decode_share_of_weights_read_samples" in e:
    # Each repetition against the weights read just before it (one phase of
    # a shared host; the probe above may have caught another).
    sh = e["decode_share_of_weights_read_samples"]
    print(f"  each repetition against the weights' read just before it: "
          f"{100*e['decode_share_of_weights_read']:.0f}% ({100*min(sh):.0f}..{100*max(sh):.0f}%), "
          f"median of {len(sh)}")
PY
  if command -v gnuplot >/dev/null; then
    gnuplot <<GP
set terminal pngcairo noenhanced size 800,500
set output "$OUT/$name.streams.png"
set title "$name: aggregate decode tokens/s against parallel streams ($THREADS threads)"
set xlabel "parallel streams"; set ylabel "tokens/s (all streams)"; set key left top; set grid
set logscale x 2
plot "$OUT/$name.streams.dat" using 1:2 with linespoints lw 2 title "edgelm", \
     "$OUT/$name.streams.dat" using 1:3 with linespoints lw 2 title "llama.cpp (llama-batched-bench)"
GP
  fi
done
echo "summary: $summary"
