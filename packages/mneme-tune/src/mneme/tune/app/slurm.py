"""`mneme tune --app` across machines, with Slurm as the engine.

``--emit-slurm DIR`` writes (does not run) three files:

    DIR/tune.sbatch    a job array: every task runs the same ``mneme tune --app`` on the
                       shared studies in ``--storage`` with ``--array-task $SLURM_ARRAY_TASK_ID``:
                       it starts at that kernel (the order rotated by the index), so the
                       tasks spread over the kernels; the studies' claims keep every
                       kernel's budget exact however many tasks join it
    DIR/merge.sbatch   ``mneme tune --app --merge-report``: the one report folder, from the
                       studies as the storage holds them, with no new trial
    DIR/submit.sh      submits the array, then the merge with ``--dependency=afterany``

``--slurm`` writes them and runs submit.sh. A task spends the budget in one round: the
second round of one process (budget.py) picks the promising kernels from every kernel's
first round, which no task sees.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..errors import SlurmError
from ..tune_types import TuneOptions

__all__ = ["Cluster", "SlurmError", "write_scripts"]

#: the tune command's parameters that shape the scripts, not the tuning the tasks run
OWN = ("emit_slurm", "slurm_submit", "slurm_tasks", "sbatch_options", "array_task", "merge_report",
       "report_dir", "plots", "app_command")
#: where --slurm writes the scripts when --emit-slurm does not say
DEFAULT_DIR = Path("mneme-slurm")


@dataclass(frozen=True)
class Cluster:
    """What --emit-slurm, --slurm, --array-task and --merge-report asked for."""

    emit_dir: Path | None = None
    submit: bool = False
    tasks: int | None = None
    sbatch: tuple[str, ...] = ()
    task: int | None = None  # this process is task N of an array (--array-task)
    merge: bool = False  # --merge-report
    storage: str | None = None
    arguments: tuple[str, ...] = ()  # the tuning's own options, as the tasks run them

    @classmethod
    def from_context(cls, ctx: click.Context, whole_app: bool) -> Cluster:
        """From the tune command's parameters; bad combinations are one line."""
        p = ctx.params
        emit_dir = p.get("emit_slurm")
        submit = bool(p.get("slurm_submit"))
        task, merge = p.get("array_task"), bool(p.get("merge_report"))
        given = [name for name, on in (("--emit-slurm", emit_dir is not None), ("--slurm", submit),
                                       ("--array-task", task is not None), ("--merge-report", merge))
                 if on]
        shapes = [name for name, on in (("--slurm-tasks", p.get("slurm_tasks") is not None),
                                        ("--sbatch", bool(p.get("sbatch_options")))) if on]
        if (given or shapes) and not whole_app:
            raise SlurmError(f"{(given + shapes)[0]} is for the whole application: add --app")
        if shapes and not (emit_dir is not None or submit):
            raise SlurmError(f"{shapes[0]} shapes the scripts of --emit-slurm DIR (or --slurm): add one")
        modes = {"--emit-slurm" if (emit_dir is not None or submit) else None,
                 "--array-task" if task is not None else None, "--merge-report" if merge else None} - {None}
        if len(modes) > 1:
            raise SlurmError(f"{' and '.join(sorted(modes))} are separate steps "  # type: ignore[arg-type]
                             "of a cluster run: give one")
        cluster = cls(emit_dir=(emit_dir or DEFAULT_DIR) if submit else emit_dir, submit=submit,
                      tasks=p.get("slurm_tasks"), sbatch=tuple(p.get("sbatch_options") or ()),
                      task=task, merge=merge, storage=p.get("storage"),
                      arguments=tuple(task_arguments(ctx)))
        if cluster.emits:
            check_storage(cluster.storage)
        if submit and shutil.which("sbatch") is None:
            raise SlurmError("--slurm: sbatch is not on PATH: run on a machine with Slurm's commands "
                             "(a login node), or write the scripts with --emit-slurm DIR and submit "
                             "DIR/submit.sh there")
        return cluster

    @property
    def emits(self) -> bool:
        return self.emit_dir is not None

    def task_options(self, options: TuneOptions) -> TuneOptions:
        """A task's options: its own seed (samplers of one study must not propose the same
        points)."""
        if self.task is None or options.seed is None:
            return options
        return dataclasses.replace(options, seed=options.seed + self.task)


def check_storage(storage: str | None) -> None:
    """The tasks run on other machines: only a database server is shared by all of them."""
    if storage is not None and storage.startswith(("postgresql", "mysql")):
        return
    what = ("the default ./mneme-tune.journal (no --storage)" if storage is None
            else "a SQLite file" if storage.startswith("sqlite") else f"storage {storage!r}")
    raise SlurmError(f"--emit-slurm: the array's tasks run on other machines and cannot share {what}: "
                     "give --storage postgresql://USER@HOST:5432/DB (a PostgreSQL server every node reaches)")


