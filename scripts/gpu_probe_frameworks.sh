#!/usr/bin/env bash
# Diagnose framework recording on the GPU host: each script of tests/corpus/python runs
# under `mneme record` with a time limit; a run still going after LIMIT seconds gets its
# threads' stacks dumped (gdb, when there) before it is killed. Output: DIR/<script>.log.
#   bash scripts/gpu_probe_frameworks.sh DIR LIMIT script.py ...
set -u
out="$1"; limit="$2"; shift 2
mkdir -p "$out"
probe() {
  local script="$1" log="$out/${1%.py}.log" db="/tmp/probe-${1%.py}.rdb"
  rm -rf "$db"
  setsid python3 -m mneme.cli record -rdb "$db" --stats -mr 1 -- python3 "tests/corpus/python/$script" \
    > "$log" 2>&1 &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$limit" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    echo "PROBE: still running after ${limit}s" >> "$log"
    for p in $(pgrep -s "$pid"); do
      echo "--- pid $p: $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-200)" >> "$log"
      command -v gdb >/dev/null && timeout 30 gdb -batch -ex "thread apply all bt 25" -p "$p" 2>/dev/null \
        | grep -E "^#|^Thread" | head -150 >> "$log"
    done
    kill -9 -- -"$pid" 2>/dev/null
  fi
  wait "$pid"; echo "PROBE: exit $?" >> "$log"
  [ -d "$db" ] && python3 -m mneme.cli ls "$db" 2>&1 | tail -40 >> "$log"
}
for s in "$@"; do probe "$s" & done
wait
