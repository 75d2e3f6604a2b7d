#!/usr/bin/env bash
# Configures and builds memsnap into build/ (or $MEMSNAP_BUILD_DIR).
# Extra arguments go to CMake's configure step, e.g. -DMEMSNAP_WERROR=ON. Configure's own lines
# about memsnap (whether the CUDA toolkit and CUPTI were found, what is left out) are shown.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MEMSNAP_BUILD_DIR:-"$root/build"}

configure_log=$(mktemp)
trap 'rm -f "$configure_log"' EXIT
if ! cmake -S "$root" -B "$build_dir" -G Ninja "$@" >"$configure_log" 2>&1; then
  cat "$configure_log" >&2
  exit 1
fi
grep -E '^-- memsnap: |^CMake Warning' "$configure_log" || true
cmake --build "$build_dir" --parallel "$(nproc)"
