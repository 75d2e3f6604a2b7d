#!/usr/bin/env bash
# Runs a command that must fail the way memsnap promises hostile input fails: exit status 1
# (or 2 for a malformed command line) and exactly one line on stderr, matching an extended
# regular expression.
#   expect_error.sh STATUS REGEX COMMAND [ARGS...]
set -u
expected_status=$1
pattern=$2
shift 2
stderr_file=$(mktemp)
trap 'rm -f "$stderr_file"' EXIT
"$@" >/dev/null 2>"$stderr_file"
status=$?
lines=$(wc -l <"$stderr_file")
if [[ $status -ne $expected_status ]]; then
  echo "expected exit status $expected_status, got $status"; cat "$stderr_file"; exit 1
fi
if [[ $lines -ne 1 ]]; then
  echo "expected one line on stderr, got $lines:"; cat "$stderr_file"; exit 1
fi
if ! grep -Eq -- "$pattern" "$stderr_file"; then
  echo "stderr does not match /$pattern/:"; cat "$stderr_file"; exit 1
fi
echo "ok: $(cat "$stderr_file")"
