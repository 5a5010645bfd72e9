#!/usr/bin/env bash
# Cross-compiles the whole edgelm program for aarch64 with Debian's arm64
# builds of its libraries (multiarch: installed here when missing, as root or
# with sudo) and prints the binary's path on stdout. Used by
# scripts/test-aarch64-model.sh and bench/aarch64_proxy.sh.
#
#   bash scripts/build-aarch64-program.sh [BUILD_DIR]   # default build-aarch64-model/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${1:-$ROOT/build-aarch64-model}"

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO=sudo
pkgs=(g++-aarch64-linux-gnu qemu-user libspdlog-dev:arm64 libfmt-dev:arm64 libpcre2-dev:arm64
  libcpp-httplib-dev:arm64)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig \
  cmake -S "$ROOT" -B "$OUT" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
  -DCMAKE_FIND_ROOT_PATH="/usr/aarch64-linux-gnu;/usr" -DCMAKE_LIBRARY_ARCHITECTURE=aarch64-linux-gnu \
  -DEDGELM_BUILD_TESTS=OFF -DEDGELM_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$OUT" -j"$(nproc)" --target edgelm >/dev/null
aarch64-linux-gnu-readelf -h "$OUT/edgelm" | grep -q 'AArch64' ||
  { echo "build-aarch64-program: $OUT/edgelm is not an aarch64 binary" >&2; exit 1; }
echo "$OUT/edgelm"
