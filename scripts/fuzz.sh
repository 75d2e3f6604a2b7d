#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan; in build-asan/, shared with
# scripts/sanitize.sh) and runs each for a bounded time from its seed corpus
# (tests/fuzz/corpus*). Any crash, sanitizer report, leak, timeout or memory blow-up fails the
# run; the input that did it is kept under build-asan/findings/ (add it to the seeds and write
# a regression test for it).
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 20; called by scripts/test.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-20}
build="$root/build-asan"
seeds="$root/tests/fuzz"

# target: seed folders
declare -A corpora=(
  [snapshot_reader_fuzz]="corpus"
  [snapshot_loader_fuzz]="corpus corpus-pickle"
  [pickle_parallel_fuzz]="corpus-pickle"
  [config_parser_fuzz]="corpus-config"
  [trace_parser_fuzz]="corpus-trace"
  [http_request_fuzz]="corpus-http"
)
targets=(snapshot_reader_fuzz snapshot_loader_fuzz pickle_parallel_fuzz config_parser_fuzz trace_parser_fuzz http_request_fuzz)

bash "$root/scripts/configure_asan.sh"
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"

mkdir -p "$build/findings"
printf '%-22s %12s %s\n' target executions result
failed=0
for target in "${targets[@]}"; do
  work="$build/corpus/$target"
  mkdir -p "$work"
  seed_dirs=()
  for dir in ${corpora[$target]}; do seed_dirs+=("$seeds/$dir"); done
  log="$build/findings/$target.log"
  if "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$build/findings/$target-" "$work" "${seed_dirs[@]}" >"$log" 2>&1; then
    result=ok
  else
    result="FINDING (see $log)"
    failed=1
  fi
  executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  printf '%-22s %12s %s\n' "$target" "$executions" "$result"
done
if ((failed)); then
  grep -h -A3 -E 'ERROR|SUMMARY|==[0-9]+==' "$build"/findings/*.log | head -60 >&2
  exit 1
fi
