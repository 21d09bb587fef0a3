#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
# Without arguments (the full suite, as CI runs it) the wheels are built too, so that
# tests/test_wheels.py installs each distribution alone into a fresh environment: the
# build runs beside the tests (niced; it needs none of them) and those tests, scheduled
# last, wait for it (MNEME_WHEELS_PENDING names the file its exit status goes to).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
setup_s=$SECONDS
hatch run docs
docs_s=$((SECONDS - setup_s))
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
tests_start=$SECONDS
hatch run test --durations=30 "$@" || test_rc=$?
tests_s=$((SECONDS - tests_start))
if [ -n "$wheels_pid" ]; then
  wait "$wheels_pid"
  echo "test: waited $((SECONDS - tests_start - tests_s)) s for the wheel build after the tests"
  cat "$log"
  case "$(cat "$status")" in
    0) ;;
    2) echo "test: no Python 3.12 for the abi3 wheels: not built, tests/test_wheels.py skipped" ;;
    *) echo "test: scripts/build_wheels.sh failed (its log above)"; exit "$(cat "$status")" ;;
  esac
fi
# where the time went (the README's goal: the whole command under 15 minutes on 2 cores)
echo "test: setup ${setup_s} s, docs ${docs_s} s, tests ${tests_s} s, all $SECONDS s"
exit "$test_rc"
