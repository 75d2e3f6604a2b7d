#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, carrying bench/gpu/debs and
# bench/gpu/shared-bench: uploads to `memsnap serve` (bench/web_upload_bench.py), two versions
# side by side. "after" is this tree; "before" is this tree with PATCH taken back out (made
# HERE, e.g. `mkdir -p build-ref/ab && git diff BASE -- web snapshot > build-ref/ab/web.patch`,
# with build-ref/ab carried).
#   bash bench/gpu/upload_ab.sh PATCH [ROUNDS] [STEPS...]
# Records one PyTorch pickle per STEPS (the shared kit's transformer loop; default 300 and
# 1000 steps: about 296,000 and 987,000 trace events, 24 and 80 MiB) and uploads each ROUNDS
# times (default 11) to both builds, alternating.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: upload_ab.sh PATCH [ROUNDS] [STEPS...]}")
rounds=${2:-11}
shift $(($# < 2 ? $# : 2))
steps=("$@")
((${#steps[@]})) || steps=(300 1000)
source "$root/bench/gpu/env.sh"
before=$(bash "$root/bench/gpu/before_tree.sh" "$patch_file")
for tree in "$root" "$before"; do
  MEMSNAP_GPU_BUILD="$tree/build-gpu" MEMSNAP_GPU_TARGETS="memsnap memsnap-serve" bash "$tree/bench/gpu/build.sh" >/dev/null
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cores)"
for n in "${steps[@]}"; do
  pickle=/tmp/memsnap-upload-$n.pickle
  [[ -s $pickle ]] || python3 "$root/bench/gpu/shared-bench/make_pytorch_trace.py" "$pickle" "$n" >/dev/null
  "$root/build-gpu/cli/memsnap" stats "$pickle" | head -1
  python3 "$root/bench/web_upload_bench.py" "$before/build-gpu/cli/memsnap" "$root/build-gpu/cli/memsnap" "$pickle" \
    --rounds "$rounds"
done
