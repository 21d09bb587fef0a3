#!/usr/bin/env bash
# Ship this checkout to the lent GPU host (no network there): build the wheels of every
# mneme distribution and put them, with the wheels and LLVM runtime the host lacks, into
# one folder that the device tool carries.
#
#   bash scripts/gpu_bundle.sh [DIR]      # DIR defaults to .gpu (git-ignored)
#   # then, on the host:   source DIR/setup.sh && python3 -m pytest ... -m gpu
#
# The wheels are built fast rather than portable (mneme-replay links libLLVM.so.22, which
# the bundle carries; no auditwheel), so they are for the GPU host only: release wheels
# come from scripts/build_wheels.sh. Several sessions may bundle at once: the wheel build
# (shared build/ folders) takes a lock.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${1:-.gpu}"
case "$dir" in /*|*..*) echo "gpu_bundle: DIR must be a folder name inside the checkout" >&2; exit 2 ;; esac
source scripts/setup.sh >/dev/null
grep -qx '/.gpu*/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu*/' >> .git/info/exclude; }

wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
(
  flock 9
  for pkg in packages/mneme-instrument packages/mneme-runtime packages/mneme-replay \
             packages/mneme-tune packages/mneme-cli; do
    MNEME_LLVM_STATIC=OFF hatch run pip wheel -q --no-deps --no-build-isolation -w "$wheels" "$pkg" \
      2>&1 | grep -v 'is ignored' || true
  done
) 9>/tmp/mneme-gpu-bundle.lock
[ "$(ls "$wheels"/*.whl | wc -l)" -ge 5 ] || { echo "gpu_bundle: a wheel failed to build" >&2; exit 1; }

# nvCOMP (mneme-replay's device decompression) is not on the GPU host (checked 2026-11-26):
# MNEME_BUNDLE_NVCOMP=1 carries its library, xz-compressed (21 MB; the wheel's 30 MB and
# the rest of the bundle exceed what the device tool carries), and setup.sh points
# MNEME_NVCOMP at it. MNEME_BUNDLE_NO_TUNE=1 leaves out the tuner's wheels to make room.
nvcomp_lib=""
if [ "${MNEME_BUNDLE_NVCOMP:-0}" = 1 ]; then
  fetched="$(mktemp -d)"
  hatch run pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    -d "$fetched" 'nvidia-libnvcomp-cu13>=5,<7' 2>&1 | grep -v 'is ignored' || true
  python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [m for m in z.namelist() if m.endswith("/libnvcomp.so.6") or m.endswith("/libnvcomp.so.5")][0]; open(sys.argv[2], "wb").write(z.read(n))' \
    "$(ls "$fetched"/*.whl)" "$fetched/libnvcomp.so"
  nvcomp_lib="$fetched/libnvcomp.so.xz"
  xz -6 -T0 -c "$fetched/libnvcomp.so" > "$nvcomp_lib"
fi

# bundle.sh writes ./.gpu of the folder it runs in.
options=()
[ "${MNEME_BUNDLE_NO_TUNE:-0}" = 1 ] && options+=(--no-tune)
stage="$(mktemp -d)"
( cd "$stage" && bash "$root/../shared/gpu/bundle.sh" "${options[@]}" "$wheels"/*.whl >/dev/null )
rm -rf "$dir" && mv "$stage/.gpu" "$dir" && rmdir "$stage"
if [ -n "$nvcomp_lib" ]; then
  mkdir -p "$dir/nvcomp" && mv "$nvcomp_lib" "$dir/nvcomp/" && rm -rf "$(dirname "$nvcomp_lib")"
  cat >> "$dir/setup.sh" <<'SETUP'
# nvCOMP for device decompression (scripts/gpu_bundle.sh, MNEME_BUNDLE_NVCOMP=1)
_nvcomp_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/nvcomp"
[ -f "$_nvcomp_dir/libnvcomp.so" ] || xz -dc "$_nvcomp_dir/libnvcomp.so.xz" > "$_nvcomp_dir/libnvcomp.so"
export MNEME_NVCOMP="$_nvcomp_dir/libnvcomp.so"
SETUP
fi
echo "gpu_bundle: $(du -sh "$dir" | cut -f1) in $dir (carry it; on the host: source $dir/setup.sh)"
