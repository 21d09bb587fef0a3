"""Link-time resolution of kernels that call device code of other translation units.

With ``-fgpu-rdc`` a kernel may call a ``__device__`` function (or use a ``__device__``
variable) defined in another TU, so the per-TU extraction leaves it incomplete. For
such TUs the pass also stores the whole device module (as the frontend produced it) in
the TU's record. When ``mneme-clang++`` links objects with ``-fgpu-rdc`` and finds an
incomplete kernel, it:

1. takes the device modules of every object on the link line (per target and arch),
2. links them with ``llvm-link`` (the device program nvlink would see),
3. runs the mneme pass over the result with ``opt -passes=mneme-embed`` (stage ``link``),
4. adds one more object to the link whose ``.mneme.kernels`` section holds that record.

Readers (``section.read_kernels``) let a ``link`` record's kernel replace the rdc
``compile`` copy of the same name and arch. Objects inside static archives are not
looked at (their kernels stay incomplete).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import toolchain
from .errors import SectionError
from .object_records import embed
from .section import parse_section, read_elf_section


def _rdc_modules(objects: list[str]) -> tuple[dict[tuple[str, str], list[bytes]], bool]:
    """(target, arch) -> device modules, and whether any kernel is incomplete."""
    modules: dict[tuple[str, str], list[bytes]] = {}
    incomplete = False
    for obj in objects:
        try:
            section = read_elf_section(obj)
        except SectionError:
            continue
        if not section:
            continue
        for record in parse_section(section, obj):
            module = record.module
            if record.stage != "compile" or module is None:
                continue
            key = (str(record.meta.get("target", "")), str(record.meta.get("arch", "")))
            modules.setdefault(key, []).append(module)
            incomplete |= any(not k.complete for k in record.kernels)
    return modules, incomplete


def resolve(objects: list[str], llvm: toolchain.Llvm, work: Path) -> bytes:
    """Records (concatenated) of every kernel of the linked rdc device programs."""
    modules, incomplete = _rdc_modules(objects)
    if not incomplete:
        return b""
    llvm_link = str(llvm.tool("llvm-link"))
    opt = str(llvm.tool("opt"))
    plugin = str(toolchain.plugin_path())
    out = work / "records"
    out.mkdir(exist_ok=True)
    for n, ((_target, arch), blobs) in enumerate(sorted(modules.items())):
        inputs = []
        for m, blob in enumerate(blobs):
            path = work / f"{n}-{m}.bc"
            path.write_bytes(blob)
            inputs.append(str(path))
        linked = work / f"linked-{n}-{arch}.bc"
        proc = subprocess.run(
            [llvm_link, *inputs, "-o", str(linked)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["llvm-link failed"])[-1]
            raise SectionError(f"linking the -fgpu-rdc device modules for mneme failed: {last}")
        env = dict(os.environ)
        env.update(
            MNEME_INSTRUMENT_OUT=str(out), MNEME_INSTRUMENT_STAGE="link", MNEME_INSTRUMENT_RDC="0"
        )
        proc = subprocess.run(
            [
                opt,
                f"-load-pass-plugin={plugin}",
                "-passes=mneme-embed",
                "-disable-output",
                str(linked),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["opt failed"])[-1]
            raise SectionError(f"extracting the linked -fgpu-rdc kernels failed: {last}")
    return b"".join(p.read_bytes() for p in sorted(out.glob("*.mneme")))


def link_with_resolution(compiler: list[str], inv, llvm: toolchain.Llvm) -> int:
    objects = [path for _, path, kind in inv.inputs if kind == "object" and os.path.isfile(path)]
    with tempfile.TemporaryDirectory(prefix="mneme-ld-") as tmp:
        work = Path(tmp)
        try:
            blob = resolve(objects, llvm, work)
        except SectionError as exc:
            # never fail the user's link for mneme's sake: the kernels stay incomplete
            print(
                f"mneme-clang++: warning: {exc}; kernels calling other translation units' "
                "device code keep incomplete IR",
                file=sys.stderr,
            )
            blob = b""
        extra: list[str] = []
        if blob:
            empty = work / "mneme_rdc_kernels.o"
            proc = subprocess.run(
                [str(llvm.clang), "-c", "-x", "c", os.devnull, "-o", str(empty)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SectionError(f"could not create the rdc kernel object: {proc.stderr.strip()}")
            embed(llvm, str(empty), blob, work)
            extra.append(str(empty))
        return subprocess.run(compiler + inv.args + extra).returncode
