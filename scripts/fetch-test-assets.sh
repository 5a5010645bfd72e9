#!/usr/bin/env bash
# Fetch llama.cpp's vocab-only GGUF files and their tokenizer test vectors
# (models/ggml-vocab-*.gguf, *.gguf.inp, *.gguf.out) into assets/vocab/, and
# its real chat templates (models/templates/*) into assets/templates/.
#
# Source: the npm package node-llama-cpp, which ships llama.cpp's source as a
# git bundle (package/llama/gitRelease.bundle, a single squashed commit on
# HEAD). Only the npm registry is needed.
#
# Idempotent: if assets/ already holds a complete set fetched from the same
# package version (the stamp assets/vocab/.fetched-from lists every file,
# relative to assets/, with its size), it does nothing. FORCE=1 re-fetches.
set -euo pipefail

PKG="node-llama-cpp@3.22.1"
BUNDLE_PATH="package/llama/gitRelease.bundle"

REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ASSETS="$REPO_ROOT/assets"
DEST="$ASSETS/vocab"
STAMP="$DEST/.fetched-from"

log() { echo "fetch-test-assets: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- already present? -------------------------------------------------------
assets_complete() {
    [[ -f "$STAMP" ]] || return 1
    grep -qx "package=$PKG" "$STAMP" || return 1
    # both folders are listed (a stamp from before templates were fetched is not)
    grep -q '^file vocab/' "$STAMP" || return 1
    grep -q '^file templates/' "$STAMP" || return 1
    # every file listed in the stamp must exist with its recorded size
    # (the size is the last field: a name may hold spaces)
    local line name size
    while IFS= read -r line; do
        name="${line% *}"
        size="${line##* }"
        [[ -f "$ASSETS/$name" ]] || return 1
        [[ "$(stat -c %s "$ASSETS/$name")" == "$size" ]] || return 1
    done < <(grep '^file ' "$STAMP" | cut -d' ' -f2-)
    return 0
}

if [[ "${FORCE:-0}" != "1" ]] && assets_complete; then
    log "assets already present in $DEST and $ASSETS/templates (from $PKG); nothing to do"
    exit 0
fi

for tool in npm git tar; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required but not installed"
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/edgelm-assets.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# ---- 1. npm pack ------------------------------------------------------------
log "downloading $PKG from the npm registry ..."
if ! (cd "$TMP" && npm pack "$PKG" --loglevel=error \
        --fetch-retries=2 --fetch-timeout=60000 >"$TMP/npm-pack.out" 2>"$TMP/npm-pack.err"); then
    tail -n 20 "$TMP/npm-pack.err" >&2 || true
    die "'npm pack $PKG' failed: cannot reach the npm registry (or the package is unavailable). \
Check network access / npm config (registry=$(npm config get registry 2>/dev/null || echo '?'))."
fi
TGZ="$TMP/$(tail -n1 "$TMP/npm-pack.out")"
[[ -f "$TGZ" ]] || TGZ="$(ls "$TMP"/node-llama-cpp-*.tgz 2>/dev/null | head -n1)"
[[ -f "$TGZ" ]] || die "npm pack produced no tarball"

# ---- 2. extract the git bundle ----------------------------------------------
tar -xzf "$TGZ" -C "$TMP" "$BUNDLE_PATH" || die "$BUNDLE_PATH not found in $(basename "$TGZ")"
BUNDLE="$TMP/$BUNDLE_PATH"
git bundle list-heads "$BUNDLE" >/dev/null || die "$BUNDLE is not a valid git bundle"

# ---- 3. clone the bundle (no checkout), export models/ggml-vocab-* and models/templates/*
git clone --quiet --bare "$BUNDLE" "$TMP/llama.git" 2>"$TMP/clone.err" \
    || { cat "$TMP/clone.err" >&2; die "git clone of the bundle failed"; }
COMMIT="$(git -C "$TMP/llama.git" rev-parse HEAD)"

mkdir -p "$TMP/out"
git -C "$TMP/llama.git" archive --format=tar HEAD -- \
        'models/ggml-vocab-*.gguf' 'models/ggml-vocab-*.gguf.inp' 'models/ggml-vocab-*.gguf.out' \
        'models/templates/*' \
    | tar -xf - -C "$TMP/out"

shopt -s nullglob
files=("$TMP"/out/models/ggml-vocab-*)
templates=("$TMP"/out/models/templates/*)
shopt -u nullglob
[[ ${#files[@]} -gt 0 ]] || die "no models/ggml-vocab-* files found in the bundle (commit $COMMIT)"
[[ ${#templates[@]} -gt 0 ]] || die "no models/templates/* files found in the bundle (commit $COMMIT)"

# ---- 4. install into assets/vocab/ and assets/templates/ ----------------------
mkdir -p "$DEST" "$ASSETS/templates"
{
    echo "package=$PKG"
    echo "llama.cpp-commit=$COMMIT"
} >"$TMP/stamp"
install_into() {  # install_into SUBDIR FILE...
    local sub="$1" f name
    shift
    for f in "$@"; do
        [[ -f "$f" ]] || continue
        name="$(basename "$f")"
        cp -f "$f" "$ASSETS/$sub/$name"
        echo "file $sub/$name $(stat -c %s "$f")" >>"$TMP/stamp"
    done
}
install_into vocab "${files[@]}"
install_into templates "${templates[@]}"
mv -f "$TMP/stamp" "$STAMP"

log "installed ${#files[@]} files into $DEST and ${#templates[@]} into $ASSETS/templates (llama.cpp commit ${COMMIT:0:12})"
