#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
# Without arguments (the full suite, as CI runs it) the wheels are built too, so that
# tests/test_wheels.py installs each distribution alone into a fresh environment: the
# build runs beside the end of the setup and the tests (it needs none of them) and those
# tests, scheduled last, wait for it (MNEME_WHEELS_PENDING names the file its exit status
# goes to).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Bytecode: Python writes the .pyc of each module it compiles (CI images often set
# PYTHONDONTWRITEBYTECODE=1, this machine does: then each of the suite's Python processes
# compiled the editable packages' sources again), and pip compiles none at install time
# (PIP_COMPILE=0: a module is compiled once, when first imported; pip compiled every file of
# every dependency, single-threaded, at the end of the development environment's setup).
unset PYTHONDONTWRITEBYTECODE
export PIP_COMPILE=0
# The full suite: the session fixtures that need only the system's compilers (the corpus
# built with clang++-22, compiled with nvcc) are built first, by tests/early_builds.py,
# niced, on the CPU that apt's and pip's downloads leave idle during the setup; their
# fixtures take what it made (MNEME_EARLY_BUILDS) and build themselves where it made nothing.
early_pid="" wheels_pid=""
start_early_builds() {  # $1: a Python >= 3.10 (the standard library is enough)
  local dir="$PWD/build/early-builds" nice_cmd=()
  rm -rf "$dir" && mkdir -p "$dir"
  export MNEME_EARLY_BUILDS="$dir"
  # at the tests' start it is reniced back to 0, which only root may do
  [ "$(id -u)" != 0 ] || nice_cmd=(nice -n 10)
  set -m
  ( "${nice_cmd[@]}" "$1" tests/early_builds.py "$dir" >build/early-builds.log 2>&1 || true
    touch "$dir/done" ) &
  early_pid=$!
  set +m
}
if [ $# -eq 0 ]; then
  for py in python3.12 python3.11 python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      start_early_builds "$(command -v "$py")"; break
    fi
  done
fi
trap 'for g in $early_pid $wheels_pid; do kill -- -"$g" 2>/dev/null || true; done' EXIT
# the development environment is made after the wheel build has started (below)
MNEME_SETUP_ENV=later source scripts/setup.sh
[ $# -ne 0 ] || [ -n "$early_pid" ] || start_early_builds "$MNEME_PYTHON"
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
fi
mneme_create_env
[ -z "${MNEME_DEV_ENV_PENDING:-}" ] || rm -f "$MNEME_DEV_ENV_PENDING"
setup_s=$SECONDS
# the docs build (one core, ~20 s) runs beside the tests' start (collection), in a process
# group of its own (below); its output is printed, and its failure fails the command, once
# the tests end
docs_log="build/docs.log"
mkdir -p build
set -m
( start=$SECONDS; rc=0; hatch run docs >"$docs_log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - start))" >"$docs_log.status" ) &
docs_pid=$!
set +m
test_rc=0
# The builds beside the tests (the wheels', the docs, what is left of the early ones,
# which their fixtures wait for) share the cores equally with them, except while a test
# that asserts wall-clock bounds runs: tests/parallel_runs.py nices them to 19 then.
[ -z "$early_pid" ] || renice -n 0 -g "$early_pid" >/dev/null 2>&1 || true
export MNEME_BACKGROUND_PGIDS="$early_pid $wheels_pid $docs_pid"
# the 30 slowest tests and fixtures, so that CI's log says where the time goes
tests_start=$SECONDS
hatch run test --durations=30 "$@" || test_rc=$?
tests_s=$((SECONDS - tests_start))
wait "$docs_pid" || true
if [ -n "$early_pid" ]; then
  wait "$early_pid" || true
  [ ! -s build/early-builds.log ] || { echo "test: tests/early_builds.py said:"; cat build/early-builds.log; }
fi
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
