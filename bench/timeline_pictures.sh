#!/usr/bin/env bash
# Pictures of the same snapshots' timelines side by side: PyTorch's memory_viz page and
# memsnap's web timeline, in headless Chromium, to judge which reads better.
#   bench/timeline_pictures.sh MEMSNAP MEMORYVIZ_JS OUT_DIR SNAPSHOT...
# MEMORYVIZ_JS is torch/utils/viz/MemoryViz.js from the PyTorch repository, as for
# web_first_view.sh, whose npm packages (d3 v5, esbuild, playwright-core) it shares.
# MEMSNAP_DETAIL=N draws N bands on memsnap's side (the page's Detail).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if (( $# < 4 )); then
  sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
memsnap=$1 memory_viz=$2 out=$3
shift 3
modules=$(bash "$root/bench/web_first_view/node_modules.sh")
exec node "$root/bench/web_first_view/timeline_pictures.mjs" "$memsnap" "$memory_viz" "$modules" "$out" "$@"
