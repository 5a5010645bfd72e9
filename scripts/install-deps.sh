#!/usr/bin/env bash
# Installs edgelm's build and test dependencies from Debian 12 packages.
# Does nothing when they are all present. Needs root (or sudo) otherwise.
set -euo pipefail

PKGS=(build-essential cmake pkg-config git ca-certificates curl
      libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
      libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libtomlplusplus-dev gnuplot-nox
      python3-jinja2 python3-jsonschema)
# Node's npm fetches the tokenizer test vectors; a machine may have it from
# elsewhere than Debian (then the Debian package would conflict).
command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
# Optional extras: pass them as arguments (e.g. clang libclang-rt-14-dev nginx wrk).
PKGS+=("$@")

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
