# Sourced by the end-to-end scripts. An `edgelm serve --port 0` picks a free
# port and logs "listening on http://127.0.0.1:PORT".
#
# listen_port LOG [PID]: prints that port once LOG shows it; fails after
# about 20 s (a sanitizer build starts slowly), or as soon as PID has exited.
listen_port() {
  local log=$1 pid=${2:-} port
  for _ in $(seq 400); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [[ -n "$port" ]] && { echo "$port"; return 0; }
    [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.05
  done
  return 1
}
