#!/usr/bin/env bash
# Set up from nothing and run mneme's main job end to end:
#   build a CUDA program with the mneme wrapper -> inspect it -> record it (GPU) ->
#   list/show/check the recording -> replay with verification (GPU; compile-only without)
#   -> tune (when available).
# Steps that need a GPU, or parts of mneme not built yet, are skipped with the reason.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
hatch env create
env_bin="$(hatch env find)/bin"
export PATH="$env_bin:$PATH"   # mneme, mneme-clang++ and the environment's python
run() { echo; echo "\$ $*"; "$@"; }
skipped=()
has_cmd() { mneme "$1" --help >/dev/null 2>&1; }
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi

work="$(mktemp -d -t mneme-demo-XXXX)"
app=tests/corpus/cuda/pointer_structures
rdb="$work/app.rdb"

# 1. build a recordable executable and look inside it
if has_cmd inspect; then
  run python tests/corpus/build.py --compiler "mneme-clang++" --out "$work/build" "$app"
  run mneme inspect "$work/build/pointer_structures/pointer_structures"
else
  skipped+=("build with mneme-clang++ + inspect: the instrumentation package is not built yet")
  run python tests/corpus/build.py --out "$work/build" "$app"
fi

# 2. record (GPU)
if [ "$gpu" = 1 ] && has_cmd record; then
  run mneme record -rdb "$rdb" -- "$work/build/pointer_structures/pointer_structures"
else
  [ "$gpu" = 1 ] && skipped+=("record: mneme record is not built yet") \
                 || skipped+=("record: no NVIDIA GPU on this machine")
  rdb=tests/data/golden.rdb
  echo; echo "using the shipped recording $rdb instead"
fi

# 3. the recording database
run mneme ls "$rdb"
ids=$(mneme ls "$rdb" --json | python -c 'import json,sys; print(" ".join(r["instance"] for r in json.load(sys.stdin)))')
run mneme show "$rdb" "${ids%% *}"
run mneme check "$rdb"

# 4. replay every instance: on a GPU with verification, otherwise compile-only
if has_cmd replay; then
  mode=""
  if [ "$gpu" != 1 ]; then
    mode="--compile-only"
    skipped+=("replay on the GPU with verification: no NVIDIA GPU (compile-only replay ran instead)")
  fi
  for id in $ids; do
    run mneme replay -rdb "$rdb" -rid "$id" $mode "default<O3>"
  done
else
  skipped+=("replay: mneme replay is not built yet")
fi

# 5. tune
if has_cmd tune; then
  run mneme tune -rdb "$rdb" --trials 20 --report "$work/report" $([ "$gpu" = 1 ] || echo --compile-only)
else
  skipped+=("tune: mneme tune is not built yet")
fi

echo
echo "demo finished; outputs in $work"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "skipped:"
  for s in "${skipped[@]}"; do echo "  - $s"; done
fi
