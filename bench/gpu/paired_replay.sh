#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: builds memsnap_paired_bench (memsnap's
# allocator and PyTorch's in one process, turn about; bench/paired_replay.cpp) against the
# machine's torch and runs it on each trace.
#   bash bench/gpu/paired_replay.sh [--rounds N] [--passes N] [--json] TRACE...
# Defaults: 21 rounds of 3 passes a side, the H100 transformer trace in tests/data.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/bench/gpu/env.sh"
torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
MEMSNAP_GPU_TARGETS=memsnap_paired_bench bash "$root/bench/gpu/build.sh" -DMEMSNAP_TORCH_DIR="$torch_dir" >/dev/null
build=${MEMSNAP_GPU_BUILD:-"$root/build-gpu"}
args=() traces=()
while (($#)); do
  case $1 in
    --rounds | --passes) args+=("$1" "$2"); shift 2 ;;
    --json) args+=("$1"); shift ;;
    *) traces+=("$1"); shift ;;
  esac
done
((${#traces[@]})) || traces=("$root"/tests/data/pytorch-2.11-h100/transformer_s0.trace)
for trace in "${traces[@]}"; do
  "$build/bench/memsnap_paired_bench" "$trace" "${args[@]}"
done
