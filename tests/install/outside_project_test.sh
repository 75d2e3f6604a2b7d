#!/usr/bin/env bash
# memsnap as a user gets it from `cmake --install`: installs the build into a fresh prefix, checks
# that only the user-facing things are there (the public API's headers, no internal one) and that
# each installed header compiles on its own, then builds tests/install/main.cpp against that
# prefix alone, once through find_package(memsnap) and once through pkg-config, runs both
# programs and reads the snapshots they write (a run's and an out-of-memory error's) with the
# installed `memsnap stats`, and serves one with the installed `memsnap serve`. Registered in
# tests/CMakeLists.txt.
#   outside_project_test.sh BUILD_DIR WORK_DIR CMAKE_GENERATOR CXX_COMPILER
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$1 work=$2 generator=$3 cxx=$4
prefix="$work/prefix"
started=$SECONDS

step() { echo "== $* ($((SECONDS - started)) s)"; }
fail() { echo "FAILED: $*" >&2; exit 1; }
# Runs a command with its output in LOG, shown only when it fails.
logged() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$* (log: $log)"; }
}
listing() { (cd "$1" && find . -mindepth 1 -maxdepth "$2" | sed 's|^\./||' | sort | tr '\n' ' '); }

rm -rf "$work"
mkdir -p "$work"

step "cmake --install $build --prefix $prefix"
logged "$work/install.log" cmake --install "$build" --prefix "$prefix"

export cxx
# Each public header alone, with nothing but the installed tree to include (and -Wall -Wextra
# -Wpedantic); any compiler output counts as a failure.
# The CCCL adaptors (Thrust, CUB, cuda::mr) are CUDA C++: nvcc compiles them, where it is.
check_header() {
  case "$1" in
    */thrust_allocator.h | */cub_temporary_storage.h | */cuda_memory_resource.h)
      command -v nvcc >/dev/null || return 0
      echo "#include <$1>" | nvcc -std=c++20 -x cu -c - -o "$out/$(basename "$1").o" -I"$prefix/include" 2>&1 |
        sed "s|^|$1: |" ;;
    *)
      echo "#include <$1>" | "$cxx" -std=c++20 -Wall -Wextra -Wpedantic -fsyntax-only -I"$prefix/include" \
        -x c++ - 2>&1 | sed "s|^|$1: |" ;;
  esac
}

# Runs PROGRAM, which writes a snapshot to FILE, and reads it with the installed memsnap.
check_program() {
  local program=$1 snapshot=$2
  logged "$snapshot.log" "$program" "$snapshot"
  [[ -s "$snapshot" ]] || fail "$program wrote no snapshot at $snapshot"
  grep -q "^caught: out of device memory. Tried to allocate 600.00 MiB" "$snapshot.log" ||
    { cat "$snapshot.log" >&2; fail "$program did not catch its out-of-memory error"; }
  logged "$snapshot.oom.stats" "$prefix/bin/memsnap" stats "$snapshot-oom-1.msgpack"
  grep -q "oom 1" "$snapshot.oom.stats" || { cat "$snapshot.oom.stats" >&2; fail "no out-of-memory event in $snapshot-oom-1.msgpack"; }
  logged "$snapshot.stats" "$prefix/bin/memsnap" stats "$snapshot"
  # main.cpp's three allocations: a small-pool segment and two large ones.
  if ! grep -q "^memsnap snapshot: 1 device, 3 segments, 4 blocks" "$snapshot.stats" ||
     ! grep -q "^trace: alloc 3, " "$snapshot.stats"; then
    cat "$snapshot.stats" >&2
    fail "memsnap stats read something else from $snapshot"
  fi
  head -1 "$snapshot.stats"
}

