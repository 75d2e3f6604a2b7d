#!/usr/bin/env bash
# Installs the Debian packages memsnap builds against, only those still missing,
# so a second run on a prepared machine costs nothing and needs no network.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config python3
  dpkg-dev             # dpkg-shlibdeps: the .deb's dependencies (cpack; tests/install/)
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libmsgpack-cxx-dev
  libunwind8 libdw-dev zlib1g-dev
  python3-dev pybind11-dev   # the Python package's torch-free parts and their tests
  libcpp-httplib-dev   # memsnap serve
  chromium wrk         # the web UI's browser tests and load test
  clang                # libFuzzer targets (scripts/fuzz.sh)
  doxygen              # the C++ API reference (docs/api/), built by a test
)
# Node.js for the browser tests: the machine's own when it has one (it may come from elsewhere
# than Debian), Debian's otherwise.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "memsnap setup: installing ${missing[*]}"
run_as_root=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "memsnap setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  run_as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${run_as_root[@]}" apt-get update -qq
"${run_as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
