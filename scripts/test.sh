#!/usr/bin/env bash
# Set up from nothing and run mneme's test suite (GPU tests skip cleanly without a GPU).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
hatch run docs
hatch run test "$@"
