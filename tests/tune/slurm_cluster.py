"""A throw-away one-node Slurm cluster for the tests: Debian's ``slurm-wlm`` and ``munge``
(CI installs them, scripts/setup.sh). Everything lives in a folder of its own: a munge key
and munged on a private socket, a slurm.conf for this host (a node with the machine's
CPUs, ports of its own), slurmctld and slurmd in the foreground as root. Clients find it
through ``SLURM_CONF`` in the environment the context yields."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
#: seconds the node may take to come up idle
START_SECONDS = 30


def _which(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name)
                                       if p.is_file()), None)


def why_not() -> str | None:
    """Why no cluster can be started here (None: one can)."""
    if os.geteuid() != 0:
        return "not root: the one-node Slurm cluster runs slurmctld and slurmd as root"
    missing = [n for n in DAEMONS + CLIENTS if _which(n) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm "
                "munge (scripts/setup.sh does)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpus() -> int:
    """The machine's CPUs as slurmd counts them (a node declared with more is drained)."""
    run = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=30)
    for field in run.stdout.split():
        if field.startswith("CPUs=") and field[5:].isdigit():
            return int(field[5:])
    return os.cpu_count() or 1


def _conf(folder: Path, host: str) -> str:
    return f"""ClusterName=mnemetest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
# no cgroups (containers, CI machines): processes tracked by their parents
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# jobs share the node by cores: an array's tasks run side by side
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
# finished jobs stay visible to scontrol (there is no accounting database)
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={_cpus()} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _cancel_all(env: dict[str, str]) -> None:
    """Every job of the cluster cancelled and gone (their slurmstepd outlive slurmd)."""
    run = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True,
                         timeout=30)
    jobs = run.stdout.split()
    if not jobs:
        return
    subprocess.run(["scancel", *jobs], env=env, capture_output=True, timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        left = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True,
                              timeout=30).stdout.split()
        if not left:
            return
        time.sleep(0.5)


@contextlib.contextmanager
def cluster() -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd; yield the environment for Slurm's commands
    (``SLURM_CONF``); cancel every job, stop the daemons and delete the folder."""
    problem = why_not()
    assert problem is None, problem
    folder = Path(tempfile.mkdtemp(prefix="mneme-slurm-"))
    folder.chmod(0o755)  # munged wants the socket's folder searchable by all
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]  # slurmctld runs only on the host it names
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, host))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    processes: list[subprocess.Popen] = []
    log = (folder / "daemons.log").open("wb")

    def start(*command: str) -> None:
        processes.append(subprocess.Popen([_which(command[0]), *command[1:]], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("munged", "--foreground", "--force", f"--key-file={key}",
              f"--socket={folder}/munge.socket", f"--pid-file={folder}/munged.pid",
              f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed")
        _wait(lambda: (folder / "munge.socket").exists(), "munged's socket", folder, processes)
        start("slurmctld", "-D", "-f", str(conf))
        start("slurmd", "-D", "-f", str(conf), "-N", host)

        def idle() -> bool:
            run = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True,
                                 text=True, timeout=30)
            return run.returncode == 0 and run.stdout.strip() == "idle"

        _wait(idle, "the node to be idle", folder, processes)
        try:
            yield env
        finally:
            _cancel_all(env)
    finally:
        for process in reversed(processes):
            _stop(process)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _wait(ready, what: str, folder: Path, processes: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if ready():
            return
        dead = [p.args[0] for p in processes if p.poll() is not None]
        if dead:
            break
        time.sleep(0.3)
    logs = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                   for p in sorted(folder.glob("*.log")))
    raise RuntimeError(f"the test's Slurm cluster did not come up: waited for {what}{logs}")


def job_states(env: dict[str, str], job: str) -> dict[str, str]:
    """JobId (array tasks as ID_N) -> state, as scontrol shows them."""
    run = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True,
                         text=True, timeout=30)
    states = {}
    for line in run.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        name = fields.get("JobId", "?")
        if "ArrayTaskId" in fields:
            name = f"{fields.get('ArrayJobId')}_{fields['ArrayTaskId']}"
        states[name] = fields.get("JobState", "?")
    return states


def wait_for(env: dict[str, str], jobs: list[str], timeout: float) -> None:
    """Until none of ``jobs`` is pending or running (TimeoutError after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(jobs)], env=env,
                             capture_output=True, text=True, timeout=30)
        if run.returncode == 0 and not run.stdout.strip():
            return
        time.sleep(1)
    raise TimeoutError(f"jobs {', '.join(jobs)} still queued or running after {timeout:.0f} s")
