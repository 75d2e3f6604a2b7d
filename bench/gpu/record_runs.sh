#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: builds memsnap's CLI, its recorder and
# the record example and bench (bench/gpu/build.sh), then records with `memsnap record`: the
# CUDA C++ example (runtime linked shared and static), a CuPy script, a torchvision ResNet-50
# trained on PyTorch's own allocator (also with expandable segments), and prints what each
# snapshot holds; then bench/record_overhead.sh. Snapshots and logs go to OUT_DIR.
#   bench/gpu/record_runs.sh OUT_DIR [ROUNDS]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: record_runs.sh OUT_DIR [ROUNDS]}
rounds=${2:-5}
mkdir -p "$out"
source "$root/bench/gpu/env.sh"
MEMSNAP_GPU_TARGETS="memsnap memsnap_record memsnap_record_example memsnap_record_example_static memsnap_record_overhead" \
  bash "$root/bench/gpu/build.sh" >/dev/null || exit 1
build="$root/build-gpu"
memsnap="$build/cli/memsnap"
cd "$out"

run() {  # NAME COMMAND...: records COMMAND into NAME.msgpack and shows what it holds
  local name=$1
  shift
  echo "== $name: memsnap record -- $*"
  local start=$SECONDS
  "$memsnap" record -o "$out/$name.msgpack" --oom "$out/$name-oom-{n}.msgpack" -- "$@"
  echo "exit status $? after $((SECONDS - start)) s"
  [[ -f "$out/$name.msgpack" ]] || return 0
  "$memsnap" stats "$out/$name.msgpack" | head -12
  "$memsnap" folded "$out/$name.msgpack" | awk '{print $NF "\t" $0}' | sort -nr | head -3 | cut -f2 | cut -c1-600
  "$memsnap" replay "$out/$name.msgpack" | sed -n '1,14p'
  local oom
  for oom in "$out/$name"-oom-*.msgpack; do
    [[ -f "$oom" ]] && "$memsnap" explain-oom "$oom" | head -12
  done
}

run cuda "$build/examples/memsnap_record_example"
run cuda-static "$build/examples/memsnap_record_example_static"
run cupy python3 "$root/examples/record/cupy_arrays.py"
run resnet python3 "$root/examples/record/torch_training.py"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run resnet-expandable python3 "$root/examples/record/torch_training.py"
echo "== overhead: bench/record_overhead.sh $rounds rounds"
bash "$root/bench/record_overhead.sh" "$build" "$rounds" 20000
