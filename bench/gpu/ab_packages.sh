#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: the two sides of an A/B of the memsnap
# Python package. Builds and installs, side by side with pip, this tree's package into
# DIR/after and that of this tree with PATCH taken back out (bench/gpu/before_tree.sh) into
# DIR/before, then prints DIR (default /tmp/memsnap-recording-ab, emptied first).
#   work=$(bash bench/gpu/ab_packages.sh PATCH [DIR])
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: ab_packages.sh PATCH [DIR]}")
work=${2:-/tmp/memsnap-recording-ab}
source "$root/bench/gpu/env.sh"
rm -rf "$work"
mkdir -p "$work"
bash "$root/bench/gpu/before_tree.sh" "$patch_file" "$work/before-tree" >/dev/null
install_package() {  # SOURCE_TREE TARGET_DIR
  CMAKE_BUILD_PARALLEL_LEVEL=$(( $(nproc) / 2 )) python3 -m pip install --no-build-isolation \
    --no-deps --no-index --target "$2" "$1/python" >"$2.log" 2>&1 \
    || { echo "building the package from $1 failed:" >&2; tail -30 "$2.log" >&2; return 1; }
}
install_package "$root" "$work/after" &
after=$!
install_package "$work/before-tree" "$work/before" &
before=$!
wait "$after"
wait "$before"
echo "$work"
