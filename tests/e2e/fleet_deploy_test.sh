#!/usr/bin/env bash
# The deployment files against the binary they describe:
#   - deploy/edgelm.toml.example names every `edgelm serve` flag, its
#     commented defaults are the binary's, and a server starts from it, with
#     file values applied and flags overriding them; a typo is an error with
#     file and line;
#   - docs/fleet.md documents exactly the metrics /metrics serves, and the
#     alert rules use only those;
#   - `edgelm plan --systemd` prints a drop-in with MemoryHigh < MemoryMax;
#   - `cmake --install` puts binary, unit (ExecStart = the installed binary)
#     and example config in place, and systemd-analyze accepts the unit.
#
#   tests/e2e/fleet_deploy_test.sh path/to/edgelm [build-dir]   (CTest: e2e.fleet_deploy)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/e2e/listen_port.sh
source "$ROOT/tests/e2e/listen_port.sh"
EDGELM=$(realpath "${1:-$ROOT/build/edgelm}")
BUILD=${2:-}
EXAMPLE="$ROOT/deploy/edgelm.toml.example"

fail() {
  echo "fleet_deploy: FAIL: $*" >&2
  exit 1
}
say() { echo "fleet_deploy: $*"; }
[[ -x "$EDGELM" ]] || fail "no edgelm binary at $EDGELM"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/edgelm-deploy.XXXXXX")
PID=""
cleanup() {
  local rc=$?
  [[ -n "$PID" ]] && { kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }
  [[ $rc -ne 0 && -f "$WORK/serve.log" ]] && tail -n 30 "$WORK/serve.log" >&2
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the example config names every flag, with the binary's defaults ----------
"$EDGELM" serve --help >"$WORK/help.txt"
# Long flags of serve, less those that are not settings.
sed -n 's/^ *\(-[a-zA-Z],\)\{0,1\}--\([a-z][a-z0-9-]*\).*/\2/p' "$WORK/help.txt" |
  grep -vxE 'help|config|debug-step-ms|debug-token-ms' | sort >"$WORK/flags.txt"
sed -n 's/^#\{0,1\}\([a-z][a-z0-9_-]*\) = .*/\1/p' "$EXAMPLE" | tr _ - | sort >"$WORK/keys.txt"
if ! diff -u "$WORK/flags.txt" "$WORK/keys.txt" >"$WORK/keys.diff"; then
  cat "$WORK/keys.diff" >&2
  fail "deploy/edgelm.toml.example and 'edgelm serve --help' differ in keys (- flag only, + example only)"
fi
# `#key = value` lines show the default: it must be the one --help shows.
while IFS= read -r line; do
  key=${line%% = *}
  key=${key#\#}
  want=${line#* = }
  want=${want//\"/}
  # "--batch INT:INT in [1 - 65536]=256   Most tokens ..." -> 256
  have=$(grep -E "^ *(-[a-zA-Z],)?--$key " "$WORK/help.txt" | head -1 | sed 's/  .*//; s/^ *//' |
    sed -n 's/.*=\([^ ]*\)$/\1/p')
  [[ -z "$have" ]] && continue  # no default shown (flags, 'unset' options)
  if ! awk -v a="$want" -v b="$have" 'BEGIN { if (a == b || (a + 0 == b + 0 && a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/)) exit 0; exit 1 }'; then
    fail "deploy/edgelm.toml.example says '$key' defaults to '$want', edgelm serve --help says '$have'"
  fi
done < <(grep -E '^#[a-z][a-z0-9_-]* = ' "$EXAMPLE")
say "example config: $(wc -l <"$WORK/keys.txt") keys, one per serve flag, defaults as --help shows"

# ---- a server from the example: file values apply, flags override them ---------
"$EDGELM" synth --shape tiny-llama --type Q8_0 -o "$WORK/tiny.gguf" >/dev/null 2>&1 || fail "edgelm synth failed"
sed -e 's/^#\([a-z][a-z0-9_-]* = \)/\1/' -e 's/^model-id = .*/model-id = "from-the-file"/' "$EXAMPLE" >"$WORK/edgelm.toml"
grep -q '^model-id = "from-the-file"' "$WORK/edgelm.toml" || fail "the example has no model-id line"
"$EDGELM" serve --config "$WORK/edgelm.toml" -m "$WORK/tiny.gguf" --slots 2 --ctx 256 --threads 1 \
  --host 127.0.0.1 --port 0 >"$WORK/serve.log" 2>&1 &
PID=$!
port=$(listen_port "$WORK/serve.log" "$PID") || fail "edgelm serve --config (example with every key set) did not start listening"
[[ $port != 8080 ]] || fail "--port 0 on the command line did not override port = 8080 in the file"
curl -sf "http://127.0.0.1:$port/v1/models" | grep -q '"from-the-file"' || fail "model-id from the file not applied"
grep -q "config $WORK/edgelm.toml" "$WORK/serve.log" || fail "serve does not log the config file it read"
say "serve --config: values from the file applied, command-line flags win"

# ---- the documented metrics are the served ones ----------------------------------
curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/metrics.txt" || fail "/metrics failed"
awk '/^# TYPE / { print $3 }' "$WORK/metrics.txt" | sort -u >"$WORK/served.txt"
grep -o '^| `edgelm_[a-z_]*' "$ROOT/docs/fleet.md" | sed 's/^| `//' | sort -u >"$WORK/documented.txt"
if ! diff -u "$WORK/served.txt" "$WORK/documented.txt" >"$WORK/metrics.diff"; then
  cat "$WORK/metrics.diff" >&2
  fail "docs/fleet.md's metric table and /metrics differ (- served only, + documented only)"
fi
for m in $(grep -o 'edgelm_[a-z_]*' "$ROOT/deploy/prometheus/edgelm-alerts.yml" | sed 's/_bucket$//' | sort -u); do
  grep -qx "$m" "$WORK/served.txt" || fail "deploy/prometheus/edgelm-alerts.yml uses $m, which /metrics does not serve"
done
say "metrics: $(wc -l <"$WORK/served.txt") families served, all documented, alert rules use only these"
kill -TERM "$PID"
wait "$PID" || fail "edgelm serve did not exit 0 after SIGTERM"
PID=""

# A typo in the file stops the server with file, line and key.
printf 'slots = 2\nslot = 4\n' >"$WORK/typo.toml"
if "$EDGELM" serve --config "$WORK/typo.toml" -m "$WORK/tiny.gguf" >"$WORK/typo.log" 2>&1; then
  fail "a config file with an unknown key was accepted"
fi
grep -q "typo.toml:2: slot: unknown key" "$WORK/typo.log" || fail "unhelpful error for a typo: $(cat "$WORK/typo.log")"

# ---- plan --systemd ----------------------------------------------------------------
"$EDGELM" plan -m "$WORK/tiny.gguf" --slots 2 --ctx 256 --systemd >"$WORK/dropin.conf" ||
  fail "edgelm plan --systemd failed"
grep -qx '\[Service\]' "$WORK/dropin.conf" || fail "plan --systemd prints no [Service] section"
high=$(sed -n 's/^MemoryHigh=\([0-9]*\)M$/\1/p' "$WORK/dropin.conf")
max=$(sed -n 's/^MemoryMax=\([0-9]*\)M$/\1/p' "$WORK/dropin.conf")
[[ -n "$high" && -n "$max" && $high -lt $max ]] || fail "plan --systemd: bad limits: $(cat "$WORK/dropin.conf")"
say "plan --systemd: MemoryHigh=${high}M MemoryMax=${max}M for the tiny model, 2 slots x 256"

# ---- cmake --install -----------------------------------------------------------------
if [[ -n "$BUILD" && -f "$BUILD/cmake_install.cmake" ]]; then
  P="$WORK/prefix"
  cmake --install "$BUILD" --prefix "$P" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log" >&2; fail "cmake --install failed"; }
  for f in bin/edgelm lib/systemd/system/edgelm.service share/edgelm/edgelm.toml.example \
           share/edgelm/nginx/edgelm.conf share/edgelm/prometheus/prometheus.yml share/doc/edgelm/fleet.md; do
    [[ -e "$P/$f" ]] || fail "cmake --install did not install $f"
  done
  grep -qx "ExecStart=$P/bin/edgelm serve --config /etc/edgelm/edgelm.toml" "$P/lib/systemd/system/edgelm.service" ||
    fail "the installed unit's ExecStart is not the installed binary: $(grep ExecStart "$P/lib/systemd/system/edgelm.service")"
  if command -v systemd-analyze >/dev/null; then
    # Complaints about the unit itself name it with a line number.
    systemd-analyze verify "$P/lib/systemd/system/edgelm.service" >"$WORK/verify.log" 2>&1 || true
    if grep -E 'edgelm\.service:[0-9]+:' "$WORK/verify.log" >&2; then fail "systemd-analyze verify complains about the unit"; fi
    say "cmake --install: binary, unit, example config and docs in place; systemd-analyze verify accepts the unit"
  else
    say "cmake --install: binary, unit, example config and docs in place (no systemd-analyze to verify the unit)"
  fi
else
  say "no build directory given: cmake --install not checked"
fi
say "PASS"
