#!/usr/bin/env python3
"""Slow and idle clients against a running `edgelm serve`, and how long a
health check waits behind them.

    python3 bench/slow_clients.py PORT N KIND

KIND: headers   N connections send their request line and headers a byte
                every 0.5 s
      smallbody a POST with a 1000-byte body, its body a byte every 0.5 s
      bigbody   the same with a 100 kB body
      idle      one request each, then nothing (keep-alive)

Two seconds after the N connections are open, five GET /health go out at
once on new connections; prints the median, min and max of their times and
their status codes. Before edgelm's connection lobby (46db83c), 100
connections on the default 32 workers held the health checks 1.0 s
(headers), 4.1 s (small bodies) and 8.6 s (large bodies).
"""
import socket
import statistics
import sys
import threading
import time

PORT, N, KIND = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
OPENERS = {
    "headers": b"P",
    "smallbody": b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
    "bigbody": b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{",
    "idle": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
}
if KIND not in OPENERS:
    sys.exit(f"KIND must be one of {', '.join(OPENERS)}")
stop = False
socks = []
lock = threading.Lock()


def opener():
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
        s.sendall(OPENERS[KIND])
        if KIND == "idle":
            s.settimeout(10)
            s.recv(4096)
    except OSError:
        return
    with lock:
        socks.append(s)


def trickle():
    rest = b"OST /tokenize HTTP/1.1\r\nX-Pad: " + b"a" * 10000 if KIND == "headers" else b" " * 10000
    i = 0
    while not stop and KIND != "idle":
        time.sleep(0.5)
        for s in list(socks):
            try:
                s.sendall(rest[i:i + 1])
            except OSError:
                pass
        i += 1


threads = [threading.Thread(target=opener) for _ in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
trickler = threading.Thread(target=trickle)
trickler.start()
time.sleep(2)
times, codes = [], []


def probe():
    t = time.time()
    try:
        c = socket.create_connection(("127.0.0.1", PORT), timeout=60)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c.settimeout(60)
        d = c.recv(4096)
        codes.append(d[9:12].decode() if d else "none")
        c.close()
    except OSError as e:
        codes.append(type(e).__name__)
    times.append(time.time() - t)


probes = [threading.Thread(target=probe) for _ in range(5)]
for t in probes:
    t.start()
for t in probes:
    t.join()
stop = True
trickler.join()
for s in socks:
    s.close()
print(f"{KIND} N={len(socks)}: /health s median {statistics.median(times):.3f} "
      f"min {min(times):.3f} max {max(times):.3f}, codes {codes}")
