#!/usr/bin/env bash
# CTest's entry to the browser tests: skips (77) with the reason where Chromium, Node.js or
# playwright-core is missing, else runs SCRIPT (ui_e2e.mjs: the first snapshot is uploaded, the
# rest opened on the command line; ranks_e2e.mjs: a job folder and what it holds).
#   run_e2e.sh SCRIPT MEMSNAP BUILD_DIR ARGS...
set -euo pipefail
script=$1 memsnap=$2 build_dir=$3
shift 3
chromium=${MEMSNAP_CHROMIUM:-/usr/bin/chromium}
modules="$build_dir/e2e-node/node_modules"
if [[ ! -x "$chromium" ]]; then echo "SKIP: no Chromium at $chromium (scripts/setup.sh installs it)"; exit 77; fi
if ! command -v node >/dev/null; then echo "SKIP: no Node.js (scripts/setup.sh installs it)"; exit 77; fi
if [[ ! -d "$modules/playwright-core" ]]; then echo "SKIP: no playwright-core in $modules (scripts/setup_e2e.sh installs it)"; exit 77; fi
exec node "$(dirname "${BASH_SOURCE[0]}")/$script" "$memsnap" "$modules" "$build_dir/e2e-screenshots" "$@"
