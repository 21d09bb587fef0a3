#!/usr/bin/env bash
# Set up from nothing and run mneme's main job end to end on the conjugate-gradient example:
#   build it with the mneme wrapper through the CMake package -> inspect it -> record it (GPU)
#   -> list/show/check the recording -> replay its SpMV kernel with verification (GPU;
#   compile-only without) -> tune it for a short budget -> show the report -> replay the best
#   configuration -> the whole application: profile, tune --app, run --apply (GPU).
# Without a GPU every step that needs none runs on the shipped recording
# tests/data/examples.rdb, and the steps skipped are listed at the end with the reason.
#
# MNEME_ENV=<virtual environment>: run the job with mneme as installed there (the wheels,
# tests/test_wheels.py) instead of setting up and using the development environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${MNEME_ENV:-}" ]; then
  env_bin="$MNEME_ENV/bin"
else
  source scripts/setup.sh
  hatch env create
  env_bin="$(hatch env find)/bin"
fi
export PATH="$env_bin:$PATH"   # mneme, mneme-clang++ and the environment's python
run() { echo; echo "\$ $*"; "$@"; }
skipped=()
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi

work="$(mktemp -d -t mneme-demo-XXXX)"
rdb="$work/cg.rdb"
kernel=spmv   # the kernel tuned: the solver's sparse matrix-vector product

# 1. build the example through find_package(mneme) + add_mneme(), look inside it
run python examples/build.py --out "$work/build"
exe="$work/build/cg_solver/cg_solver"
run mneme inspect "$exe"

# 2. run it once under the recorder (GPU)
if [ "$gpu" = 1 ]; then
  run mneme record -rdb "$rdb" -mr 2 -- "$exe"
else
  skipped+=("record the CG solver: no NVIDIA GPU on this machine (used the shipped recording tests/data/examples.rdb)")
  rdb=tests/data/examples.rdb
  echo; echo "no GPU: using the shipped recording $rdb (the same program, recorded on an H100)"
fi

# 3. the recording database
run mneme ls "$rdb"
# the kernel's instance that ran most often, then the one that changes most memory
rid=$(python - "$rdb" "$kernel" <<'PY'
import sys
from mneme.replay.db import Database
db, part = Database.open(sys.argv[1]), sys.argv[2]
rows = [i for i in db.instances() if part in i.kernel.demangled_name]
best = max(rows, key=lambda i: (i.occurrences, sum(c.changed_bytes for c in i.changes())))
print(best.id)
PY
)
run mneme show "$rdb" "$rid"
run mneme check "$rdb"

# 4. replay the kernel: on a GPU with verification, otherwise compile-only
if [ "$gpu" = 1 ]; then
  run mneme replay -rdb "$rdb" -rid "$rid" "default<O3>"
else
  skipped+=("replay on the GPU with verification: no NVIDIA GPU (compile-only replay ran instead)")
  run mneme replay -rdb "$rdb" -rid "$rid" --compile-only "default<O3>"
fi

# 5. tune it for a short budget, with a report
storage="sqlite:///$work/tune.sqlite3"
if [ "$gpu" = 1 ]; then
  run mneme tune -rdb "$rdb" -rid "$rid" --space launch,pipeline --trials 100 \
      --storage "$storage" --report "$work/report" --plots wait
else
  skipped+=("tuning for execution time: no NVIDIA GPU (tuned registers and binary size compile-only instead)")
  run mneme tune -rdb "$rdb" -rid "$rid" --compile-only --space pipeline,bounds,codegen \
      --objective registers,binary_size --trials 40 --storage "$storage" --report "$work/report" \
      --plots wait
fi

# 6. the report, and the best configuration replayed
run ls "$work/report"
run python -c '
import json, sys
s = json.load(open(sys.argv[1]))
print("study %s: %d trials, %d complete, failed %s" % (s["study"], s["trials"], s["complete"], s["failed"] or 0))
best = s["best"][0]
print("best: trial %d, values %s (%.2fx the baseline), %s" % (best["trial"], best["values"], best["speedup"] or 0, best["params"]))' "$work/report/summary.json"
if [ "$gpu" = 1 ]; then
  run mneme replay -rdb "$rdb" -rid "$rid" --config "$work/report/best.json"
else
  run mneme replay -rdb "$rdb" -rid "$rid" --config "$work/report/best.json" --compile-only
fi

# 7. the whole application: where its GPU time goes, every kernel that matters tuned under
#    one budget, all winners applied at once and measured (GPU)
if [ "$gpu" = 1 ]; then
  run mneme profile "$rdb" --plot "$work/profile.png"
  run mneme tune -rdb "$rdb" --app --share 0.9 --budget 120 --storage "$storage" \
      --report "$work/app-report" --plots off
  if python -c 'import json, sys; sys.exit(not any(k["significant"] for k in json.load(open(sys.argv[1]))["kernels"]))' \
      "$work/app-report/app.json"; then
    run mneme run --apply "$work/app-report" -- "$exe"
  else
    echo "no kernel of the application got a significant speedup: nothing to apply (app.json says why per kernel)"
  fi
else
  skipped+=("the whole application (mneme profile, tune --app, run --apply): no NVIDIA GPU, and the shipped recording predates the application profile the recorder writes")
fi

echo
echo "demo finished; outputs in $work (report: $work/report, plots as PNG and HTML)"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "skipped:"
  for s in "${skipped[@]}"; do echo "  - $s"; done
fi
