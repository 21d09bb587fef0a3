#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
# Without arguments (the full suite, as CI runs it) the wheels are built too, so that
# tests/test_wheels.py installs each distribution alone into a fresh environment: the
# build runs beside the development environment's setup and the tests (niced during
# the tests; it needs none of them) and those tests, scheduled last, wait for it
# (MNEME_WHEELS_PENDING names the file its exit status goes to).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Bytecode: Python writes the .pyc of each module it compiles (CI images often set
# PYTHONDONTWRITEBYTECODE=1, this machine does: then each of the suite's Python processes
# compiled the editable packages' sources again), and pip compiles none at install time
# (PIP_COMPILE=0: a module is compiled once, when first imported; pip compiled every file of
# every dependency, single-threaded, at the end of the development environment's setup).
unset PYTHONDONTWRITEBYTECODE
export PIP_COMPILE=0
# the development environment is made after the wheel build has started (below)
MNEME_SETUP_ENV=later source scripts/setup.sh
wheels_pid=""
if [ $# -eq 0 ]; then
  mkdir -p build
  status="build/wheels.status" log="build/wheels.log"
  rm -f "$status"
  export MNEME_WHEELS_PENDING="$PWD/$status"
  # the build makes its tools' environment beside pip's downloads, then waits for the
  # development environment (for this file to go): its native builds compile the objects
  # the wheels share, which the wheels then take from ccache; cp312 builds in it
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
# the docs build (one core, ~20 s) runs beside the tests' start (collection); its output
# is printed, and its failure fails the command, once the tests end
docs_log="build/docs.log"
mkdir -p build
( start=$SECONDS; rc=0; hatch run docs >"$docs_log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - start))" >"$docs_log.status" ) &
docs_pid=$!
test_rc=0
# the wheel build shares the cores equally with the setup (nothing there times itself),
# then yields to the tests (some assert wall-clock bounds)
[ -z "$wheels_pid" ] || renice -n 10 -g "$wheels_pid" >/dev/null || true
# the 30 slowest tests and fixtures, so that CI's log says where the time goes
tests_start=$SECONDS
hatch run test --durations=30 "$@" || test_rc=$?
tests_s=$((SECONDS - tests_start))
wait "$docs_pid" || true
cat "$docs_log"
read -r docs_rc docs_s <"$docs_log.status" || { docs_rc=1; docs_s=0; }
if [ "$docs_rc" != 0 ]; then
  echo "test: hatch run docs failed (exit $docs_rc; its output above)"
  [ "$test_rc" != 0 ] || test_rc=$docs_rc
fi
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
echo "test: setup ${setup_s} s, docs ${docs_s} s (beside the tests), tests ${tests_s} s, all $SECONDS s"
exit "$test_rc"
