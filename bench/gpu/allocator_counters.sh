#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, carrying bench/gpu/debs and
# bench/gpu/perf-debs (made HERE by fetch_perf.sh): where the allocator's time goes on this
# host's CPU, history off. Builds memsnap_bench, then for each harness (slots, map) counts
# cycles, instructions, cache and branch misses over a replay of TRACE on the simulated backend
# (perf stat; a virtual machine without a PMU says "not supported"), samples the slots
# replay to annotate the hottest instructions of the allocator's fast path, and measures what
# the lock's atomic instructions cost (memsnap_bench replay --lock-cost, 21 rounds a harness).
#
#   bash bench/gpu/allocator_counters.sh OUT_DIR [TRACE [PASSES]]
#
# Defaults: tests/data/pytorch-2.11-h100/transformer_s5_90.trace, 40 passes. OUT_DIR gets
# stat-HARNESS.txt, perf.data, report.txt and annotate-FUNCTION.txt.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: allocator_counters.sh OUT_DIR [TRACE [PASSES]]}
trace=${2:-$root/tests/data/pytorch-2.11-h100/transformer_s5_90.trace}
passes=${3:-40}
mkdir -p "$out"
MEMSNAP_GPU_TARGETS=memsnap_bench bash "$root/bench/gpu/build.sh" >/dev/null
bench=$root/build-gpu/bench/memsnap_bench
source "$root/bench/gpu/perf_env.sh"
events=cycles,instructions,branches,branch-misses,L1-dcache-loads,L1-dcache-load-misses,LLC-loads,LLC-load-misses,dTLB-load-misses
for harness in slots map; do
  echo "== $harness harness: $(basename "$trace"), $passes passes"
  perf stat -e "$events" -o "$out/stat-$harness.txt" -- \
    "$bench" replay "$trace" --passes "$passes" --only off --harness "$harness"
  grep -E '^ +[0-9<]' "$out/stat-$harness.txt" || cat "$out/stat-$harness.txt"
done
# (cpu-clock: where the VM has no PMU, perf turns a request for cycles into this anyway.)
sampled=cpu-clock
perf record -e "$sampled" -F 9999 -o "$out/perf.data" -- \
  "$bench" replay "$trace" --passes "$passes" --only off --harness slots >/dev/null 2>&1
perf report -i "$out/perf.data" --no-children --sort sym --stdio 2>/dev/null | grep -v -e '^#' -e '^$' | head -25 >"$out/report.txt"
echo "== where the slots replay's $sampled samples fall"
cat "$out/report.txt"
for function in malloc_unobserved free_unobserved deallocate allocate; do
  perf annotate -i "$out/perf.data" --stdio -s "memsnap::DeviceCachingAllocator::$function" 2>/dev/null \
    >"$out/annotate-$function.txt" || true
  echo "== hottest instructions of DeviceCachingAllocator::$function"
  grep -E '^ +[0-9]+\.[0-9]+ +:' "$out/annotate-$function.txt" | sort -rn | head -8 || true
done
for harness in slots map; do
  "$bench" replay "$trace" --passes 3 --only off --harness "$harness" --lock-cost 21 | tail -1
done
