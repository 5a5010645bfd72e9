#!/usr/bin/env bash
# edgelm and llama.cpp side by side, same file, same threads, one run:
#   prompt tokens/s (-p), single-stream decode tokens/s (-n), and aggregate
#   decode tokens/s at several parallel streams (edgelm's continuous batching
#   vs llama-batched-bench), with the ratios, and a PNG of tokens/s against
#   streams.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin bench/compare_llamacpp.sh MODEL.gguf [MODEL2.gguf ...]
#
# llama.cpp is not part of edgelm: build it yourself (outside this repo) and
# point LLAMA_BIN at its bin/ folder. Env: THREADS (2), PROMPT (128), GEN (64),
# STREAMS (1,2,4,8), REPS (3), OUT (build/bench), EDGELM_ARGS (extra flags for
# edgelm bench, e.g. "--isa avx2" beside a llama.cpp built without AVX-512).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN="${LLAMA_BIN:?set LLAMA_BIN to the bin folder of a llama.cpp build}"
THREADS="${THREADS:-2}"; PROMPT="${PROMPT:-128}"; GEN="${GEN:-64}"
STREAMS="${STREAMS:-1,2,4,8}"; REPS="${REPS:-3}"; OUT="${OUT:-build/bench}"
EDGELM="${EDGELM:-./build/edgelm}"
mkdir -p "$OUT"
[[ $# -ge 1 ]] || { echo "usage: $0 MODEL.gguf [...]" >&2; exit 1; }

summary="$OUT/summary.txt"
: > "$summary"
for model in "$@"; do
  name=$(basename "$model" .gguf)
  echo "== $name ($THREADS threads, load average $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$summary"
  "$EDGELM" bench -m "$model" --threads "$THREADS" -p "$PROMPT" -n "$GEN" --streams "$STREAMS" -r "$REPS" \
    --bandwidth --json ${EDGELM_ARGS:-} > "$OUT/$name.edgelm.json"
  "$LLAMA_BIN/llama-bench" -m "$model" -t "$THREADS" -p "$PROMPT" -n "$GEN" -r "$REPS" -o json \
    > "$OUT/$name.llama-bench.json" 2>/dev/null
  "$LLAMA_BIN/llama-batched-bench" -m "$model" -t "$THREADS" -c 8192 -b 2048 -ub 512 -npp 16 -ntg "$GEN" \
    -npl "$STREAMS" --output-format jsonl 2>/dev/null | grep '^{' > "$OUT/$name.llama-batched.jsonl" || true
  python3 - "$OUT/$name" <<'PY' | tee -a "$summary"
import json, sys
base = sys.argv[1]
e = json.load(open(base + ".edgelm.json"))
lb = json.load(open(base + ".llama-bench.json"))
pp = next(r["avg_ts"] for r in lb if r["n_prompt"] > 0 and r["n_gen"] == 0)
tg = next(r["avg_ts"] for r in lb if r["n_gen"] > 0 and r["n_prompt"] == 0)
batched = {}
for line in open(base + ".llama-batched.jsonl"):
    r = json.loads(line)
    batched[r["pl"]] = r.get("speed_tg", 0)
def row(what, ours, theirs):
    ratio = ours / theirs if theirs else float("nan")
    print(f"  {what:<28} edgelm {ours:8.1f}   llama.cpp {theirs:8.1f}   ratio {ratio:5.2f}")
row(f"prompt {e['prompt_tokens']} tokens/s", e["prompt_tokens_per_s"], pp)
row(f"decode tokens/s", e["decode_tokens_per_s"], tg)
single = e["decode_tokens_per_s"]
with open(base + ".streams.dat", "w") as f:
    for s in e["streams"]:
        n = s["streams"]; ours = s["decode_tokens_per_s"]
        row(f"{n} streams aggregate t/s", ours, batched.get(n, 0))
        f.write(f"{n} {ours} {batched.get(n, 0)}\n")
    print(f"  4 streams / own single stream: {next((s['decode_tokens_per_s'] for s in e['streams'] if s['streams']==4), 0)/single:.2f}x")
if "bandwidth_gb_per_s" in e:
    print(f"  bandwidth {e['bandwidth_gb_per_s']:.1f} GB/s -> decode limit {e['decode_limit_tokens_per_s']:.1f} t/s; "
          f"edgelm reaches {100*single/e['decode_limit_tokens_per_s']:.0f}%, llama.cpp {100*tg/e['decode_limit_tokens_per_s']:.0f}%")
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
