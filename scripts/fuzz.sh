#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for
# FUZZ_SECONDS (default 60), seeded with small valid inputs. A crash fails
# the script and leaves the reproducer in build-fuzz/fuzz/. FUZZ_BUILD names
# another tree: CI reuses its clang ASan test tree (configured with
# -DEDGELM_SANITIZE=ON -DEDGELM_FUZZ=ON), whose libraries are then not
# compiled a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh clang libclang-rt-14-dev
SECS="${FUZZ_SECONDS:-60}"
BUILD="${FUZZ_BUILD:-build-fuzz}"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEDGELM_FUZZ=ON -DCMAKE_UNITY_BUILD=ON \
  -DEDGELM_BUILD_TESTS=ON -DEDGELM_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fuzz_gguf fuzz_tokenizer fuzz_request fuzz_template fuzz_schema

# Seeds: a tiny real model for the GGUF reader, a few request bodies, chat templates.
seeds="$BUILD/fuzz/seeds"
mkdir -p "$seeds/gguf" "$seeds/tokenizer" "$seeds/request" "$seeds/template" "$seeds/schema"
[[ -f "$seeds/gguf/tiny.gguf" ]] || ./build/edgelm synth --shape tiny-llama --type Q4_0 -o "$seeds/gguf/tiny.gguf" >/dev/null 2>&1 || true
# The reader never needs more than the header and tables: keep the seed small.
if [[ -f "$seeds/gguf/tiny.gguf" ]]; then head -c 65536 "$seeds/gguf/tiny.gguf" > "$seeds/gguf/head.gguf"; rm -f "$seeds/gguf/tiny.gguf"; fi
printf 'Hello, world! <|im_start|>user\n\xe2\x96\x81caf\xc3\xa9 123' > "$seeds/tokenizer/a.txt"
printf '{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}' > "$seeds/request/a.json"
printf '{"prompt":[1,2,3],"max_tokens":2,"logprobs":3,"stop":["x"]}' > "$seeds/request/b.json"
# Real chat templates, when fetched (scripts/fetch-test-assets.sh); byte 0 picks the conversation.
for f in assets/templates/*.jinja; do
  if [[ -f "$f" ]]; then { printf '\x01'; cat "$f"; } > "$seeds/template/$(basename "$f")"; fi
done
printf '\x00{%% for m in messages %%}{{ m.role }}: {{ m.content|trim }}\n{%% endfor %%}' > "$seeds/template/a.jinja"

# Schemas: byte 0 seeds the walk through the matcher.
printf '\x01{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]{2,4}$"},"n":{"type":"number","minimum":-1.5,"exclusiveMaximum":2}},"required":["a"]}' > "$seeds/schema/a.json"
printf '\x02{"anyOf":[{"type":"array","items":{"enum":[1,12,"x"]},"maxItems":3},{"type":"string","format":"date"},{"type":"null"}]}' > "$seeds/schema/b.json"
printf '\x03{"$defs":{"p":{"type":"integer","exclusiveMinimum":0}},"type":"object","additionalProperties":{"$ref":"#/$defs/p"}}' > "$seeds/schema/c.json"
printf '{"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}},"messages":[{"role":"user","content":"hi"}]}' > "$seeds/request/c.json"

status=0
for t in gguf tokenizer request template schema; do
  echo "== fuzz_$t for ${SECS}s"
  corpus="$BUILD/fuzz/corpus_$t"
  mkdir -p "$corpus"
  if ! (cd "$BUILD/fuzz" && ./fuzz_$t -max_total_time="$SECS" -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 "corpus_$t" "seeds/$t" 2>&1 | tail -n 12); then
    status=1
  fi
done
exit $status
