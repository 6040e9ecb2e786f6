#!/usr/bin/env bash
# Runs the README's test command N times in a row (default 5) while a CPU hog spins on every
# core, and stops at the first red run. It proves the suite holds on a busy machine: the
# blocked-loop guard must not mistake preemption for blocking, and no test may depend on
# timing that a loaded machine stretches.
#
#   tests/stress.sh [N] [pytest args...]      e.g. tests/stress.sh 5   or   tests/stress.sh 1 -x
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
shift || true
python=".venv/bin/python"
[[ -x "$python" ]] || python="${PYTHON:-python3}"
cores="$(nproc)"

hogs=()
stop_hogs() { for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_hogs EXIT
for _ in $(seq "$cores"); do
    "$python" -c 'while True: pass' &
    hogs+=("$!")
done
echo "== $cores CPU hogs running (pids ${hogs[*]}); $runs runs of the test command"

for run in $(seq "$runs"); do
    started=$SECONDS
    if "$python" -m pytest -q "$@" >"/tmp/mainspring-stress-$run.log" 2>&1; then
        echo "run $run/$runs: green in $((SECONDS - started)) s ($(grep -E '[0-9]+ passed' "/tmp/mainspring-stress-$run.log" | tail -1))"
    else
        echo "run $run/$runs: RED in $((SECONDS - started)) s; log: /tmp/mainspring-stress-$run.log"
        grep -E '^(FAILED|ERROR)|Failed: ' "/tmp/mainspring-stress-$run.log" | head -20
        exit 1
    fi
done
echo "== $runs/$runs green under $cores hogs (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
