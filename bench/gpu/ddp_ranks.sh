#!/usr/bin/env bash
# Run THERE (the GPU machine) after python_package.sh: examples/ddp_ranks.py under torchrun, one
# rank running out of memory, then `memsnap ranks` on the job's snapshots. torchrun's processes
# get no LD_LIBRARY_PATH: the installed package must find its libraries itself. With fewer GPUs
# than processes the ranks share them (gloo).
#   bash bench/gpu/ddp_ranks.sh [NPROC] [OUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nproc=${1:-2}
out=${2:-/tmp/ddp-job}
rm -rf "$out"
status=0
(unset LD_LIBRARY_PATH; python3 -m torch.distributed.run --standalone --nproc-per-node "$nproc" \
  "$root/examples/ddp_ranks.py" --out "$out") || status=$?
source "$root/bench/gpu/env.sh"
"$root/build-gpu/cli/memsnap" ranks "$out"
exit "$status"
