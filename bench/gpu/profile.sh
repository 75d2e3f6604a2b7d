#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, carrying bench/gpu/perf-debs (made
# HERE by bench/gpu/fetch_perf.sh): profiles a command with Debian's perf and prints where
# its CPU time went, by library and function.
#
#   bash bench/gpu/profile.sh OUT_DIR -- COMMAND...
#
# OUT_DIR gets perf.data and report.txt (flat: self time by library and symbol).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: profile.sh OUT_DIR -- COMMAND...}
shift
[[ ${1:-} == -- ]] && shift
prefix=/tmp/memsnap-perf
if [[ ! -x "$prefix/usr/bin/perf" ]]; then
  mkdir -p "$prefix"
  for deb in "$root"/bench/gpu/perf-debs/*.deb; do dpkg -x "$deb" "$prefix"; done
fi
perf() { LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu" \
  PERF_EXEC_PATH="$prefix/usr/lib/perf-core" "$prefix/usr/bin/perf" "$@"; }
mkdir -p "$out"
perf record -F 2999 -o "$out/perf.data" -- "$@"
perf report -i "$out/perf.data" --no-children --sort dso,sym --stdio 2>"$out/report.err" \
  | grep -v '^$' | head -120 > "$out/report.txt"
cat "$out/report.txt"
