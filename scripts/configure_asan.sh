#!/usr/bin/env bash
# Configures build-asan/: clang with AddressSanitizer + UndefinedBehaviorSanitizer and
# libFuzzer's coverage on every library, the tests and the fuzz targets in one folder, so the
# sanitized test suite (scripts/sanitize.sh) and the fuzzers (scripts/fuzz.sh) share one build
# of the libraries. clang, not gcc: gcc took over 20 minutes for this build on 2 cores, clang
# about 5.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMSNAP_FUZZ=ON -DMEMSNAP_BUILD_TESTS=ON \
  -DMEMSNAP_BUILD_BENCH=OFF -DMEMSNAP_WITH_CUDA=OFF -DMEMSNAP_WERROR=ON >/dev/null
