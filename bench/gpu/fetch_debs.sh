#!/usr/bin/env bash
# Run HERE (the Debian 12 development machine), before a GPU run: downloads memsnap's Debian
# build dependencies into bench/gpu/debs/, copies the shared bench kit (PyTorch's replay
# harness, ../shared/bench) into bench/gpu/shared-bench/ and the memory part of PyTorch's CUDA
# test suite (../shared/pytorch-tests) into bench/gpu/pytorch-tests/. The three folders are
# ignored by git (PyTorch's tests are run, never committed); name them in the device call's
# `carry`. The GPU machine has no network and none of these.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

packages=(
  libdw-dev libdw1 libelf-dev libelf1 libunwind8
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 libssl-dev
  libcli11-dev nlohmann-json3-dev libmsgpack-cxx-dev
  zlib1g-dev liblzma-dev libzstd-dev libbz2-dev
  libgtest-dev libgmock-dev
  pkgconf pkgconf-bin libpkgconf3
)
mkdir -p "$here/debs"
rm -f "$here"/debs/*.deb
(cd "$here/debs" && apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
count=$(ls "$here"/debs/*.deb | wc -l)
if ((count != ${#packages[@]})); then
  echo "fetch_debs: got $count of ${#packages[@]} packages" >&2
  exit 1
fi
rm -rf "$here/shared-bench"
if [[ -d "$root/../shared/bench" ]]; then
  cp -r "$root/../shared/bench" "$here/shared-bench"
  chmod -R u+w "$here/shared-bench"
fi
rm -rf "$here/pytorch-tests"
if [[ -d "$root/../shared/pytorch-tests" ]]; then
  cp -r "$root/../shared/pytorch-tests" "$here/pytorch-tests"
  chmod -R u+w "$here/pytorch-tests"
fi
echo "carry: bench/gpu/debs bench/gpu/shared-bench bench/gpu/pytorch-tests ($(du -sh "$here/debs" | cut -f1) of packages)"
