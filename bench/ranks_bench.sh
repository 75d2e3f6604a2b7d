#!/usr/bin/env bash
# memsnap ranks on a simulated job: N rank snapshots of about 30,000 trace events each
# (memsnap-demo --ranks N --steps 385 --oom: every 97th rank from 13, and the last, keeps more
# memory; the middle rank runs out), then the table's time and peak memory against the files'
# sizes and against `memsnap stats` on the largest file alone (the memory must follow the
# largest file, not the sum of all of them).
#   bash bench/ranks_bench.sh [BUILD_DIR] [RANKS] [JOB_DIR]
set -euo pipefail
build=${1:-build}
ranks=${2:-1000}
job=${3:-/tmp/memsnap-ranks-bench}
rm -rf "$job"
start=$(date +%s.%N)
"$build/demo/memsnap-demo" --ranks "$ranks" --steps 385 --max-entries 100000 --oom --out "$job" >/dev/null 2>&1
made=$(echo "$(date +%s.%N) - $start" | bc)
sum=$(du -cb "$job"/*.msgpack | tail -1 | cut -f1)
largest_line=$(du -b "$job"/*.msgpack | sort -n | tail -1)
largest=$(cut -f1 <<<"$largest_line")
largest_file=$(cut -f2 <<<"$largest_line")
events=$("$build/cli/memsnap" stats "$job/rank1.msgpack" | sed -nE 's/.* ([0-9]+) trace entries.*/\1/p' || true)
report=$(mktemp)
/usr/bin/time -f '%e %M' -o "$report" "$build/cli/memsnap" ranks "$job" -o /dev/null
read -r seconds rss_kib <"$report"
/usr/bin/time -f '%e %M' -o "$report" "$build/cli/memsnap" stats "$largest_file" -o /dev/null
read -r one_seconds one_rss_kib <"$report"
rm -f "$report"
printf 'ranks %d, %s trace events each, files %.1f MiB in all, largest %.2f MiB (written in %.1f s)\n' \
  "$ranks" "$events" "$(echo "$sum / 1048576" | bc -l)" "$(echo "$largest / 1048576" | bc -l)" "$made"
printf 'memsnap ranks: %.2f s, peak resident %.1f MiB (%.3fx the files'"'"' sum); memsnap stats on the largest file alone: %.2f s, %.1f MiB\n' \
  "$seconds" "$(echo "$rss_kib / 1024" | bc -l)" "$(echo "$rss_kib * 1024 / $sum" | bc -l)" \
  "$one_seconds" "$(echo "$one_rss_kib / 1024" | bc -l)"
