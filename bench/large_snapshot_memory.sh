#!/usr/bin/env bash
# Time and peak memory of each memsnap view of a large snapshot, against the file's size.
#   bash bench/large_snapshot_memory.sh [BUILD_DIR] [SNAPSHOT]
# Without SNAPSHOT, makes the 3M-event demo snapshot (46.7 MiB) in a temporary folder.
# Prints one row per command: seconds, peak resident memory, and that memory over the file's
# size; then `memsnap serve`'s resident and peak memory once loaded and after each view.
set -euo pipefail
build=${1:-build}
work=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
file=${2:-}
if [[ -z $file ]]; then
  file=$work/big3m.msgpack
  "$build/demo/memsnap-demo" --steps 40000 --max-entries 3000000 --out "$file" >/dev/null
fi
bytes=$(stat -c %s "$file")
awk -v f="$file" -v b="$bytes" 'BEGIN {printf "%s: %.1f MiB\n\n", f, b / 1048576}' 
printf '%-34s %8s %10s %8s\n' command seconds "peak MiB" "/ file"
run() {
  local name=$1
  shift
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>"$work/err" || { echo "$name failed: $(tail -1 "$work/err")"; return; }
  read -r seconds kib <"$work/time"
  awk -v n="$name" -v s="$seconds" -v k="$kib" -v b="$bytes" 'BEGIN {printf "%-34s %8s %10.1f %7.2fx\n", n, s, k / 1024, k * 1024 / b}' 
}
m=$build/cli/memsnap
run stats "$m" stats "$file"
run flamegraph "$m" flamegraph "$file" -o "$work/out.svg"
run "flamegraph --kind segments" "$m" flamegraph "$file" --kind segments -o "$work/out.svg"
run "segments --at-event 2000000" "$m" segments "$file" --at-event 2000000 -o "$work/out.svg"
run timeline "$m" timeline "$file" -o "$work/out.svg"
run "timeline --kind segments" "$m" timeline "$file" --kind segments -o "$work/out.svg"
run "trace (to a file)" "$m" trace "$file" -o "$work/out.txt"
run growth "$m" growth "$file"
run replay "$m" replay "$file"
run "convert to .json" "$m" convert "$file" "$work/out.json"
rm -f "$work/out.json" "$work/out.txt"
run "convert to .msgpack" "$m" convert "$file" "$work/out.msgpack"
run "convert to .pickle" "$m" convert "$file" "$work/out.pickle"

port=$((20000 + RANDOM % 20000))
"$build/cli/memsnap-serve" "$file" --port "$port" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 200); do grep -q loaded "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
sleep 1  # the first views are made after the load
memory() { awk '/VmRSS|VmHWM/ {v[$1]=$2} END {printf "resident %.1f MiB, peak %.1f MiB (%.2fx the file)", v["VmRSS:"]/1024, v["VmHWM:"]/1024, v["VmHWM:"]*1024/'"$bytes"'}' "/proc/$server/status"; }
echo
echo "memsnap serve, loaded: $(memory)"
for view in stats flamegraph segments timeline "timeline?kind=segments" "timeline?roles=1&pools=1" "trace?offset=2500000&limit=100"; do
  curl -sf -o /dev/null "http://127.0.0.1:$port/api/snapshots/1/$view"
  echo "  after $view: $(memory)"
done
