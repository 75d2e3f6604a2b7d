#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: an A/B of two versions of the memsnap
# Python package on what recording history costs a training step (bench/torch_recording_ab.py).
# "after" is this tree; "before" is this tree with PATCH taken back out (made HERE, e.g.
# `git diff BASE -- history > build-ref/ab/history.patch`, with build-ref/ab carried). Both are
# built and installed with pip into their own folders, side by side.
#   bash bench/gpu/recording_ab.sh PATCH [--model M] [--rounds N] [--cycles N] [--modes MODES]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: recording_ab.sh PATCH [torch_recording_ab.py options]}")
shift
source "$root/bench/gpu/env.sh"
work=${MEMSNAP_AB_DIR:-/tmp/memsnap-recording-ab}
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
python3 "$root/bench/torch_recording_ab.py" "$work/before" "$work/after" "$@"