# Checks an installed tree at PREFIX (LABEL names it in the output; its files go to WORK/NAME):
# what it holds, that each header compiles alone, that a program builds against it both ways and
# runs, and memsnap serve.
check_tree() {
  local prefix=$1 name=$2 label=$3
  local out="$work/$name"
  mkdir -p "$out"
  step "$label: only the user-facing things are there"
  pc_file=$(find "$prefix" -name memsnap.pc)
  [[ -n "$pc_file" ]] || fail "no memsnap.pc under $prefix"
  libdir=$(dirname "$(dirname "$pc_file")")
  expected_programs="memsnap memsnap-demo "
  [[ -x "$build/cli/memsnap-serve" ]] && expected_programs+="memsnap-serve "
  [[ "$(listing "$prefix/bin" 1)" == "$expected_programs" ]] || fail "bin/ holds: $(listing "$prefix/bin" 1)"
  libraries=$(cd "$libdir" && find . -maxdepth 1 \( -name '*.a' -o -name '*.so*' \) | sed 's|^\./||' | sort | tr '\n' ' ')
  expected="libmemsnap_allocator.a libmemsnap_api.a libmemsnap_history.a "
  # memsnap record's recorder, where the build has it (the CUDA toolkit's CUPTI headers found).
  [[ -f "$build/record/libmemsnap_record.so" ]] && expected+="libmemsnap_record.so "
  expected+="libmemsnap_snapshot.a "
  [[ "$libraries" == "$expected" ]] || fail "$libdir holds the libraries: $libraries"
  if [[ -f "$build/record/libmemsnap_record.so" ]]; then
    step "$label: memsnap record finds its recorder"
    record_err=$("$prefix/bin/memsnap" record -- true 2>&1) || fail "memsnap record -- true: $record_err"
    [[ "$record_err" == *"no snapshot written"* ]] || fail "memsnap record -- true said: $record_err"
  fi
  [[ "$(listing "$prefix/include" 1)" == "memsnap " ]] || fail "include/ holds: $(listing "$prefix/include" 1)"
  # Exactly the public API (include/memsnap/ of the sources); its CCCL adaptors only from a CUDA build.
  public_headers=$(cd "$here/../../include/memsnap" && ls -- *.h | sort | tr '\n' ' ')
  if [[ ! -f "$prefix/include/memsnap/thrust_allocator.h" ]]; then
    public_headers=$(tr ' ' '\n' <<<"$public_headers" |
      grep -v -x -e thrust_allocator.h -e cub_temporary_storage.h -e cuda_memory_resource.h | grep . | tr '\n' ' ')
  fi
  [[ "$(listing "$prefix/include/memsnap" 1)" == "$public_headers" ]] ||
    fail "include/memsnap/ holds: $(listing "$prefix/include/memsnap" 1) (expected the public API: $public_headers)"
  [[ -f "$libdir/cmake/memsnap/memsnapConfig.cmake" ]] || fail "no CMake package under $libdir/cmake/memsnap"

  export -f check_header
  headers=$(cd "$prefix/include" && find memsnap -name '*.h' | sort)
  step "$label: $(wc -l <<<"$headers") headers compile on their own"
  export prefix out
  # shellcheck disable=SC2016  # $0 is expanded by the inner bash, as meant
  xargs -P 2 -n 1 bash -c 'check_header "$0"' <<<"$headers" >"$out/headers.log" 2>&1
  [[ ! -s "$out/headers.log" ]] || { cat "$out/headers.log" >&2; fail "installed headers that do not compile alone"; }

  step "$label: find_package(memsnap 0.1) with CMAKE_PREFIX_PATH=$prefix"
  logged "$out/configure.log" cmake -S "$here" -B "$out/cmake-build" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  found=$(sed -n 's/^memsnap_DIR:PATH=//p' "$out/cmake-build/CMakeCache.txt")
  [[ "$found" == "$prefix"/* ]] || fail "$label: find_package found memsnap at $found, not in $prefix"
  logged "$out/build.log" cmake --build "$out/cmake-build"
  check_program "$out/cmake-build/memsnap_outside_app" "$out/find_package.msgpack"

  step "$label: pkg-config --cflags --libs memsnap with PKG_CONFIG_PATH=$(dirname "$pc_file")"
  export PKG_CONFIG_PATH
  PKG_CONFIG_PATH=$(dirname "$pc_file")
  [[ "$(pkg-config --modversion memsnap)" == "0.1.0" ]] || fail "pkg-config reads version $(pkg-config --modversion memsnap)"
  flags=$(pkg-config --cflags --libs memsnap)
  # shellcheck disable=SC2086
  logged "$out/pkg-config-build.log" "$cxx" -std=c++20 "$here/main.cpp" -o "$out/pkg-config-app" $flags
  check_program "$out/pkg-config-app" "$out/pkg-config.msgpack"

  if [[ -x "$build/cli/memsnap-serve" ]]; then
    step "$label: memsnap serve shows a snapshot"
    python3 - "$prefix/bin/memsnap" "$out/find_package.msgpack" <<'PYTHON' || fail "$label: memsnap serve"
import json, re, subprocess, sys, urllib.request
server = subprocess.Popen([sys.argv[1], "serve", "--port", "0", sys.argv[2]], stdout=subprocess.PIPE, text=True)
try:
    url = None
    for line in server.stdout:
        match = re.search(r"http://\S+/", line)
        if match:
            url = match.group(0)
            break
    assert url, "memsnap serve printed no URL"
    page = urllib.request.urlopen(url, timeout=30).read().decode()
    assert "<title>" in page and "app.js" in page, page[:200]
    snapshots = json.load(urllib.request.urlopen(url + "api/snapshots", timeout=30))["snapshots"]
    stats = json.load(urllib.request.urlopen(f"{url}api/snapshots/{snapshots[0]['id']}/stats", timeout=30))
    assert stats, "empty stats"
    print(f"{url}: the page, {len(snapshots)} snapshot, its stats")
finally:
    server.terminate()
    server.wait(timeout=30)
PYTHON
  fi
}

check_tree "$prefix" installed "cmake --install"

# The same through the Debian package, unpacked (what `apt-get install ./memsnap_*.deb` puts
# under /usr): its Depends name the HTTP library memsnap serve loads.
if command -v cpack >/dev/null && command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null; then
  step "cpack -G DEB"
  logged "$work/cpack.log" cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/deb"
  deb=$(find "$work/deb" -maxdepth 1 -name 'memsnap_*.deb' | head -1)
  [[ -n "$deb" ]] || fail "cpack made no .deb in $work/deb"
  depends=$(dpkg-deb -f "$deb" Depends)
  if [[ -x "$build/cli/memsnap-serve" && "$depends" != *libcpp-httplib* ]]; then
    fail "the .deb's Depends lack the HTTP library memsnap serve loads: $depends"
  fi
  echo "$(basename "$deb"): $(du -k "$deb" | cut -f1) KiB, $(dpkg-deb -f "$deb" Installed-Size) KiB installed; Depends: $depends"
  dpkg-deb -x "$deb" "$work/deb-root"
  check_tree "$work/deb-root/usr" deb-tree "unpacked .deb"
else
  step "the .deb is not checked: cpack, dpkg-deb or dpkg-shlibdeps is missing (Debian: dpkg-dev)"
fi

step "passed"
