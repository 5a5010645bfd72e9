#!/usr/bin/env python3
"""Time to first token per turn of a chat, as a chat client sends it.

Each turn sends the whole conversation so far (a shared system prompt, the
earlier turns with the server's own answers) plus a new user message, streams
the answer, and records the time to its first content chunk. Works against any
OpenAI-compatible server (edgelm, llama-server). Prints one line per turn and,
with --json, a JSON report.

  python3 bench/chat_turns.py --url http://127.0.0.1:18080 --turns 5 \
      --system-words 380 --turn-words 150 --max-tokens 32

Word counts are approximate token counts (random English-ish words, about
1.3 tokens each with Qwen2's vocabulary); the server's usage figures give the
real prompt sizes and cached tokens.
"""
import argparse
import json
import random
import sys
import time
import urllib.request

WORDS = ("sensor reading board camera voltage network signal status report alarm threshold value "
         "temperature pressure humidity device gateway packet battery motor field station").split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def stream_chat(url, messages, max_tokens, extra):
    body = {"messages": messages, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    body.update(extra)
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft = None
    text = []
    usage = {}
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                piece = ch.get("delta", {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text.append(piece)
    return ttft, "".join(text), usage, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:18080")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--system-words", type=int, default=380)
    ap.add_argument("--turn-words", type=int, default=150)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-cache", action="store_true", help='send "cache_prompt": false')
    ap.add_argument("--json", help="write a JSON report here")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    messages = [{"role": "system", "content": words(rng, a.system_words)}]
    extra = {"cache_prompt": False} if a.no_cache else {}
    rows = []
    for turn in range(1, a.turns + 1):
        messages.append({"role": "user", "content": words(rng, a.turn_words)})
        ttft, answer, usage, total = stream_chat(a.url, messages, a.max_tokens, extra)
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", usage.get("cached_tokens"))
        rows.append({"turn": turn, "ttft_s": ttft, "total_s": total, "prompt_tokens": usage.get("prompt_tokens"),
                     "cached_tokens": cached})
        print(f"turn {turn}: ttft {ttft:.3f} s  prompt {usage.get('prompt_tokens')}  cached {cached}  "
              f"total {total:.2f} s", flush=True)
        messages.append({"role": "assistant", "content": answer})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"url": a.url, "turns": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
