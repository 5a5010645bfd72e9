#!/usr/bin/env bash
# Installs the official `openai` npm package into assets/npm/ (ignored by git),
# for the test that drives edgelm with a real OpenAI client. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=assets/npm
VERSION="${OPENAI_NPM_VERSION:-4}"
if [[ -f "$DEST/node_modules/openai/package.json" ]]; then exit 0; fi
command -v npm >/dev/null 2>&1 || { echo "fetch-openai-client: npm is not installed" >&2; exit 1; }
mkdir -p "$DEST"
npm install --prefix "$DEST" --no-audit --no-fund --loglevel=error "openai@$VERSION" >/dev/null
echo "fetch-openai-client: installed openai@$(node -p "require('./$DEST/node_modules/openai/package.json').version" 2>/dev/null || echo "$VERSION") into $DEST" >&2
