#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, carrying bench/gpu/perf-debs (made
# HERE by bench/gpu/fetch_perf.sh): profiles a command with Debian's perf and prints where
# its CPU time went, by library and function.
#
#   bash bench/gpu/profile.sh OUT_DIR -- COMMAND...
#
# OUT_DIR gets perf.data, report.txt (flat: self time by library and symbol) and
# libraries.txt (self time by library). With PROFILE_CALL_GRAPH=1 the samples carry their
# stacks (unwound from DWARF, at a fifth of the rate) and OUT_DIR also gets children.txt: the
# time spent in each function and everything it called, for functions of memsnap and libdw.
# PROFILE_DELAY_MS=N starts sampling N ms after the command starts (past its start-up).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: profile.sh OUT_DIR -- COMMAND...}
shift
[[ ${1:-} == -- ]] && shift
source "$root/bench/gpu/perf_env.sh"
mkdir -p "$out"
if [[ ${PROFILE_CALL_GRAPH:-0} == 1 ]]; then
  perf record -F 599 --call-graph dwarf,16384 ${PROFILE_DELAY_MS:+-D "$PROFILE_DELAY_MS"} -o "$out/perf.data" -- "$@"
  perf report -i "$out/perf.data" --children --sort sym --stdio -g none 2>"$out/children.err" \
    | grep -E 'memsnap|dwfl|dwarf_|elf_' | head -80 >"$out/children.txt" || true
else
  perf record -F 2999 ${PROFILE_DELAY_MS:+-D "$PROFILE_DELAY_MS"} -o "$out/perf.data" -- "$@"
fi
# (Whole reports first: a pipe into head would end perf with SIGPIPE, failing the script.)
perf report -i "$out/perf.data" --no-children --sort dso,sym --stdio >"$out/report.full" 2>"$out/report.err"
perf report -i "$out/perf.data" --no-children --sort dso --stdio >"$out/libraries.full" 2>>"$out/report.err"
grep -v '^$' "$out/report.full" | head -120 >"$out/report.txt" || true
grep -v -e '^$' -e '^#' "$out/libraries.full" | head -40 >"$out/libraries.txt" || true
cat "$out/libraries.txt" "$out/report.txt"
