#!/usr/bin/env bash
# Sets up, builds, and runs the main job: replays a recorded PyTorch training trace through
# memsnap's caching allocator on the simulated device and reports what the allocator did.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MEMSNAP_BUILD_DIR:-"$root/build"}

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"

trace="$root/tests/data/mlp_train.trace"
echo "== memsnap replay $trace"
"$build_dir/viewer/memsnap" replay "$trace"
echo
echo "== the same replay as JSON"
"$build_dir/viewer/memsnap" replay "$trace" --json
