#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan; in build-asan/, shared with
# scripts/sanitize.sh) and runs each for a bounded time from its seed corpus
# (tests/fuzz/corpus*), as many at once as there are cores. Any crash, sanitizer report,
# leak, timeout or memory blow-up fails the run; the input that did it is kept under
# build-asan/findings/ (add it to the seeds and write a regression test for it).
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 20; called by scripts/test.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-20}
build="$root/build-asan"
seeds="$root/tests/fuzz"

# target: seed folders
declare -A corpora=(
  [snapshot_reader_fuzz]="corpus"
  [snapshot_loader_fuzz]="corpus corpus-pickle corpus-json"
  [snapshot_json_fuzz]="corpus-json"
  [pickle_parallel_fuzz]="corpus-pickle"
  [config_parser_fuzz]="corpus-config"
  [trace_parser_fuzz]="corpus-trace"
  [http_request_fuzz]="corpus-http"
)
targets=(snapshot_reader_fuzz snapshot_loader_fuzz snapshot_json_fuzz pickle_parallel_fuzz config_parser_fuzz trace_parser_fuzz http_request_fuzz)
# Peak memory a run may reach (libFuzzer's -rss_limit_mb; its -malloc_limit_mb, one
# allocation's, follows it). The readers hold what they build to 3 bytes for each byte of input
# plus 32 MiB (snapshot/read_budget.h), and libFuzzer's inputs are a few KiB: past 1 GiB, under
# ASan's own overhead, a reader has built what its input cannot describe. The HTTP target runs
# a server, and its uploads, in the same process.
declare -A rss_limit_mb=(
  [snapshot_reader_fuzz]=1024 [snapshot_loader_fuzz]=1024 [snapshot_json_fuzz]=1024 [pickle_parallel_fuzz]=1024
  [config_parser_fuzz]=1024 [trace_parser_fuzz]=1024 [http_request_fuzz]=2048
)

bash "$root/scripts/configure_asan.sh"
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"

mkdir -p "$build/findings"
# One target per core at a time (each fuzzes on one thread): the same time per target, in
# less wall time.
fuzz_one() {
  local target=$1 work="$build/corpus/$1" seed_dirs=() dir status=0
  mkdir -p "$work"
  for dir in ${corpora[$target]}; do seed_dirs+=("$seeds/$dir"); done
  "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb="${rss_limit_mb[$target]}" \
    -print_final_stats=1 -artifact_prefix="$build/findings/$target-" "$work" "${seed_dirs[@]}" \
    >"$build/findings/$target.log" 2>&1 || status=$?
  echo "$status" >"$build/findings/$target.status"
}
running=0
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  if ((++running >= $(nproc))); then
    wait -n || true
    ((running--))
  fi
done
wait
printf '%-22s %12s %s\n' target executions result
failed=0
for target in "${targets[@]}"; do
  log="$build/findings/$target.log"
  if [[ $(cat "$build/findings/$target.status") == 0 ]]; then
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
