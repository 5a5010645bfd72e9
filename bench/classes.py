#!/usr/bin/env python3
"""Sensors and chat on one board: issue 15's scenario against a running server.

Chat clients send streamed chat requests back to back and retry every 429
after --retry-ms; sensor clients send one request every 1/--sensor-rate
seconds with "X-Priority: sensor" (serve with --class-header). First an
unloaded sensor request is timed alone. Prints, per class, the replies by
status and the time to first token (p50, p99), and the server's resident
memory before and after (/metrics).

  edgelm serve -m MODEL --slots 4 --ctx 1024 --reserve-slots sensor=1 --class-header --port 18080
  python3 bench/classes.py --url http://127.0.0.1:18080
"""
import argparse
import json
import random
import threading
import time
import urllib.error
import urllib.request

WORDS = "reading value threshold alarm camera battery pressure signal gateway station device field".split()


def request(url, prompt, max_tokens, cls):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}
    headers = {"Content-Type": "application/json"}
    if cls:
        headers["X-Priority"] = cls
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
    t0 = time.monotonic()
    ttft = None
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for raw in r:
                if ttft is None and raw.startswith(b"data: {"):
                    ttft = time.monotonic() - t0
            return 200, ttft
    except urllib.error.HTTPError as e:
        return e.code, None
    except Exception:
        return -1, None


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def rss(url):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("edgelm_resident_memory_bytes "):
                    return float(line.split()[1])
    except Exception:
        return float("nan")
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:18080")
    ap.add_argument("--chat-clients", type=int, default=8)
    ap.add_argument("--sensor-clients", type=int, default=2)
    ap.add_argument("--sensor-rate", type=float, default=1.0, help="requests/s per sensor client")
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--prompt-words", type=int, default=75, help="about 100 tokens")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--retry-ms", type=float, default=50)
    a = ap.parse_args()
    rng = random.Random(1)
    prompt = lambda: " ".join(rng.choice(WORDS) for _ in range(a.prompt_words))

    unloaded = [request(a.url, prompt(), a.max_tokens, "sensor")[1] for _ in range(3)]
    unloaded_ttft = sorted(t for t in unloaded if t is not None)[1]
    rss_before = rss(a.url)
    results = {"chat": [], "sensor": []}
    lock = threading.Lock()
    end = time.monotonic() + a.duration

    def chat_client():
        while time.monotonic() < end:
            st, ttft = request(a.url, prompt(), a.max_tokens, "chat")
            with lock:
                results["chat"].append((st, ttft))
            if st == 429:
                time.sleep(a.retry_ms / 1000)

    def sensor_one():
        st, ttft = request(a.url, prompt(), a.max_tokens, "sensor")
        with lock:
            results["sensor"].append((st, ttft))

    def sensor_client(phase):
        t = time.monotonic() + phase
        threads = []
        while t < end:
            time.sleep(max(0, t - time.monotonic()))
            th = threading.Thread(target=sensor_one)
            th.start()
            threads.append(th)
            t += 1 / a.sensor_rate
        for th in threads:
            th.join()

    ts = [threading.Thread(target=chat_client) for _ in range(a.chat_clients)]
    ts += [threading.Thread(target=sensor_client, args=(i / (a.sensor_clients * a.sensor_rate),))
           for i in range(a.sensor_clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rss_after = rss(a.url)
    print(f"unloaded sensor TTFT {unloaded_ttft * 1000:.0f} ms")
    for cls, rs in results.items():
        by = {}
        for st, _ in rs:
            by[st] = by.get(st, 0) + 1
        tt = [t for st, t in rs if st == 200 and t is not None]
        print(f"{cls}: {len(rs)} requests, by status {dict(sorted(by.items()))}, TTFT p50 {pct(tt, 50) * 1000:.0f} ms "
              f"p99 {pct(tt, 99) * 1000:.0f} ms ({pct(tt, 99) / unloaded_ttft:.2f}x unloaded)")
    print(f"server RSS before {rss_before / 2**20:.1f} MiB, after {rss_after / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
