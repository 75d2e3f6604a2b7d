#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, carrying bench/gpu/debs,
# bench/gpu/shared-bench and a folder holding flamegraph.pl (_memory_viz.py draws its SVGs with
# it and would download it otherwise); bench/gpu/perf-debs too for the profile.
#
#   bash bench/gpu/viewer_runs.sh OUT_DIR FLAMEGRAPH_PL [ROUNDS]
#
# Records the reference PyTorch snapshot (the shared kit's transformer loop, 300 steps, Python
# stacks: about 300,000 trace events, 24 MiB), then on this host's CPU: bench/viewer_bench.py
# (memsnap stats / flamegraph / segments against this torch's own _memory_viz.py, alternating)
# and, with perf-debs carried, a profile of `memsnap stats` on it. OUT_DIR gets the pickle
# gzipped (reference.pickle.gz), viewer_bench.txt and profile/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: viewer_runs.sh OUT_DIR FLAMEGRAPH_PL [ROUNDS]}
flamegraph=${2:?usage: viewer_runs.sh OUT_DIR FLAMEGRAPH_PL [ROUNDS]}
rounds=${3:-7}
mkdir -p "$out"
source "$root/bench/gpu/env.sh"
[[ -x "$root/build-gpu/cli/memsnap" ]] || MEMSNAP_GPU_TARGETS=memsnap bash "$root/bench/gpu/build.sh"
memsnap="$root/build-gpu/cli/memsnap"
pickle=/tmp/memsnap-reference.pickle
[[ -s $pickle ]] || python3 "$root/bench/gpu/shared-bench/make_pytorch_trace.py" "$pickle" 300
gzip -c "$pickle" >"$out/reference.pickle.gz"
"$memsnap" stats "$pickle" | head -20
memory_viz=$(python3 -c 'import torch.cuda._memory_viz as m; print(m.__file__)')
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cores)"
python3 "$root/bench/viewer_bench.py" --memsnap "$memsnap" --memory-viz "$memory_viz" --flamegraph-pl "$flamegraph" \
  --rounds "$rounds" "$pickle" | tee "$out/viewer_bench.txt"
if [[ -d "$root/bench/gpu/perf-debs" ]]; then
  bash "$root/bench/gpu/profile.sh" "$out/profile" -- env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" bash -c "for i in \$(seq 20); do '$memsnap' stats '$pickle' >/dev/null; done" \
    >"$out/profile.txt" 2>&1 || true
  rm -f "$out/profile/perf.data" "$out/profile/report.full" "$out/profile/libraries.full"
  head -60 "$out/profile.txt"
fi
