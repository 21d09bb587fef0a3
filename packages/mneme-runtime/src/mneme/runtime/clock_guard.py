"""The guard of a command's clock locks (clock_control.py), a process of its own.

    python -m mneme.runtime.clock_guard PID MARKER...

It waits until its standard input closes, which happens when the command PID ends however
it ends (its exit, Ctrl-C, SIGKILL, a crash), then unlocks each marker's GPU that PID still
holds. Started in a session of its own, so a Ctrl-C sent to the command's terminal does not
reach it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    for number in (signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    owner, markers = int(argv[0]), [Path(p) for p in argv[1:]]
    while sys.stdin.buffer.read(65536):
        pass
    from .clock_control import open_nvml, read_marker, unlock

    nvml = None
    for path in markers:
        marker = read_marker(path)
        if marker is None or int(marker.get("pid", 0)) != owner:
            continue  # given back already, or another command's since
        nvml = nvml or open_nvml()
        if nvml is None:
            return 1
        try:
            unlock(nvml, marker)
        except OSError:
            continue  # the marker stays: the next mneme command repairs it
        path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
