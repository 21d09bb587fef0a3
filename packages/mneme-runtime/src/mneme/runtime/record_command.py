"""`mneme record -rdb DB -- APP ARGS`: run an instrumented application under the recorder.

The command checks everything it can before the application starts (the executable is
instrumented, the database directory is usable), extracts the kernels' IR and metadata
from the executable's ``.mneme.kernels`` section into a manifest the recorder reads, then
runs the application with ``libmneme_recorder.so`` preloaded. The application's stdout,
stderr and exit status pass through unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from .address_space import DEFAULT_BASE
from .errors import UserError
from .native_settings import (
    CUPTI_LIBRARY,
    RECORD_BASE,
    RECORD_CAPTURE,
    RECORD_DB,
    RECORD_EPILOGUE,
    RECORD_FILTER,
    RECORD_HOST_MEMORY,
    RECORD_MANAGED,
    RECORD_MANIFEST,
    RECORD_MAX,
    RECORD_RANKS,
    RECORD_REPORT_DIR,
    RECORD_STATS,
    RECORD_VASS,
)

RECORDER = Path(__file__).with_name("libmneme_recorder.so")
#: The default range fits a framework process on the largest GPUs (PyTorch's caching
#: allocator, JAX's pool): reserving address space costs nothing until memory is mapped.
DEFAULT_VASS_GIB = 256


def _manifest(executable: Path, out: Path) -> str:
    """Write the recorder's kernel manifest (one tab-separated line per kernel of an
    instrumented executable; empty otherwise) and say what the command starts."""
    try:
        from mneme.instrument.section import SectionError, read_kernels
    except ImportError:
        raise UserError("mneme record needs mneme-instrument: pip install mneme-instrument") from None
    from mneme.instrument.errors import NotInstrumentedError

    try:
        kernels = read_kernels(executable)
    except (NotInstrumentedError, SectionError, OSError):
        # Not instrumented (an nvcc build, python, a shell script, a launcher): the
        # recorder learns kernels as they are registered (fatbinaries of the executable and
        # of every shared object) or loaded (modules, libraries, NVRTC and Triton output),
        # with their PTX and/or cubin, in this process and its children.
        (out / "kernels.tsv").write_text("")
        return "kernels are learned as the process registers or loads them"
    lines = []
    for index, k in enumerate(kernels):
        if not k.static_hash or not k.ir:
            continue  # extraction failed at build time: launches run unrecorded
        ir_path = out / f"k{index}.bc"
        ir_path.write_bytes(k.ir)
        params = ",".join(
            f"{p.size}:{p.align}:{p.offset}:{int(p.pointer)}:{int(p.byval)}" for p in k.params
        )
        globals_ = ",".join(f"{g.name}:{g.size}:{g.address_space}" for g in k.globals)
        demangled = k.demangled.replace("\t", " ").replace("\n", " ")
        lines.append("\t".join([k.name, k.static_hash, demangled, str(ir_path), params, globals_]))
    (out / "kernels.tsv").write_text("\n".join(lines) + "\n")
    return f"{len(lines)} kernels with IR, others learned as they are registered or loaded"


def summarize_reports(directory: Path) -> str:
    """One line over what every process of the command saw (the recorder leaves a report
    per process that used CUDA): instances recorded, or why there are none."""
    totals: dict[str, int] = {}
    processes = 0
    calls: set[str] = set()
    stopped: list[str] = []  # a recorder's fatal error (recorder.cpp: fatal)
    for report in sorted(directory.glob("*.txt")):
        processes += 1
        for line in report.read_text(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "unrecorded_call":
                calls.add(value)
            elif key == "fatal":
                stopped.append(value)
            elif value.isdigit():
                totals[key] = totals.get(key, 0) + int(value)
    launches, recorded = totals.get("launches", 0), totals.get("recorded", 0)
    where = f"{processes} process{'es' if processes != 1 else ''} used CUDA"
    if stopped:
        return (f"the recording stopped: {stopped[0]}" + (f" ({recorded} instances recorded in other "
                                                           f"processes)" if recorded else ""))
    if recorded:
        return f"{recorded} instances recorded ({launches} launches seen; {where})"
    if processes == 0 or launches == 0:
        why = "no kernel launch was seen (the command ran no CUDA code the recorder could follow"
        why += "; " + "; ".join(sorted(calls)) + ")" if calls else ")"
        return f"nothing recorded: {why}"
    unknown, unselected = totals.get("unknown", 0), totals.get("not_selected", 0)
    if unselected and not unknown:
        why = f"none of the {launches} launches seen was of a kernel --kernel/-mr selected"
    else:
        why = (f"{launches} launches seen, {unknown} of kernels whose code or parameter layout "
               f"was not found, {unselected} not selected by --kernel/-mr")
    return f"nothing recorded: {why} ({where})"


def missing_gpu() -> str | None:
    """Why this machine cannot run CUDA code (no driver, cuInit failed, no GPU visible),
    with what to do; None when it can. Asked only after a run that launched nothing, so
    a recording never pays for a driver initialisation in this process."""
    from .device import device_count
    from .errors import NoDriverError

    try:
        count = device_count()
    except NoDriverError as error:
        return str(error)
    if count == 0:
        return ("no GPU is visible to CUDA (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}); record where nvidia-smi lists one")
    return None


@click.command("record", context_settings={"ignore_unknown_options": True})
@click.option("-rdb", "--record-db-dir", "db", required=True, type=click.Path(path_type=Path),
              help="Recording database directory (created; may hold an earlier recording of the same range).")
@click.option("-vass", "--virtual-address-space-size", "vass", type=click.IntRange(1, 1 << 16),
              default=DEFAULT_VASS_GIB, show_default=True,
              help="GiB of virtual address space to reserve for device allocations (address "
                   "space only: memory is mapped as the application allocates).")
@click.option("--vass-base", type=str, default=hex(DEFAULT_BASE), show_default=True,
              help="Fixed base address of that range (replay recreates it there).")
@click.option("-mr", "--per-kernel-max-recordings", "max_recordings", type=click.IntRange(0), default=0,
              help="Record at most N distinct instances per kernel (0: no limit).")
@click.option("--kernel", "kernel_regex", default="", help="Record only kernels whose name matches this regex.")
@click.option("--epilogue-format", type=click.Choice(["diff", "bytes", "best"]), default="diff", show_default=True)
@click.option("-rr", "--record-ranks", default="0", show_default=True,
              help="MPI ranks to record: a comma-separated list or 'all'.")
@click.option("--host-memory", type=float, default=None,
              help="GiB of host memory for staged snapshot bytes not yet written "
                   "(default: min(8, a quarter of RAM)); the application waits when it is full.")
@click.option("--stats", is_flag=True, help="Print one line of snapshot statistics on stderr at exit.")
@click.option("--capture", type=click.Choice(["all", "reachable"]), default="all", show_default=True,
              help="What a snapshot holds: every live allocation, or only those the kernel's "
                   "arguments and device globals reach through stored pointers (docs/record.md).")
@click.option("--managed", type=click.Choice(["placed", "host", "driver"]), default="placed", show_default=True,
              help="How managed memory is served: the driver's, placed in the recorder's range (device "
                   "speed); host memory mapped there (kernels read it over the bus); or the driver's "
                   "wherever it puts it (replay may find the address taken). docs/record.md.")
@click.option("--clock-control", default="base", show_default=True, metavar="base|none|MHZ",
              help="Lock the SM clock of every GPU the application sees while it runs, so its "
                   "in-app kernel times are taken at the clock replay and tuning measure at (base: "
                   "the default applications clock; none: as the driver sets it). Needs root.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(db: Path, vass: int, vass_base: str, max_recordings: int, kernel_regex: str,
           epilogue_format: str, record_ranks: str, host_memory: float | None, stats: bool,
           capture: str, managed: str, clock_control: str, command: tuple[str, ...]):
    """Run COMMAND and record its kernel launches: any command (an executable, python, a
    script or launcher that starts the application). Kernels of executables built with
    mneme-clang++ come with their LLVM IR; all others with their PTX and/or cubin."""
    from .clock_control import held_clocks, parse_clock_policy

    clock_policy = parse_clock_policy(clock_control)
    executable = shutil.which(command[0]) or command[0]
    if not Path(executable).is_file():
        raise UserError(f"{command[0]}: no such executable")
    try:
        base = int(vass_base, 0)
    except ValueError:
        raise UserError(f"--vass-base {vass_base!r} is not an address (e.g. 0x200000000000)") from None
    if kernel_regex:
        try:
            re.compile(kernel_regex)
        except re.error as exc:
            raise UserError(f"--kernel {kernel_regex!r} is not a regular expression: {exc}") from None
    if record_ranks != "all" and not re.fullmatch(r"\d+(,\d+)*", record_ranks):
        raise UserError(f"--record-ranks {record_ranks!r}: give 'all' or a list like 0,2")
    if host_memory is not None and not 0 < host_memory <= 1 << 20:
        raise UserError(f"--host-memory {host_memory:g}: give a positive number of GiB (e.g. 4 or 0.5)")
    if not RECORDER.is_file():
        raise UserError(f"the recorder library is missing ({RECORDER}): reinstall mneme-runtime")
    from . import _native

    with tempfile.TemporaryDirectory(prefix="mneme-record-") as tmp:
        kernels = _manifest(Path(executable), Path(tmp))
        # Create or check the database before the application runs (one line if unusable).
        _native.RecordingWriter(str(db), base, vass << 30, epilogue_format=epilogue_format)
        click.echo(f"mneme record: {kernels}; recording into {db}", err=True)
        env = dict(os.environ)
        env.update({
            "LD_PRELOAD": ":".join(filter(None, [str(RECORDER), env.get("LD_PRELOAD", "")])),
            RECORD_DB: str(db.resolve()),
            RECORD_MANIFEST: str(Path(tmp) / "kernels.tsv"),
            RECORD_VASS: str(vass << 30),
            RECORD_BASE: hex(base),
            RECORD_MAX: str(max_recordings),
            RECORD_FILTER: kernel_regex,
            RECORD_EPILOGUE: epilogue_format,
            RECORD_RANKS: record_ranks,
            RECORD_CAPTURE: capture,
            RECORD_MANAGED: managed,
        })
        if host_memory is not None:
            env[RECORD_HOST_MEMORY] = str(max(1, int(host_memory * (1 << 30))))
        if stats:
            env[RECORD_STATS] = "1"
        if CUPTI_LIBRARY not in env:  # in-app kernel times (app_timing.cpp)
            from .kernel_timing import cupti_wheel_libraries

            if wheels := cupti_wheel_libraries():
                env[CUPTI_LIBRARY] = wheels[0]  # the preloaded recorder cannot ask Python
        reports = Path(tmp) / "reports"
        reports.mkdir()
        env[RECORD_REPORT_DIR] = str(reports)
        with held_clocks(clock_policy, None, lambda line: click.echo(line, err=True)):
            code = subprocess.call([executable, *command[1:]], env=env)
        summary = summarize_reports(reports)
        if summary.startswith("nothing recorded: no kernel launch") and (why := missing_gpu()):
            click.echo(f"mneme record: nothing recorded: {why}", err=True)
            sys.exit(code if code > 0 else 1)  # a recording cannot have succeeded
        click.echo(f"mneme record: {summary}", err=True)
    if code < 0:  # killed by a signal: exit as a shell would
        click.echo(f"mneme record: the application died of signal {-code}; "
                   "every instance recorded before that is complete", err=True)
        sys.exit(128 - code)
    sys.exit(code)
