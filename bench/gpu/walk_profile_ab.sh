#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, carrying bench/gpu/perf-debs: where two
# versions of the memsnap Python package spend recording's time in a model's steps. Builds both
# (bench/gpu/ab_packages.sh: this tree, and this tree with PATCH taken back out), then profiles
# bench/torch_recording_bench.py's memsnap worker recording all stacks (`--only all`: the
# warmup, then CYCLES x 2 steps recorded) under perf, the two alternating for ROUNDS rounds.
# Each process runs the same steps, so sample counts compare directly. Printed per process:
# the samples of the C++ stack walk (capture_stack_cfi and its lambdas), of the Python frame
# capture, of memsnap's library in all, and of the whole process; perf's top memsnap symbols go
# to OUT_DIR/SIDE-ROUND.txt.
#   bash bench/gpu/walk_profile_ab.sh PATCH OUT_DIR [--model M] [--rounds N] [--cycles N]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: walk_profile_ab.sh PATCH OUT_DIR [--model M] [--rounds N] [--cycles N]}")
out=${2:?usage: walk_profile_ab.sh PATCH OUT_DIR [--model M] [--rounds N] [--cycles N]}
shift 2
model=gpt2 rounds=3 cycles=100
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cycles) cycles=$2; shift 2 ;;
    *) echo "walk_profile_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
work=$(bash "$root/bench/gpu/ab_packages.sh" "$patch_file")
source "$root/bench/gpu/env.sh"
source "$root/bench/gpu/perf_env.sh"
samples() {  # REPORT PATTERN: the samples of symbols matching PATTERN (perf report -n)
  awk -v pattern="$2" '$0 ~ pattern { sum += $2 } END { print sum + 0 }' "$1"
}
for ((round = 1; round <= rounds; ++round)); do
  sides=(before after)
  ((round % 2 == 0)) && sides=(after before)
  for side in "${sides[@]}"; do
    data="$work/$side-$round.data"
    PYTHONPATH="$work/$side" perf record -q -F 2999 -o "$data" -- python3 "$root/bench/torch_recording_bench.py" \
      --worker memsnap --model "$model" --only all --cycles "$cycles" >/dev/null 2>"$out/$side-$round.err"
    perf report -i "$data" -n --no-children --sort dso,sym --stdio 2>/dev/null | awk 'NF && !/^#/' \
      >"$work/report.txt"
    awk '/_native/ && n++ < 40' "$work/report.txt" >"$out/$side-$round.txt"
    total=$(awk '{ sum += $2 } END { print sum + 0 }' "$work/report.txt")
    printf 'round %d %-6s walk %6d  python frames %6d  memsnap %6d  all %7d samples\n' "$round" "$side" \
      "$(samples "$work/report.txt" 'capture_stack_cfi')" \
      "$(samples "$work/report.txt" 'PythonFrames::capture|AutogradFrames::capture')" \
      "$(samples "$work/report.txt" '_native')" "$total"
    rm -f "$data"
  done
done
