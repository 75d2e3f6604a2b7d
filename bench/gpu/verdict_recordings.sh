#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: installs the memsnap Python package
# against the machine's torch (as python_package.sh does: the carried Debian packages, the
# CLI built by build.sh, the package by pip, offline), then records the verdict snapshots of
# bench/gpu/verdict_recordings.py for the cases named (all: every case), each in a fresh
# process, ddp_leak as 4 ranks under torchrun on the one GPU (gloo). Everything goes to OUT_DIR:
# OUT_DIR/CASE/{*.msgpack,truth.json}, and with the CLI built, OUT_DIR/cli.txt (memsnap's
# stats, growth, explain-oom and ranks on them). VERDICT_BUILD_CLI=0 skips the CLI.
#   bash bench/gpu/verdict_recordings.sh OUT_DIR [CASE...|all]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(realpath -m "${1:?usage: verdict_recordings.sh OUT_DIR [CASE...|all]}")
shift
cases=("$@")
if ((${#cases[@]} == 0)) || [[ "${cases[*]}" == all ]]; then
  cases=(ddp_leak side_stream_pending request_too_large live_exhaustion_capped
         fragmentation_capped no_leak_steady leak_no_annotations)
fi
source "$root/bench/gpu/env.sh" || exit 1
cli="$root/build-gpu/cli/memsnap"
if [[ "${VERDICT_BUILD_CLI:-1}" == 1 && ! -x "$cli" ]]; then
  MEMSNAP_GPU_TARGETS=${MEMSNAP_GPU_TARGETS:-memsnap} bash "$root/bench/gpu/build.sh" || exit 1
fi
started=$(date +%s)
log=${MEMSNAP_PIP_LOG:-/tmp/memsnap-pip.log}
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation --no-deps --no-index -v \
  "$root/python" >"$log" 2>&1 || { grep -E 'error|Error|FAILED|/ld:' "$log" | tail -40 >&2; exit 1; }
echo "memsnap package installed in $(( $(date +%s) - started )) s; $(python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))')"
mkdir -p "$out"
program="$root/bench/gpu/verdict_recordings.py"
failed=()
for case in "${cases[@]}"; do
  t0=$(date +%s)
  # The installed package finds its libraries itself (as in ddp_ranks.sh): no carried ones.
  if [[ "$case" == ddp_leak ]]; then
    (unset LD_LIBRARY_PATH; PYTHONUNBUFFERED=1 timeout 240 python3 -m torch.distributed.run --standalone \
      --nproc-per-node 4 "$program" "$out" ddp_leak)
  else
    (unset LD_LIBRARY_PATH; PYTHONUNBUFFERED=1 timeout 240 python3 "$program" "$out" "$case")
  fi
  status=$?
  echo "== $case: exit $status in $(( $(date +%s) - t0 )) s"
  ((status == 0)) || failed+=("$case")
done
if [[ -x "$cli" ]]; then
  {
    for file in "$out"/*/*.msgpack; do
      echo "### memsnap stats $file"; "$cli" stats "$file"
      case "$(basename "$(dirname "$file")")" in
        request_too_large|live_exhaustion_capped|fragmentation_capped)
          echo "### memsnap explain-oom $file"; "$cli" explain-oom "$file" ;;
        *) echo "### memsnap growth $file"; "$cli" growth "$file" ;;
      esac
    done
    [[ -d "$out/ddp_leak" ]] && { echo "### memsnap ranks $out/ddp_leak"; "$cli" ranks "$out/ddp_leak"; }
  } >"$out/cli.txt" 2>&1
  echo "memsnap's verdicts: $out/cli.txt"
fi
if ((${#failed[@]})); then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
