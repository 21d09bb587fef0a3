#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
# Without arguments (the full suite, as CI runs it) the wheels are built too, so that
# tests/test_wheels.py installs each distribution alone into a fresh environment: the
# build runs beside the development environment's setup and the tests (niced during
# the tests; it needs none of them) and those tests, scheduled last, wait for it
# (MNEME_WHEELS_PENDING names the file its exit status goes to).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# the development environment is made after the wheel build has started (below)
MNEME_SETUP_ENV=later source scripts/setup.sh
wheels_pid=""
if [ $# -eq 0 ]; then
  mkdir -p build
  status="build/wheels.status" log="build/wheels.log"
  rm -f "$status"
  export MNEME_WHEELS_PENDING="$PWD/$status"
  # cp310 and cp311 first, on the CPU that pip's downloads leave idle; cp312 from the
  # development environment once it is made (build_wheels.sh waits for this file to go)
  export MNEME_DEV_ENV_PENDING="$PWD/build/dev-env.pending"
  touch "$MNEME_DEV_ENV_PENDING"
  # the status file appears whole (a rename), only once the build has ended; the build
  # runs in a process group of its own, ended with this script if that ends first
  set -m
  ( rc=0; bash scripts/build_wheels.sh >"$log" 2>&1 || rc=$?
    echo "$rc" >"$status.tmp" && mv "$status.tmp" "$status" ) &
  wheels_pid=$!
  set +m
  trap 'kill -- -"$wheels_pid" 2>/dev/null || true' EXIT
fi
mneme_create_env
[ -z "${MNEME_DEV_ENV_PENDING:-}" ] || rm -f "$MNEME_DEV_ENV_PENDING"
setup_s=$SECONDS
hatch run docs
docs_s=$((SECONDS - setup_s))
test_rc=0
# the wheel build shares the cores equally with the setup (nothing there times itself),
# then yields to the tests (some assert wall-clock bounds)
[ -z "$wheels_pid" ] || renice -n 10 -g "$wheels_pid" >/dev/null || true
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
