#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
# Without arguments (the full suite, as CI runs it) the wheels are built too, so that
# tests/test_wheels.py installs each distribution alone into a fresh environment: the
# build runs beside the tests (niced; it needs none of them) and those tests, scheduled
# last, wait for it (MNEME_WHEELS_PENDING names the file its exit status goes to).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
hatch run docs
wheels_pid=""
if [ $# -eq 0 ]; then
  mkdir -p build
  status="build/wheels.status" log="build/wheels.log"
  rm -f "$status"
  export MNEME_WHEELS_PENDING="$PWD/$status"
  # the status file appears whole (a rename), only once the build has ended
  ( rc=0; nice -n 10 bash scripts/build_wheels.sh >"$log" 2>&1 || rc=$?
    echo "$rc" >"$status.tmp" && mv "$status.tmp" "$status" ) &
  wheels_pid=$!
fi
test_rc=0
# the 30 slowest tests and fixtures, so that CI's log says where the time goes
hatch run test --durations=30 "$@" || test_rc=$?
if [ -n "$wheels_pid" ]; then
  wait "$wheels_pid"
  cat "$log"
  case "$(cat "$status")" in
    0) ;;
    2) echo "test: no Python 3.12 for the abi3 wheels: not built, tests/test_wheels.py skipped" ;;
    *) echo "test: scripts/build_wheels.sh failed (its log above)"; exit "$(cat "$status")" ;;
  esac
fi
exit "$test_rc"
