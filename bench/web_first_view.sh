#!/usr/bin/env bash
# From a snapshot file to its painted memory timeline in headless Chromium: memsnap serve's page
# (the file on the command line, and uploaded through the page) against PyTorch's memory_viz page.
#   bench/web_first_view.sh [--rounds N] MEMSNAP MEMORYVIZ_JS SNAPSHOT...
# MEMORYVIZ_JS is torch/utils/viz/MemoryViz.js from the PyTorch repository (the page behind
# pytorch.org/memory_viz; the torch package does not ship it). d3 v5, which it imports from a
# CDN (bundled here by esbuild, as the CDN bundles it), and playwright-core come from npm
# (versions in bench/web_first_view/package-lock.json), installed once into
# build/bench-web-node; Chromium is Debian's (scripts/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=5
if [[ ${1:-} == --rounds ]]; then rounds=$2; shift 2; fi
if (( $# < 3 )); then
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
memsnap=$1 memory_viz=$2
shift 2
modules=$(bash "$root/bench/web_first_view/node_modules.sh")
exec node "$root/bench/web_first_view/web_first_view.mjs" "$memsnap" "$memory_viz" "$modules" "$rounds" "$@"
