#!/usr/bin/env bash
# The test suite under sanitizers, each in its own build folder (clang):
#   build-asan: AddressSanitizer + UndefinedBehaviorSanitizer (leaks included): every GoogleTest
#     binary run whole (tests share a process, as in a real program: caches, thread-locals and
#     remembered stack walks carry over from test to test), then the other CTest tests (CLI,
#     goldens, damaged files; not the browser, load and memory-bound tests) through CTest;
#   build-tsan: ThreadSanitizer, the tests that run threads against each other.
# Any sanitizer report or failing test fails the run. Called by scripts/test.sh (CI); run
# alone after scripts/setup.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=$(nproc)
started=$SECONDS

# Runs each named GoogleTest binary of BUILD (two at a time), each to its own log; prints the
# summary line of each and fails if any failed. Extra arguments go to every binary.
run_gtest_binaries() {
  local build=$1 binaries=$2
  shift 2
  local logs="$build/sanitizer-logs"
  mkdir -p "$logs"
  # shellcheck disable=SC2086
  if ! printf '%s\n' $binaries | xargs -P "$jobs" -I{} bash -c \
       '"$0/tests/{}" "${@:2}" >"$1/{}.log" 2>&1 || { echo "FAILED: {} (see $1/{}.log)"; exit 1; }' \
       "$build" "$logs" "$@"; then
    grep -h -E '^\[  FAILED  \]|ERROR: |SUMMARY: |WARNING: ThreadSanitizer' "$logs"/*.log | head -40 >&2
    return 1
  fi
  for binary in $binaries; do
    printf '%-28s %s\n' "$binary" "$(grep -E '^\[  PASSED  \]' "$logs/$binary.log" | tail -1)"
  done
}

echo "== AddressSanitizer + UndefinedBehaviorSanitizer (clang, build-asan)"
bash "$root/scripts/configure_asan.sh"
cmake --build "$root/build-asan" --parallel "$jobs"
echo "build-asan built ($((SECONDS - started)) s)"
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The longest first (snapshot ~85 s, web ~60, allocator ~60 under ASan on 2 cores), so the two
# at a time end together.
asan_binaries="memsnap_snapshot_tests memsnap_web_tests memsnap_allocator_tests memsnap_viewer_tests memsnap_replay_tests memsnap_history_tests"
# memsnap record's tests, where the CUDA toolkit's CUPTI headers let the recorder be built.
[[ -x "$root/build-asan/tests/memsnap_record_tests" ]] && asan_binaries+=" memsnap_record_tests"
run_gtest_binaries "$root/build-asan" "$asan_binaries"
echo "GoogleTest binaries under ASan+UBSan done ($((SECONDS - started)) s)"
# Every test that is not one of GoogleTest's (their names start with a lower-case folder:
# cli., web., viewer., history., readme.); the damaged-file runs on a quarter of their inputs.
# Left to the plain build: the browser tests and the load test (what they add to the server's
# own tests is the browser's side) and the memory bounds on hostile inputs (which a sanitizer's
# shadow memory makes meaningless; the fuzzers run the same readers under AddressSanitizer).
MEMSNAP_HOSTILE_SHARE=0.25 ctest --test-dir "$root/build-asan" --output-on-failure --parallel "$jobs" -R '^[a-z]' \
  -E '^web\.(load|[a-z_]*e2e)$|^cli\.hostile_memory$'
unset ASAN_OPTIONS UBSAN_OPTIONS
echo "CTest tests under ASan+UBSan done ($((SECONDS - started)) s)"

echo "== ThreadSanitizer (clang, build-tsan): the concurrency tests"
cmake -S "$root" -B "$root/build-tsan" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMEMSNAP_SANITIZE=thread -DMEMSNAP_WITH_CUDA=OFF -DMEMSNAP_BUILD_BENCH=OFF -DMEMSNAP_WERROR=ON >/dev/null
# One program of the files whose tests run threads (tests/CMakeLists.txt), in $jobs shards at once.
cmake --build "$root/build-tsan" --parallel "$jobs" --target memsnap_concurrency_tests
echo "build-tsan built ($((SECONDS - started)) s)"
tsan_logs="$root/build-tsan/sanitizer-logs"
mkdir -p "$tsan_logs"
tsan_failed=0
for ((shard = 0; shard < jobs; shard++)); do
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp" \
  GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$shard "$root/build-tsan/tests/memsnap_concurrency_tests" \
    --gtest_filter='*Concurrency*:*Stress*:*Thread*:*Parallel*:BytePipe.*:ViewWarmer.*:StoredSnapshotCache.*:ServerHostile.*Whole*:ServerHostile.SlowClients*:ServerHostile.IdleKeepAlive*:ServerHostile.PastTheConnectionLimit*:ServerHostile.ManyConcurrentClients:ServerHostile.ClientsThatDoNotRead*:ResponseCache.*:IdleTrimmer.*' \
    >"$tsan_logs/shard$shard.log" 2>&1 &
done
for ((shard = 0; shard < jobs; shard++)); do
  wait -n || tsan_failed=1
done
if ((tsan_failed)); then
  grep -h -E '^\[  FAILED  \]|ERROR: |SUMMARY: |WARNING: ThreadSanitizer' "$tsan_logs"/shard*.log | head -40 >&2
  echo "FAILED: memsnap_concurrency_tests under ThreadSanitizer (see $tsan_logs/shard*.log)" >&2
  exit 1
fi
# A filter that matched nothing would pass silently: the shards together must have run tests.
tsan_ran=$(grep -h -o -E '^\[==========\] [0-9]+ tests? from' "$tsan_logs"/shard*.log | awk '{s += $2} END {print s + 0}')
if ((tsan_ran < 40)); then
  echo "FAILED: ThreadSanitizer ran $tsan_ran tests; the filter no longer matches the threaded tests" >&2
  exit 1
fi
for ((shard = 0; shard < jobs; shard++)); do
  printf 'memsnap_concurrency_tests shard %d/%d %s\n' "$shard" "$jobs" "$(grep -E '^\[  PASSED  \]' "$tsan_logs/shard$shard.log" | tail -1)"
done
echo "sanitizers: no report ($((SECONDS - started)) s)"
