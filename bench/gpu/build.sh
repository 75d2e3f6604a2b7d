#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: builds memsnap with the CUDA backend
# into build-gpu/ against the carried Debian packages (bench/gpu/env.sh); MEMSNAP_GPU_TARGETS
# names targets to build instead of all (e.g. "memsnap"). Extra arguments go to
# CMake's configure step.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/bench/gpu/env.sh"
build=${MEMSNAP_GPU_BUILD:-"$root/build-gpu"}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG" "$@" >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log" >&2; exit 1; }
cmake --build "$build" --parallel "$(nproc)" ${MEMSNAP_GPU_TARGETS:+--target $MEMSNAP_GPU_TARGETS} >"$build.build.log" 2>&1 \
  || { grep -E 'error|Error' "$build.build.log" | head -30 >&2; exit 1; }
echo "built into $build"
