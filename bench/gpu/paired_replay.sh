#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: builds memsnap_paired_bench (memsnap's
# allocator and PyTorch's in one process, turn about; bench/paired_replay.cpp) against the
# machine's torch and runs it on each trace.
#   bash bench/gpu/paired_replay.sh [--rounds N] [--passes N] [--only MODE] [--harness H] [--json] [TRACE...]
# Defaults: 21 rounds, each turn enough passes for 60,000 events; every trace in
# tests/data/pytorch-2.11-h100 and tests/data/pytorch-2.11, each under the
# PYTORCH_CUDA_ALLOC_CONF it was recorded with (expected_segments.json, or the allocator
# settings in the pickle the trace was made from; both allocators read it). A trace named on
# the command line runs under the caller's environment.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/bench/gpu/env.sh"
torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
MEMSNAP_GPU_TARGETS=memsnap_paired_bench bash "$root/bench/gpu/build.sh" -DMEMSNAP_TORCH_DIR="$torch_dir" >/dev/null
build=${MEMSNAP_GPU_BUILD:-"$root/build-gpu"}
args=() traces=()
while (($#)); do
  case $1 in
    --rounds | --passes | --only | --harness) args+=("$1" "$2"); shift 2 ;;
    --json) args+=("$1"); shift ;;
    *) traces+=("$1"); shift ;;
  esac
done
if ((${#traces[@]})); then
  for trace in "${traces[@]}"; do "$build/bench/memsnap_paired_bench" "$trace" "${args[@]}"; done
  exit 0
fi
run_under() {  # CONF TRACE
  env -u MEMSNAP_ALLOC_CONF -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF="$1" \
    "$build/bench/memsnap_paired_bench" "$2" "${args[@]}"
}
data="$root/tests/data/pytorch-2.11-h100"
for trace in "$data"/*.trace; do
  name=$(basename "$trace" .trace)
  conf=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], {}).get('config', ''))" \
    "$data/expected_segments.json" "$name")
  run_under "$conf" "$trace"
done
# Made from the pickles beside them (our own test data, so unpickling them is safe).
for trace in "$root/tests/data/pytorch-2.11"/*.trace; do
  conf=$(python3 -c "import pickle, sys; print(pickle.load(open(sys.argv[1], 'rb'))['allocator_settings']['PYTORCH_CUDA_ALLOC_CONF'])" \
    "${trace%.trace}.pickle")
  run_under "$conf" "$trace"
done
