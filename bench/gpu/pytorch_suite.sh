#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, with the memsnap package installed
# (bench/gpu/python_package.sh, or pip install of a carried wheel):
#
#   bash bench/gpu/pytorch_suite.sh OUT_DIR [--sides baseline,memsnap] [--baseline FILE.xml] [PYTEST_ARGS...]
#
# Runs the memory part of PyTorch's own CUDA test suite (carried as bench/gpu/pytorch-tests,
# copied there from ../shared/pytorch-tests by fetch_debs.sh) once on PyTorch's allocator and
# once with memsnap installed first (the suite's sitecustomize, MEMSNAP_INSTALL=1), each side
# in fresh processes, then lists test by test what passes on PyTorch's allocator and not on
# memsnap's (bench/pytorch_suite_compare.py). Writes SIDE.xml (JUnit) and SIDE.txt (pytest's
# output) into OUT_DIR, and compare.txt / compare.md. Exits 1 when a test regresses.
# --baseline takes PyTorch's side from an earlier run's baseline.xml (same torch) instead of
# running it again (use with --sides memsnap).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
suite=${MEMSNAP_PYTORCH_TESTS:-"$root/bench/gpu/pytorch-tests"}
out=${1:?usage: pytorch_suite.sh OUT_DIR [--sides baseline,memsnap] [PYTEST_ARGS...]}
shift
sides=baseline,memsnap
baseline_file=
while [[ ${1:-} == --sides || ${1:-} == --baseline ]]; do
  case $1 in
    --sides) sides=${2:?--sides needs a list} ;;
    --baseline) baseline_file=${2:?--baseline needs a file} ;;
  esac
  shift 2
done
[[ -f "$suite/test_cuda.py" ]] || { echo "pytorch_suite.sh: no $suite/test_cuda.py (carry bench/gpu/pytorch-tests)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -n $baseline_file ]]; then
  cp "$baseline_file" "$out/baseline.xml" || exit 2
  echo "baseline: taken from $baseline_file"
fi
# Three tests look for "test_cuda.py" in stack frames: run the file under its own name.
work=/tmp/memsnap-pytorch-suite
mkdir -p "$work"
cp "$suite/test_cuda.py" "$work/"
export PYTHONPATH="$suite/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
cd "$work"
for side in ${sides//,/ }; do
  case $side in
    baseline) flag=0 ;;
    memsnap) flag=1
      python3 -c 'import memsnap.torch' || { echo "pytorch_suite.sh: the memsnap package is not installed" >&2; exit 2; } ;;
    *) echo "pytorch_suite.sh: unknown side $side" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  MEMSNAP_INSTALL=$flag python3 -m pytest -q -p no:cacheprovider --timeout 90 -rfE test_cuda.py \
    --junitxml="$out/$side.xml" "$@" >"$out/$side.txt" 2>&1
  echo "$side: $(tail -n 1 "$out/$side.txt") ($(( $(date +%s) - start )) s)"
done
if [[ -f "$out/baseline.xml" && -f "$out/memsnap.xml" ]]; then
  python3 "$root/bench/pytorch_suite_compare.py" "$out/baseline.xml" "$out/memsnap.xml" \
    --markdown "$out/compare.md" | tee "$out/compare.txt"
  exit "${PIPESTATUS[0]}"
fi
