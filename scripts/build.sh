#!/usr/bin/env bash
# Configures and builds memsnap into build/ (or $MEMSNAP_BUILD_DIR).
# Extra arguments go to CMake's configure step, e.g. -DMEMSNAP_WERROR=ON.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MEMSNAP_BUILD_DIR:-"$root/build"}

cmake -S "$root" -B "$build_dir" -G Ninja "$@" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)"
