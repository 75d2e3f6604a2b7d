#!/usr/bin/env bash
# Run HERE (the Debian 12 development machine): downloads Debian's `perf` (linux-perf) and the
# libraries it needs into bench/gpu/perf-debs/ (ignored by git) for bench/gpu/profile.sh THERE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
packages=(linux-perf libbabeltrace1 libcap2 libdw1 libelf1 libnuma1 libopencsd1 libperl5.36
          libpython3.11 libpython3.11-stdlib libslang2 libunwind8 libtraceevent1 libpfm4 libcapstone4
          libglib2.0-0 libpcre2-8-0 libexpat1 libuuid1 libcrypt1 libbz2-1.0 liblzma5 libzstd1 zlib1g)
mkdir -p "$here/perf-debs"
rm -f "$here"/perf-debs/*.deb
(cd "$here/perf-debs" && apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
echo "carry: bench/gpu/perf-debs ($(du -sh "$here/perf-debs" | cut -f1))"
