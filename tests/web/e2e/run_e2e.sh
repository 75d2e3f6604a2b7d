#!/usr/bin/env bash
# CTest's entry to the browser test: skips (77) with the reason where Chromium, Node.js or
# playwright-core is missing, else runs ui_e2e.mjs (the first snapshot is uploaded, the rest
# opened on the command line).
set -euo pipefail
memsnap=$1 build_dir=$2 upload=$3
shift 3
chromium=${MEMSNAP_CHROMIUM:-/usr/bin/chromium}
modules="$build_dir/e2e-node/node_modules"
if [[ ! -x "$chromium" ]]; then echo "SKIP: no Chromium at $chromium (scripts/setup.sh installs it)"; exit 77; fi
if ! command -v node >/dev/null; then echo "SKIP: no Node.js (scripts/setup.sh installs it)"; exit 77; fi
if [[ ! -d "$modules/playwright-core" ]]; then echo "SKIP: no playwright-core in $modules (scripts/setup_e2e.sh installs it)"; exit 77; fi
exec node "$(dirname "${BASH_SOURCE[0]}")/ui_e2e.mjs" "$memsnap" "$modules" "$build_dir/e2e-screenshots" "$upload" "$@"
