#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: an A/B of two versions of the memsnap
# Python package on what recording history costs a training step (bench/torch_recording_ab.py).
# "after" is this tree; "before" is this tree with PATCH taken back out (made HERE, e.g.
# `git diff BASE -- history > build-ref/ab/history.patch`, with build-ref/ab carried). Both are
# built and installed with pip into their own folders, side by side (bench/gpu/ab_packages.sh).
#   bash bench/gpu/recording_ab.sh PATCH [--model M] [--rounds N] [--cycles N] [--modes MODES]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: recording_ab.sh PATCH [torch_recording_ab.py options]}")
shift
work=$(bash "$root/bench/gpu/ab_packages.sh" "$patch_file")
source "$root/bench/gpu/env.sh"
python3 "$root/bench/torch_recording_ab.py" "$work/before" "$work/after" "$@"
