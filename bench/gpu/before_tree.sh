#!/usr/bin/env bash
# Run THERE (the GPU machine): the "before" side of an A/B. Copies the repository's tree (less
# its build folders) to DIR (default /tmp/memsnap-before, emptied first), takes PATCH back out
# of the copy, and prints DIR.
#   before=$(bash bench/gpu/before_tree.sh PATCH [DIR])
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
patch_file=$(realpath "${1:?usage: before_tree.sh PATCH [DIR]}")
before=${2:-/tmp/memsnap-before}
rm -rf "$before"
mkdir -p "$before"
tar -C "$root" --exclude=./build-gpu --exclude=./build -cf - . | tar -C "$before" -xf -
(cd "$before" && git apply -R "$patch_file")
echo "$before"
