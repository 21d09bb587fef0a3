#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
# Without arguments (the full suite, as CI runs it) the wheels are built first, so that
# tests/test_wheels.py installs each distribution alone into a fresh environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
hatch run docs
if [ $# -eq 0 ]; then
  rc=0
  bash scripts/build_wheels.sh || rc=$?
  case $rc in
    0) export MNEME_REQUIRE_WHEELS=1 ;;  # a missing wheel fails tests/test_wheels.py
    2) echo "test: no Python 3.12 for the abi3 wheels: not built, tests/test_wheels.py skips" ;;
    *) exit $rc ;;
  esac
fi
hatch run test "$@"
