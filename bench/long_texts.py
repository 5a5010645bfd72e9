#!/usr/bin/env python3
"""Many long texts at once against a running `edgelm serve`: the server's
resident size before, at its peak and after.

    python3 bench/long_texts.py PORT PID [ROUTE] [N] [BYTES] [TEXT]

ROUTE: tokenize (POST /tokenize) or chat (POST /v1/chat/completions,
max_tokens 2); N requests at once (32), each BYTES of text (200000) made of
TEXT: words, spaces, base64 or cjk. Three rounds. The peak is VmHWM, reset
before each round through /proc/PID/clear_refs (needs the server's user).
"""
import http.client
import json
import random
import string
import sys
import threading
import time


def field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name):
                return int(line.split()[1]) // 1024
    return -1


def make_text(kind, size):
    rnd = random.Random(1)
    if kind == "spaces":
        return " " * size
    if kind == "base64":
        return "".join(rnd.choice(string.ascii_letters + string.digits + "+/") for _ in range(size))
    if kind == "cjk":
        return "".join(chr(rnd.randint(0x4E00, 0x9FFF)) for _ in range(size // 3))
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "12345"]
    return " ".join(rnd.choice(words) for _ in range(size // 4))[:size]


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    route = sys.argv[3] if len(sys.argv) > 3 else "tokenize"
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 32
    size = int(sys.argv[5]) if len(sys.argv) > 5 else 200000
    kind = sys.argv[6] if len(sys.argv) > 6 else "words"
    text = make_text(kind, size)
    if route == "chat":
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
    else:
        path = "/tokenize"
        body = {"content": text}
    data = json.dumps(body, ensure_ascii=False).encode()

    def one(out, i):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            c.request("POST", path, data, {"Content-Type": "application/json"})
            r = c.getresponse()
            reply = r.read()
            code = ""
            if r.status >= 400:
                try:
                    code = " " + json.loads(reply)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    pass
            out[i] = f"{r.status}{code}"
        except OSError as e:
            out[i] = type(e).__name__

    print(f"{route} x {n}, {len(data)} bytes each ({kind}); resident MB")
    for rnd in range(3):
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        before = field(pid, "VmRSS")
        out = [None] * n
        ts = [threading.Thread(target=one, args=(out, i)) for i in range(n)]
        t = time.time()
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        statuses = {s: out.count(s) for s in set(out)}
        print(f"round {rnd}: {time.time() - t:.1f} s, statuses {statuses}, "
              f"before {before}, peak {field(pid, 'VmHWM')}, after {field(pid, 'VmRSS')}")


if __name__ == "__main__":
    main()
