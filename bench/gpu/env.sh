# Sourced THERE (the GPU machine), from the repository root: unpacks the Debian packages that
# bench/gpu/fetch_debs.sh downloaded into a private prefix (never over /) and points the
# compiler, CMake and pkg-config at it. Libraries the host already has keep the host's copy;
# only those it lacks are put on LD_LIBRARY_PATH.
memsnap_gpu_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MEMSNAP_DEPS=${MEMSNAP_DEPS:-/tmp/memsnap-deps}
if [[ ! -f "$MEMSNAP_DEPS/.unpacked" ]]; then
  if ! ls "$memsnap_gpu_root"/bench/gpu/debs/*.deb >/dev/null 2>&1; then
    echo "bench/gpu/env.sh: no packages in bench/gpu/debs (run bench/gpu/fetch_debs.sh here and carry bench/gpu/debs)" >&2
    return 1
  fi
  mkdir -p "$MEMSNAP_DEPS"
  for deb in "$memsnap_gpu_root"/bench/gpu/debs/*.deb; do dpkg -x "$deb" "$MEMSNAP_DEPS"; done
  # The .pc files name /usr; make them name the prefix.
  find "$MEMSNAP_DEPS" -name '*.pc' -exec sed -i -E \
    "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\\1=$MEMSNAP_DEPS/usr#" {} +
  # A development link (libz.so -> libz.so.1.2.13) whose library the host has, so its package
  # was not carried, would dangle and leave CMake the static archive, which cannot go into a
  # shared module: point it at the host's copy.
  for link in "$MEMSNAP_DEPS"/usr/lib/x86_64-linux-gnu/*.so; do
    [[ -L "$link" && ! -e "$link" ]] || continue
    name=$(basename "$link")
    target=$(basename "$(readlink "$link")")
    for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
      host_copy=$(ls "$dir/$target" "$dir/$name".[0-9]* 2>/dev/null | head -1 || true)
      if [[ -n "$host_copy" ]]; then ln -sf "$host_copy" "$link"; break; fi
    done
  done
  # Runtime libraries the host lacks, linked from one folder (the host's own stay first).
  mkdir -p "$MEMSNAP_DEPS/runtime"
  for lib in "$MEMSNAP_DEPS"/usr/lib/x86_64-linux-gnu/*.so.* "$MEMSNAP_DEPS"/lib/x86_64-linux-gnu/*.so.*; do
    [[ -e "$lib" ]] || continue
    name=$(basename "$lib")
    host_has=0
    for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
      [[ -e "$dir/$name" ]] && host_has=1
    done
    ((host_has)) || ln -sf "$lib" "$MEMSNAP_DEPS/runtime/$name"
  done
  touch "$MEMSNAP_DEPS/.unpacked"
fi
export PATH="$MEMSNAP_DEPS/usr/bin:$PATH"
export PKG_CONFIG="$MEMSNAP_DEPS/usr/bin/pkgconf"
export PKG_CONFIG_PATH="$MEMSNAP_DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$MEMSNAP_DEPS/usr/share/pkgconfig"
export CMAKE_PREFIX_PATH="$MEMSNAP_DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export CPATH="$MEMSNAP_DEPS/usr/include:$MEMSNAP_DEPS/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
export LIBRARY_PATH="$MEMSNAP_DEPS/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$MEMSNAP_DEPS/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
