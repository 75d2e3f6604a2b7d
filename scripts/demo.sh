#!/usr/bin/env bash
# Sets up, builds, and runs the main job: memsnap-demo trains a toy model on memsnap's
# allocator (on the GPU when there is one, else on the simulated device) with history and
# C++ stacks recorded, and writes a snapshot; then a recorded PyTorch trace is replayed
# through the same allocator.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MEMSNAP_BUILD_DIR:-"$root/build"}

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"

mkdir -p "$build_dir/demo-output"
snapshot="$build_dir/demo-output/demo.msgpack"
echo "== memsnap-demo --out $snapshot"
"$build_dir/demo/memsnap-demo" --out "$snapshot"
echo
echo "== memsnap-demo --oom (runs out of memory on purpose; the OOM hook writes the snapshot)"
"$build_dir/demo/memsnap-demo" --oom --out "$build_dir/demo-output/oom.msgpack"
echo
trace="$root/tests/data/mlp_train.trace"
echo "== memsnap replay $trace"
"$build_dir/viewer/memsnap" replay "$trace"
