#!/usr/bin/env bash
# Install what mneme needs on a fresh Debian 12 machine (run as root, or with sudo):
# clang-22/LLVM 22 from Debian's bookworm-security, build tools, and hatch.
# Sourced by scripts/test.sh and scripts/demo.sh; exports MNEME_PYTHON and puts hatch on PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd="sudo"

need_apt=()
command -v clang++-22 >/dev/null || need_apt+=(clang-22 lld-22)
# clang-offload-bundler / clang-linker-wrapper: HIP objects and -fgpu-rdc links need them.
[ -x /usr/lib/llvm-22/bin/clang-linker-wrapper ] || need_apt+=(clang-tools-22)
[ -e /usr/lib/llvm-22/lib/cmake/llvm/LLVMConfig.cmake ] || need_apt+=(llvm-22-dev)
[ -e /usr/include/zstd.h ] || need_apt+=(libzstd-dev)
# scripts/build_wheels.sh builds the native packages once per Python version; ccache lets
# the later builds reuse the objects that do not depend on Python.
command -v ccache >/dev/null || need_apt+=(ccache)
[ -e /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
command -v git >/dev/null || need_apt+=(git)
# PostgreSQL: the tests start a throw-away server to share a study (tests/tune/postgres_server.py).
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need_apt+=(postgresql)
# Slurm and munge: a test starts a one-node cluster to run the --app job array
# (tests/tune/slurm_cluster.py).
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null || need_apt+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need_apt+=(munge)

# Python >= 3.11 (3.12 preferred: the GPU host's and the stable-ABI build's version).
MNEME_PYTHON=""
for cand in python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3.12" python3.13 python3.11 python3; do
  if p="$(command -v "$cand" 2>/dev/null)" && "$p" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    MNEME_PYTHON="$p"; break
  fi
done
[ -n "$MNEME_PYTHON" ] || need_apt+=(python3 python3-venv python3-dev)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -q >/dev/null
  $sudo_cmd apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
fi
[ -n "$MNEME_PYTHON" ] || MNEME_PYTHON="$(command -v python3)"
export MNEME_PYTHON

# hatch lives in its own virtual environment so it never touches the system Python, and
# so do the native builds' CMake, Ninja and nanobind (see MNEME_NANOBIND_DIR below).
tools="$root/.venv-tools"
if ! "$tools/bin/python" -c "import hatch, cmake, ninja, nanobind" 2>/dev/null; then
  [ -x "$tools/bin/python" ] || "$MNEME_PYTHON" -m venv "$tools"
  "$tools/bin/python" -m pip install -q -U pip hatch cmake ninja nanobind
fi
export PATH="$tools/bin:$PATH"
# Every native build (the development environment's, each of scripts/build_wheels.sh's)
# compiles nanobind from this one folder and runs this CMake (first on PATH, so pip's
# isolated builds install none): their compile lines are then the same (nanobind's paths,
# CMake's flag order), and ccache compiles each object once instead of once per build.
MNEME_NANOBIND_DIR="$("$tools/bin/python" -m nanobind --cmake_dir)"
export MNEME_NANOBIND_DIR
# hatch creates its environments with this interpreter.
export HATCH_PYTHON="$MNEME_PYTHON"
echo "setup: python $("$MNEME_PYTHON" -c 'import platform; print(platform.python_version())'), $(clang++-22 --version | head -1), hatch $(hatch --version | awk '{print $NF}')"

# The development environment, with its native builds: mneme_create_env, run at the end of
# this file unless MNEME_SETUP_ENV=later (scripts/test.sh then calls it itself, after
# starting the wheel build, which uses the CPU that pip's downloads leave idle).
mneme_create_env() {
  # The native parts are built in place when hatch creates the environment. An environment
  # left from an earlier checkout at this path may lack them (or point at deleted builds):
  # then build it again.
  if hatch env find >/dev/null 2>&1 && [ -d "$(hatch env find)" ]; then
    if ! hatch run python -c "import mneme.runtime._native, mneme.replay.jit._llvm" >/dev/null 2>&1 \
       || ! ls "$root"/packages/mneme-instrument/src/mneme/instrument/lib/*.so >/dev/null 2>&1 \
       || [ ! -e "$root/packages/mneme-runtime/src/mneme/runtime/libmneme_recorder.so" ] \
       || [ ! -e "$root/packages/mneme-runtime/src/mneme/runtime/libmneme_apply.so" ]; then
      echo "setup: the development environment lacks the native builds; recreating it"
      hatch env prune
    fi
  fi
  # Create the development environment now rather than at the first `hatch run`, its
  # native builds through ccache (scoped to this command: CMake tests must not inherit a
  # launcher). scripts/build_wheels.sh, with the same cache and compile lines, then
  # compiles only the objects that include another Python's headers (cp310, cp311).
  if command -v ccache >/dev/null; then
    CCACHE_DIR="${CCACHE_DIR:-$root/build/ccache}" CMAKE_ARGS="-Dnanobind_DIR=$MNEME_NANOBIND_DIR" \
      CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache hatch env create
  else
    CMAKE_ARGS="-Dnanobind_DIR=$MNEME_NANOBIND_DIR" hatch env create
  fi
}
[ "${MNEME_SETUP_ENV:-}" = later ] || mneme_create_env
