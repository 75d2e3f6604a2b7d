#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, after bench/gpu/build.sh: builds
# PyTorch's replay harness (the shared bench kit, carried as bench/gpu/shared-bench) and
# replays each trace through memsnap's allocator and PyTorch's, alternately, on the CUDA
# backend (bench/side_by_side.py).
#   bash bench/gpu/side_by_side.sh [--rounds N] [--passes N] TRACE...
# Defaults: 11 rounds, 5 passes, the H100 transformer traces in tests/data.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/bench/gpu/env.sh"
build=${MEMSNAP_GPU_BUILD:-"$root/build-gpu"}
rounds=11 passes=5
traces=()
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    *) traces+=("$1"); shift ;;
  esac
done
((${#traces[@]})) || traces=("$root"/tests/data/pytorch-2.11-h100/transformer_s0.trace)
kit="$root/bench/gpu/shared-bench"
[[ -f "$kit/build_torch_cca_replay.sh" ]] || { echo "no $kit (run bench/gpu/fetch_debs.sh here and carry it)" >&2; exit 1; }
bash "$kit/build_torch_cca_replay.sh" /tmp/torch_cca_replay
python3 "$root/bench/side_by_side.py" --memsnap "$build/bench/memsnap_bench" --torch /tmp/torch_cca_replay \
  --backend cuda --rounds "$rounds" --passes "$passes" "${traces[@]}"
