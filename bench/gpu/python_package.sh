#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root: builds and installs the memsnap
# Python package against the machine's torch (offline: --no-build-isolation), builds the
# memsnap CLI for the tests that read snapshots back (bench/gpu/build.sh), and runs
# python/tests with pytest. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/bench/gpu/env.sh"
if [[ ! -x "$root/build-gpu/cli/memsnap" ]]; then
  bash "$root/bench/gpu/build.sh" >/dev/null
fi
log=${MEMSNAP_PIP_LOG:-/tmp/memsnap-pip.log}
python3 -m pip install --no-build-isolation --no-deps --no-index -v "$root/python" >"$log" 2>&1 \
  || { grep -E 'error|Error|FAILED|/ld:' "$log" | tail -40 >&2; exit 1; }
echo "memsnap package installed ($(python3 -c 'import memsnap, os; print(os.path.dirname(memsnap.__file__))'))"
export MEMSNAP_CLI="$root/build-gpu/cli/memsnap"
cd "$root/python/tests"
python3 -m pytest -q -p no:cacheprovider "$@"
