"""Check the wheels in a folder against what we promise to install on (docs/release.md).

    python scripts/wheel_tags.py dist [--auditwheel PATH]

Every distribution has a wheel for each supported CPython (native ones: cp310, cp311 and
cp312-abi3, which 3.12 and newer install) on a platform no newer than manylinux_2_28
(glibc 2.28: RHEL 8, Ubuntu 20.04). With --auditwheel, `auditwheel show` must agree for
every native wheel. No sdist of a native distribution may be there (pip would build it
wherever no wheel fits, and fail late for want of LLVM 22). Prints one line per problem
and exits 1 if there is any. Standard library only: scripts/build_wheels.sh runs it with
its build Python, tests/test_wheels.py imports it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

#: CPython versions every distribution installs on (3.12+ through the abi3 wheels)
SUPPORTED_PYTHONS = [(3, 10), (3, 11), (3, 12), (3, 13)]
#: the newest glibc a wheel may need
MAX_GLIBC = (2, 28)
ARCH = "x86_64"
#: distribution -> whether its wheels hold native code (platform-tagged)
DISTRIBUTIONS = {
    "mneme-instrument": True,
    "mneme-runtime": True,
    "mneme-replay": True,
    "mneme-tune": False,
    "mneme-cli": False,
    "mneme": False,
}


def wheel_tags(wheel: Path) -> tuple[str, set[str], set[str], set[str]]:
    """(distribution, python tags, abi tags, platform tags) of a wheel file name."""
    parts = wheel.name.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6):
        raise ValueError(f"{wheel.name}: not a wheel file name")
    name, (py, abi, plat) = parts[0], parts[-3:]
    return name.replace("_", "-"), set(py.split(".")), set(abi.split(".")), set(plat.split("."))


def glibc_of(platform: str) -> tuple[int, int] | None:
    """The glibc a manylinux platform tag needs (manylinux2014 is 2.17); None otherwise."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for tag, glibc in legacy.items():
        if platform == f"{tag}_{ARCH}":
            return glibc
    m = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{ARCH}", platform)
    return (int(m.group(1)), int(m.group(2))) if m else None


def installs_on(wheel: Path, python: tuple[int, int], glibc: tuple[int, int] = MAX_GLIBC) -> bool:
    """Whether pip on CPython `python`, glibc `glibc`, x86_64 would take this wheel."""
    _, pys, abis, plats = wheel_tags(wheel)
    cp = f"cp{python[0]}{python[1]}"
    python_ok = (
        ("py3" in pys and "none" in abis)
        or (cp in pys and cp in abis)
        or ("abi3" in abis and any(
            re.fullmatch(r"cp3(\d+)", p) and (3, int(p[3:])) <= python for p in pys))
    )
    platform_ok = "any" in plats or any(
        (g := glibc_of(p)) is not None and g <= glibc for p in plats)
    return python_ok and platform_ok


def problems(folder: Path, auditwheel: str | None = None) -> list[str]:
    """What is missing or too new in `folder`, one line each (empty: all good)."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    out = []
    # pip would build a native sdist wherever no wheel fits, and fail late for want of LLVM 22
    for sdist in sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []:
        dist = re.sub(r"-[^-]+\.tar\.gz$", "", sdist.name).replace("_", "-")
        if DISTRIBUTIONS.get(dist):
            out.append(f"{sdist.name}: native distributions are published as wheels only")
    for dist, native in DISTRIBUTIONS.items():
        own = [w for w in wheels if wheel_tags(w)[0] == dist]
        for w in own:
            plats = wheel_tags(w)[3]
            if native and not any((g := glibc_of(p)) and g <= MAX_GLIBC for p in plats):
                out.append(f"{w.name}: platform {'.'.join(sorted(plats))} is newer than "
                           f"manylinux_{MAX_GLIBC[0]}_{MAX_GLIBC[1]}_{ARCH}")
            if not native and plats != {"any"}:
                out.append(f"{w.name}: a pure distribution with a platform tag")
        for python in SUPPORTED_PYTHONS:
            if not any(installs_on(w, python) for w in own):
                out.append(f"{dist}: no wheel for CPython {python[0]}.{python[1]} on "
                           f"manylinux_{MAX_GLIBC[0]}_{MAX_GLIBC[1]}_{ARCH} in {folder}")
        if native and auditwheel:
            out += [line for w in own for line in _auditwheel_problems(auditwheel, w)]
    return out


def _auditwheel_problems(auditwheel: str, wheel: Path) -> list[str]:
    proc = subprocess.run([auditwheel, "show", str(wheel)], capture_output=True, text=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    found = re.search(rf'consistent with the following platform tag: "?(\S+?_{ARCH})', text)
    if proc.returncode != 0 or not found:
        return [f"{wheel.name}: auditwheel show failed: {text[-300:]}"]
    glibc = glibc_of(found.group(1))
    if glibc is None or glibc > MAX_GLIBC:
        return [f"{wheel.name}: auditwheel show says {found.group(1)}"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--auditwheel", help="also check each native wheel with `auditwheel show`")
    args = parser.parse_args(argv)
    found = problems(args.folder, args.auditwheel)
    for line in found:
        print(f"wheel_tags: {line}", file=sys.stderr)
    if not found:
        print(f"wheel_tags: every distribution installs on CPython "
              f"{', '.join(f'{a}.{b}' for a, b in SUPPORTED_PYTHONS)} with glibc >= "
              f"{MAX_GLIBC[0]}.{MAX_GLIBC[1]} ({ARCH})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
