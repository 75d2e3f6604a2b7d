# Sourced THERE by profile.sh and allocator_counters.sh (with $root set to the repository
# root): unpacks Debian's perf from the carried bench/gpu/perf-debs (made HERE by
# fetch_perf.sh) once into /tmp/memsnap-perf and defines `perf` to run it.
perf_prefix=/tmp/memsnap-perf
if [[ ! -x "$perf_prefix/usr/bin/perf" ]]; then
  mkdir -p "$perf_prefix"
  for deb in "$root"/bench/gpu/perf-debs/*.deb; do dpkg -x "$deb" "$perf_prefix"; done
fi
perf() { LD_LIBRARY_PATH="$perf_prefix/usr/lib/x86_64-linux-gnu:$perf_prefix/lib/x86_64-linux-gnu" \
  PERF_EXEC_PATH="$perf_prefix/usr/lib/perf-core" "$perf_prefix/usr/bin/perf" "$@"; }
