#!/usr/bin/env bash
# The test suite under sanitizers, each in its own build folder:
#   build-asan: AddressSanitizer + UndefinedBehaviorSanitizer (leaks included), every test;
#   build-tsan: ThreadSanitizer, the tests that run threads against each other.
# Any report fails the run. Called by scripts/test.sh; run alone after scripts/setup.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
common=(-DMEMSNAP_WITH_CUDA=OFF -DMEMSNAP_BUILD_BENCH=OFF -DMEMSNAP_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)

echo "== AddressSanitizer + UndefinedBehaviorSanitizer: every test"
bash "$root/scripts/setup_e2e.sh" "$root/build-asan"
MEMSNAP_BUILD_DIR="$root/build-asan" bash "$root/scripts/build.sh" "${common[@]}" \
  -DMEMSNAP_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure --parallel "$(nproc)"

echo "== ThreadSanitizer: the concurrency tests"
cmake -S "$root" -B "$root/build-tsan" -G Ninja "${common[@]}" -DMEMSNAP_SANITIZE=thread >/dev/null
cmake --build "$root/build-tsan" --parallel "$(nproc)" \
  --target memsnap_allocator_tests memsnap_snapshot_tests memsnap_history_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp \
  ctest --test-dir "$root/build-tsan" --output-on-failure --parallel "$(nproc)" \
  -R 'Concurrency|Thread|OutOfMemory.*Thread'