def task_arguments(ctx: click.Context) -> list[str]:
    """The options given on this command line (not their defaults) as the tasks get them:
    the same tuning, without the options that write or submit the scripts."""
    out: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in OWN:
            continue
        if ctx.get_parameter_source(param.name) not in (ParameterSource.COMMANDLINE,
                                                         ParameterSource.ENVIRONMENT):
            continue
        value = ctx.params[param.name]
        flag = param.opts[0]
        if param.name == "database":
            value = str(Path(value).absolute())
        if param.is_flag and param.secondary_opts:
            out.append(flag if value else param.secondary_opts[0])
        elif param.is_flag:
            if value:
                out.append(flag)
        elif param.multiple:
            for item in value:
                out += [flag, str(item)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def _script(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def write_scripts(cluster: Cluster, kernels: int, report_dir: Path) -> dict[str, Any]:
    """Writes tune.sbatch, merge.sbatch and submit.sh into the cluster's folder; returns
    what was written (paths, tasks)."""
    folder = Path(cluster.emit_dir).absolute()  # type: ignore[arg-type]
    logs = folder / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)  # Slurm does not create its output's folder
    except OSError as error:
        raise SlurmError(f"cannot write the Slurm scripts to {folder}: {error.strerror}") from None
    tasks = cluster.tasks or max(kernels, 1)
    # The interpreter that runs this command: the tasks use the same installation (a
    # shared file system); MNEME=... in the job's environment overrides it.
    mneme = f"{shlex.quote(sys.executable)} -m mneme.cli"
    command = shlex.join(["tune", *cluster.arguments])
    report = report_dir.absolute()
    head = ["#!/bin/bash", f"#SBATCH --chdir={Path.cwd()}"]  # relative paths as given here
    extra = [f"#SBATCH {option}" for option in cluster.sbatch]
    tune = head + [
        "# mneme tune --app as a job array (mneme tune --emit-slurm): every task runs the same",
        "# tuning on the shared studies, starting at its own kernel; the studies' claims keep",
        "# each kernel's budget exact however many tasks join it.",
        "#SBATCH --job-name=mneme-app",
        f"#SBATCH --array=0-{tasks - 1}",
        f"#SBATCH --output={logs}/tune-%A_%a.out",
        *extra,
        "set -euo pipefail",
        f'MNEME="${{MNEME:-{mneme}}}"',
        f'exec $MNEME {command} --array-task "$SLURM_ARRAY_TASK_ID"',
    ]
    merge = head + [
        "# The one report folder from the shared studies, once every task has ended: no new trial.",
        "#SBATCH --job-name=mneme-app-merge",
        f"#SBATCH --output={logs}/merge-%j.out",
        *extra,
        "set -euo pipefail",
        f'MNEME="${{MNEME:-{mneme}}}"',
        # plots drawn before the job ends: Slurm ends a job's leftover processes with it
        f"exec $MNEME {command} --merge-report --report {shlex.quote(str(report))} --plots wait",
    ]
    submit = [
        "#!/bin/bash",
        "# Submits the tuning array, then the merge job that waits for every task to end.",
        "set -euo pipefail",
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "command -v sbatch >/dev/null || { echo \"submit.sh: sbatch is not on PATH: run this where "
        "Slurm's commands are (a login node)\" >&2; exit 2; }",
        'array="$(sbatch --parsable "$here/tune.sbatch")"; array="${array%%;*}"',
        'merge="$(sbatch --parsable --dependency=afterany:"$array" "$here/merge.sbatch")"; '
        'merge="${merge%%;*}"',
        'echo "$array $merge" > "$here/jobs"',
        f'echo "submitted: tuning array $array ({tasks} tasks), report job $merge '
        f'(writes {report}); logs in {logs}"',
    ]
    files = {"tune.sbatch": tune, "merge.sbatch": merge, "submit.sh": submit}
    for name, lines in files.items():
        path = folder / name
        path.write_text(_script(lines))
        path.chmod(0o700)  # (the storage URL may hold a password)
    return {"folder": folder, "tasks": tasks, "report": report, "files": [folder / n for n in files]}


def submit(folder: Path) -> str:
    """Runs submit.sh; returns its line (the job ids)."""
    run = subprocess.run(["bash", str(folder / "submit.sh")], capture_output=True, text=True)
    if run.returncode != 0:
        why = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
        raise SlurmError(f"--slurm: submitting {folder}/submit.sh failed: {why}")
    return run.stdout.strip()


def emit(cluster: Cluster, kernels: int, report_dir: Path, out) -> int:
    """--emit-slurm / --slurm: the scripts written (and submitted); the exit status."""
    written = write_scripts(cluster, kernels, report_dir)
    folder = written["folder"]
    if cluster.submit:
        out.print(submit(folder), soft_wrap=True, markup=False)
        return 0
    out.print(f"wrote {folder}/tune.sbatch ({written['tasks']} tasks), merge.sbatch (the report: "
              f"{written['report']}) and submit.sh: submit them with bash {folder}/submit.sh",
              soft_wrap=True, markup=False)
    return 0
