#!/usr/bin/env bash
# What `memsnap record` adds to each CUDA allocation call, measured side by side in one run:
# bench/record_overhead.cpp plain, under `memsnap record --stacks none` and under `memsnap
# record` (C++ stacks), interleaved over ROUNDS rounds; prints the medians and the difference per
# call (a pair is two calls). Needs a GPU.
#   bench/record_overhead.sh BUILD_DIR [ROUNDS] [PAIRS]
set -euo pipefail
build=${1:?usage: record_overhead.sh BUILD_DIR [ROUNDS] [PAIRS]}
rounds=${2:-5}
pairs=${3:-20000}
bench="$build/bench/memsnap_record_overhead"
memsnap="$build/cli/memsnap"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A runs=(
  [plain]="$bench $pairs"
  [record-no-stacks]="$memsnap record --stacks none -o $out/none.msgpack --oom off -- $bench $pairs"
  [record-cpp-stacks]="$memsnap record -o $out/cpp.msgpack --oom off -- $bench $pairs"
)
order=(plain record-no-stacks record-cpp-stacks)
for ((round = 1; round <= rounds; round++)); do
  for name in "${order[@]}"; do
    ${runs[$name]} 2>/dev/null | sed "s/^/$name /" >>"$out/results"
  done
done
python3 - "$out/results" "$pairs" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    name, call, value, _ = line.split()
    by.setdefault(call, {}).setdefault(name, []).append(float(value))
print(f"pairs per run: {sys.argv[2]}; medians of {len(next(iter(next(iter(by.values())).values())))} rounds")
for call, runs in by.items():
    plain = statistics.median(runs["plain"])
    print(f"{call}: plain {plain:.3f} us/pair")
    for name in ("record-no-stacks", "record-cpp-stacks"):
        value = statistics.median(runs[name])
        print(f"  {name}: {value:.3f} us/pair, {value / plain:.2f}x, +{(value - plain) * 1000 / 2:.0f} ns per call")
PY
