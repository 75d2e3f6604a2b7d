#!/usr/bin/env bash
# Runs examples/ddp_ranks.py under torchrun and compares its ranks with memsnap ranks.
#   bash examples/ddp_ranks.sh [NPROC] [OUT_DIR] [MEMSNAP_CLI]
# Needs the memsnap Python package installed (pip install ./python) and the memsnap CLI.
set -euo pipefail
nproc=${1:-2}
out=${2:-ddp-job}
memsnap=${3:-memsnap}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$out"
# The ranks are compared whether the job succeeded or not: a failed job is when it matters most.
status=0
python3 -m torch.distributed.run --standalone --nproc-per-node "$nproc" "$here/ddp_ranks.py" --out "$out" || status=$?
"$memsnap" ranks "$out"
exit "$status"
