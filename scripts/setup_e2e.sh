#!/usr/bin/env bash
# Installs playwright-core (the version pinned in tests/web/e2e/package-lock.json) from npm into
# BUILD_DIR/e2e-node for the browser tests; they drive Debian's chromium, which setup.sh
# installs. A second run with the same lock file does nothing and needs no network.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:?usage: setup_e2e.sh BUILD_DIR}
target="$build_dir/e2e-node"
mkdir -p "$target"
if [[ -d "$target/node_modules/playwright-core" ]] && cmp -s "$root/tests/web/e2e/package-lock.json" "$target/package-lock.json"; then
  exit 0
fi
cp "$root/tests/web/e2e/package.json" "$root/tests/web/e2e/package-lock.json" "$target/"
echo "memsnap setup: installing playwright-core into $target"
(cd "$target" && npm ci --no-audit --no-fund --loglevel=error)
