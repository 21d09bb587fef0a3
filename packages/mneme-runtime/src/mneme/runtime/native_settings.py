"""The environment variables mneme's native libraries read: their one definition.

Three readers take settings from the environment, each in a section of its own:

- ``record``: the recorder, ``libmneme_recorder.so``, which ``mneme record`` preloads into
  the application (docs/record.md, "Options and environment"); its in-app kernel timing
  (``app_timing.cpp``) included;
- ``apply``: the launch swapper, ``libmneme_apply.so``, which ``mneme run --apply``
  preloads (docs/tune.md);
- ``cupti``: the CUPTI kernel timer that both libraries and the Python module use.

Each :class:`Setting` names one variable with its kind, default and meaning. The Python
code that sets them (``mneme record``, ``mneme run --apply``, in-app confirmation) uses
the constants below, not string literals. The C++ side takes the names, the typed section
structs and their parser from ``native/include/mneme/runtime/native_settings.hpp``,
generated from this module (``python -m mneme.runtime.native_settings > <header>``); a
test checks that the header is what this module generates, that no native source spells a
name itself, and that docs/record.md's table lists every ``record`` setting.

Each library reads its section once, on first touch, and validates every value: a
malformed one ends the process with one line, ``mneme record: MNEME_RECORD_MAX=abc is not
a whole number in [0, 2147483647]; unset it or give one`` (``mneme run:`` for the
swapper), exit status 2. An empty value is an unset one. Stdlib only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from mneme.runtime.recording_format import DEFAULT_ZSTD_LEVEL

# --- the recorder (`mneme record`) -------------------------------------------------------
RECORD_DB = "MNEME_RECORD_DB"
RECORD_MANIFEST = "MNEME_RECORD_MANIFEST"
RECORD_REPORT_DIR = "MNEME_RECORD_REPORT_DIR"
RECORD_VASS = "MNEME_RECORD_VASS"
RECORD_BASE = "MNEME_RECORD_BASE"
RECORD_MAX = "MNEME_RECORD_MAX"
RECORD_FILTER = "MNEME_RECORD_FILTER"
RECORD_EPILOGUE = "MNEME_RECORD_EPILOGUE"
RECORD_RANKS = "MNEME_RECORD_RANKS"
RECORD_CAPTURE = "MNEME_RECORD_CAPTURE"
RECORD_MANAGED = "MNEME_RECORD_MANAGED"
RECORD_MANAGED_SIZE = "MNEME_RECORD_MANAGED_SIZE"
RECORD_HOST_MEMORY = "MNEME_RECORD_HOST_MEMORY"
RECORD_THREADS = "MNEME_RECORD_THREADS"
RECORD_ZSTD_LEVEL = "MNEME_RECORD_ZSTD_LEVEL"
RECORD_DIGESTS = "MNEME_RECORD_DIGESTS"
RECORD_PRESTAGE = "MNEME_RECORD_PRESTAGE"
RECORD_FATBIN = "MNEME_RECORD_FATBIN"
RECORD_STATS = "MNEME_RECORD_STATS"
RECORD_CRASH_WAIT = "MNEME_RECORD_CRASH_WAIT"
RECORD_TRACE_LOOKUPS = "MNEME_RECORD_TRACE_LOOKUPS"
RECORD_APP_TIME = "MNEME_RECORD_APP_TIME"
RECORD_TAGS = "MNEME_RECORD_TAGS"
#: Set by MPI launchers and Slurm, not by mneme: the process's rank, the first one set.
MPI_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "MV2_COMM_WORLD_RANK",
    "SLURM_PROCID",
)

# --- the launch swapper (`mneme run --apply`) ---------------------------------------------
APPLY_PLAN = "MNEME_APPLY_PLAN"
APPLY_REPORT = "MNEME_APPLY_REPORT"
APPLY_TIMING = "MNEME_APPLY_TIMING"
APPLY_TOTAL = "MNEME_APPLY_TOTAL"
APPLY_MODE = "MNEME_APPLY_MODE"

# --- the CUPTI kernel timer ----------------------------------------------------------------
CUPTI_LIBRARY = "MNEME_CUPTI_LIBRARY"
#: Set by CUDA installations, not by mneme: toolkit roots searched for libcupti.
CUDA_ROOT_VARIABLES = ("CUDA_HOME", "CUDA_PATH")

#: What a value of each kind is; the malformed-value line says "is not <this>".
KINDS = {
    "flag": "a flag (1 or 0)",  # also true/false, yes/no, on/off
    "integer": "a whole number in [{low}, {high}]",  # base 0: 0x... is hexadecimal
    "bytes": "a whole number of bytes",  # base 0: 0x... is hexadecimal
    "size": "a size (bytes, or e.g. 512M, 8G)",  # binary units; 0 is not one
    "seconds": "a number of seconds",
    "choice": "one of {choices}",
    "regex": "a regular expression (ECMAScript)",
    "ranks": "all or a list of ranks (e.g. 0,2)",
    "text": "",  # any text (a path): never malformed
}

#: Section -> (C++ struct, who reads it).
SECTIONS = {
    "record": ("Record", "libmneme_recorder.so (`mneme record` preloads it; docs/record.md)"),
    "apply": ("Apply", "libmneme_apply.so (`mneme run --apply` preloads it; docs/tune.md)"),
    "cupti": ("Cupti", "the CUPTI kernel timer (in-app times of the recorder and the swapper)"),
}


@dataclass(frozen=True)
class Setting:
    """One environment variable a native library reads."""

    name: str
    #: "record", "apply" or "cupti" (SECTIONS).
    section: str
    #: The member of the section's C++ struct that holds the parsed value.
    field: str
    #: A key of KINDS.
    kind: str
    #: The value when unset or empty (kind "size": 0 means the reader's own default).
    default: bool | int | float | str
    #: One line: what it does.
    meaning: str
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()
    #: False for variables others set (MPI launchers, CUDA installations).
    owned: bool = True

    def expected(self) -> str:
        """What a well-formed value is (the malformed-value line's "is not ...")."""
        return KINDS[self.kind].format(low=self.low, high=self.high, choices=", ".join(self.choices))


_INT32_MAX = 2**31 - 1

SETTINGS: tuple[Setting, ...] = (
    Setting(RECORD_DB, "record", "db", "text", "",
            "database directory; unset: the recorder stays out of the way"),
    Setting(RECORD_MANIFEST, "record", "manifest", "text", "",
            "the kernel manifest `mneme record` writes"),
    Setting(RECORD_REPORT_DIR, "record", "report_dir", "text", "",
            "where each process leaves what it saw, for the summary line"),
    Setting(RECORD_VASS, "record", "vass", "bytes", 256 << 30,
            "bytes of the reserved device range per GPU"),
    Setting(RECORD_BASE, "record", "base", "bytes", 0,
            "fixed base address of the range (0: the default base)"),
    Setting(RECORD_MAX, "record", "max", "integer", 0,
            "distinct instances recorded per kernel (0: all)", low=0, high=_INT32_MAX),
    Setting(RECORD_FILTER, "record", "filter", "regex", "",
            "kernels recorded: a regex over mangled or demangled names (empty: all)"),
    Setting(RECORD_EPILOGUE, "record", "epilogue", "choice", "diff",
            "how epilogues are stored", choices=("diff", "bytes", "best")),
    Setting(RECORD_RANKS, "record", "ranks", "ranks", "0",
            "MPI ranks recorded: a list, or all"),
    Setting(RECORD_CAPTURE, "record", "capture", "choice", "all",
            "regions a snapshot copies: every allocation, or those the launch reaches",
            choices=("all", "reachable")),
    Setting(RECORD_MANAGED, "record", "managed", "choice", "placed",
            "how managed memory is served", choices=("placed", "host", "driver")),
    Setting(RECORD_MANAGED_SIZE, "record", "managed_size", "bytes", 1 << 40,
            "bytes after the device range that serve managed memory (0: the driver's)"),
    Setting(RECORD_HOST_MEMORY, "record", "host_memory", "size", 0,
            "cap on staged snapshot bytes (0: min(32 GiB, RAM/4))"),
    Setting(RECORD_THREADS, "record", "threads", "integer", 0,
            "background threads (0: the CPUs of the affinity mask, at most 32)", low=0, high=4096),
    Setting(RECORD_ZSTD_LEVEL, "record", "zstd_level", "integer", DEFAULT_ZSTD_LEVEL,
            "zstd level of the chunks (negative: faster, larger)", low=-131072, high=22),
    Setting(RECORD_DIGESTS, "record", "digests", "flag", True,
            "skip epilogue chunks the kernel left unchanged (digests on the GPU)"),
    Setting(RECORD_PRESTAGE, "record", "prestage", "flag", True,
            "stage the next snapshot while the last one is compressed"),
    Setting(RECORD_FATBIN, "record", "fatbin", "flag", True,
            "record kernels missing from the manifest (nvcc code) from their fatbinary"),
    Setting(RECORD_STATS, "record", "stats", "flag", False,
            "print the statistics line at exit"),
    Setting(RECORD_CRASH_WAIT, "record", "crash_wait", "seconds", 60.0,
            "seconds a fatal signal waits for captured instances"),
    Setting(RECORD_TRACE_LOOKUPS, "record", "trace_lookups", "flag", False,
            "print every driver-function lookup and why launches are not recorded"),
    Setting(RECORD_APP_TIME, "record", "app_time", "flag", True,
            "time the application's launches (in-app times, application profile)"),
    Setting(RECORD_TAGS, "record", "tags", "choice", "filtered",
            "which CUPTI API records tag launches with their instance (0: none)",
            choices=("filtered", "all", "launches", "0")),
    *(Setting(name, "record", name.lower(), "integer", -1,
              "this process's rank (set by MPI launchers and Slurm; -1: unset)",
              low=0, high=_INT32_MAX, owned=False) for name in MPI_RANK_VARIABLES),
    Setting(APPLY_PLAN, "apply", "plan", "text", "",
            "the plan: which kernels run which tuned code; unset: the swapper stays out of the way"),
    Setting(APPLY_REPORT, "apply", "report", "text", "",
            "where the report goes at exit"),
    Setting(APPLY_TIMING, "apply", "timing", "flag", False,
            "time each launch of a planned kernel"),
    Setting(APPLY_TOTAL, "apply", "total", "flag", False,
            "time and sum every kernel of the process (CUPTI)"),
    Setting(APPLY_MODE, "apply", "mode", "choice", "swap",
            "swap the planned kernels, or measure the original ones", choices=("swap", "measure")),
    Setting(CUPTI_LIBRARY, "cupti", "library", "text", "",
            "the libcupti to load (no other is tried when it fails)"),
    *(Setting(name, "cupti", name.lower(), "text", "",
              "a CUDA toolkit root searched for libcupti (set by CUDA installations)", owned=False)
      for name in CUDA_ROOT_VARIABLES),
)

BY_NAME = {s.name: s for s in SETTINGS}


def section(name: str) -> tuple[Setting, ...]:
    """The settings of one section, in the order they are read."""
    return tuple(s for s in SETTINGS if s.section == name)


# --- the C++ header ------------------------------------------------------------------------

_CXX_TYPES = {
    "flag": "bool", "integer": "int64_t", "bytes": "uint64_t", "size": "uint64_t",
    "seconds": "double", "choice": "std::string", "regex": "std::string",
    "ranks": "std::string", "text": "std::string",
}


def macro(name: str) -> str:
    """The C/C++ macro that spells a variable's name: MNEME_ENV_ + the name less MNEME_."""
    return "MNEME_ENV_" + name.removeprefix("MNEME_")


def _cxx_default(s: Setting) -> str:
    if s.kind == "flag":
        return "true" if s.default else "false"
    if s.kind in ("choice", "regex", "ranks", "text"):
        return f'"{s.default}"'
    if s.kind in ("bytes", "size"):
        return f"{s.default}ull"
    if s.kind == "seconds":
        return repr(float(s.default))
    return str(s.default)


def _cxx_read(s: Setting) -> str:
    name = macro(s.name)
    if s.kind == "integer":
        return f"r.integer({name}, {s.field}, INT64_C({s.low}), INT64_C({s.high}));"
    if s.kind == "choice":
        choices = ", ".join(f'"{c}"' for c in s.choices)
        return f"r.choice({name}, {s.field}, {{{choices}}});"
    return f"r.{s.kind}({name}, {s.field});"


def c_header() -> str:
    """The C++ header with the names, the section structs and their parser
    (checked in as native_settings.hpp)."""
    names = "\n".join(f'#define {macro(s.name)} "{s.name}"' for s in SETTINGS)
    structs = []
    for key, (struct, reader) in SECTIONS.items():
        fields = "\n".join(
            f"  // {s.name}: {s.meaning}\n  {_CXX_TYPES[s.kind]} {s.field} = {_cxx_default(s)};"
            for s in section(key))
        reads = "\n".join(f"    {_cxx_read(s)}" for s in section(key))
        structs.append(f"""\
// The settings of {reader}.
struct {struct} {{
{fields}

  // Every field from the environment; a malformed value is kept in `r.error()`.
  void read(Reader& r) {{
{reads}
  }}
}};
""")
    body = "\n".join(structs)
    return f"""\
/* Generated by `python -m mneme.runtime.native_settings` from
 * mneme/runtime/native_settings.py, the one definition of these settings.
 * Do not edit: change the Python module and regenerate (a test checks they agree). */
#ifndef MNEME_RUNTIME_NATIVE_SETTINGS_HPP
#define MNEME_RUNTIME_NATIVE_SETTINGS_HPP

#include <cstdint>
#include <string>

#include "mneme/runtime/settings_reader.hpp"

{names}

namespace mneme::runtime::settings {{

{body}
}}  // namespace mneme::runtime::settings

#endif /* MNEME_RUNTIME_NATIVE_SETTINGS_HPP */
"""


if __name__ == "__main__":
    sys.stdout.write(c_header())
