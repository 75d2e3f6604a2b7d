#!/usr/bin/env bash
# Sets up a fresh machine, builds with warnings as errors, runs every test through CTest, then
# the suite again under AddressSanitizer + UndefinedBehaviorSanitizer and the concurrency tests
# under ThreadSanitizer (scripts/sanitize.sh), then each libFuzzer target for a bounded time.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MEMSNAP_BUILD_DIR:-"$root/build"}

# Each stage prints its wall time, so a run that grows shows where (CI has a time budget).
stage() {
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "== stage $name: $((SECONDS - started)) s (total $SECONDS s)"
}
stage setup bash "$root/scripts/setup.sh"
stage setup-e2e bash "$root/scripts/setup_e2e.sh" "$build_dir"
stage build bash "$root/scripts/build.sh" -DMEMSNAP_WERROR=ON -DMEMSNAP_BUILD_TESTS=ON
stage ctest ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)"
stage sanitizers bash "$root/scripts/sanitize.sh"
# Every fuzz target for a bounded time from its seeds; any finding fails (scripts/fuzz.sh).
stage fuzz bash "$root/scripts/fuzz.sh" "${MEMSNAP_FUZZ_SECONDS:-20}"
