#!/usr/bin/env bash
# Sets up, builds, and runs the main job: memsnap-demo trains a toy model on memsnap's
# allocator (on the GPU when there is one, else on the simulated device) with history and
# C++ stacks recorded, and writes a snapshot; memsnap summarizes it and renders its views
# (flamegraph, segments, timeline: SVGs to open in a browser); a real PyTorch snapshot is
# rendered the same way, and a recorded PyTorch trace is replayed through the allocator. With
# MEMSNAP_DEMO_SERVE=1 it ends by serving them all in the web viewer (memsnap serve).
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
views="$build_dir/demo-output"
memsnap="$build_dir/cli/memsnap"
echo "== memsnap stats $snapshot"
"$memsnap" stats "$snapshot"
"$memsnap" flamegraph "$snapshot" -o "$views/demo-flamegraph.svg"
"$memsnap" segments "$snapshot" -o "$views/demo-segments.svg"
"$memsnap" timeline "$snapshot" -o "$views/demo-timeline.svg"
pytorch="$root/tests/data/pytorch-2.11-h100/transformer_s0.pickle.gz"
"$memsnap" flamegraph "$pytorch" -o "$views/pytorch-flamegraph.svg"
"$memsnap" timeline "$pytorch" -o "$views/pytorch-timeline.svg"
echo "views written (open them in a browser):"
ls -1 "$views"/*.svg
echo
trace="$root/tests/data/pytorch-2.11/mlp_train.trace"
echo "== memsnap replay $trace"
"$memsnap" replay "$trace"
echo
if [[ "${MEMSNAP_DEMO_SERVE:-0}" == 1 ]]; then
  echo "== memsnap serve (Ctrl-C to stop)"
  exec "$memsnap" serve "$snapshot" "$build_dir/demo-output/oom.msgpack" "$pytorch"
fi
echo "== browse them all in the web viewer (MEMSNAP_DEMO_SERVE=1 makes this script do it):"
echo "   $memsnap serve $snapshot $build_dir/demo-output/oom.msgpack $pytorch"
