#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: an A/B of two versions of memsnap,
# each against PyTorch with memsnap_paired_bench. "after" is this tree; "before" is this tree
# with PATCH taken back out (made HERE, e.g. `mkdir -p build-ref/ab && git diff BASE --
# allocator history > build-ref/ab/ab.patch`, with build-ref/ab carried), so both use the same
# bench and harness.
#   bash bench/gpu/paired_ab.sh PATCH [--rounds N] [--only MODE] [TRACE[:ALLOC_CONF]...]
# Defaults: 11 rounds, history off, transformer_s0, transformer_s5_90 and pow2div_s3 (under
# roundup_power2_divisions:4). Each trace runs before, after, before, after (separate
# processes, both harnesses in each); compare the ratios to PyTorch, which every run measures
# side by side.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: paired_ab.sh PATCH [--rounds N] [--only MODE] [TRACE[:CONF]...]}")
shift
rounds=11 only=off traces=()
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) traces+=("$1"); shift ;;
  esac
done
data="$root/tests/data/pytorch-2.11-h100"
((${#traces[@]})) || traces=("$data/transformer_s0.trace" "$data/transformer_s5_90.trace"
                             "$data/pow2div_s3.trace:roundup_power2_divisions:4")
source "$root/bench/gpu/env.sh"
torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
before=$(bash "$root/bench/gpu/before_tree.sh" "$patch_file")
for tree in "$root" "$before"; do
  MEMSNAP_GPU_BUILD="$tree/build-gpu" MEMSNAP_GPU_TARGETS=memsnap_paired_bench \
    bash "$tree/bench/gpu/build.sh" -DMEMSNAP_TORCH_DIR="$torch_dir" >/dev/null
done
for spec in "${traces[@]}"; do
  trace=${spec%%:*}
  conf=""
  [[ $spec == *:* ]] && conf=${spec#*:}
  echo "== $(basename "$trace")${conf:+ under $conf}"
  for turn in 1 2; do
    for side in before after; do
      tree=$root
      [[ $side == before ]] && tree=$before
      printf '%s %s: ' "$side" "$turn"
      env -u MEMSNAP_ALLOC_CONF -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF="$conf" \
        "$tree/build-gpu/bench/memsnap_paired_bench" "$trace" --rounds "$rounds" --only "$only" --json
    done
  done
done
