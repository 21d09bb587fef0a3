"""The worker pool that replays trials: the ReplayExecutor and its dispatcher, the worker
processes (their main loop, records, spare and probe processes, the reaper of those that
exit), the pool's start beside the study, the use of the pool and the trials kept in
flight, and the end of the ``mneme tune`` process.

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used: a worker process (the fork server's preload) imports
``_worker`` alone, neither Optuna nor the executor."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
    'ReplayExecutor': '._executor',
    'as_completed': '._executor',
    'usable_cores': '._executor',
    'BUDGET_SHARE': '._in_flight',
    'depth': '._in_flight',
    'BusySeconds': '._pool_use',
    'LIMIT_USE': '._pool_use',
    'describe': '._pool_use',
    'pool_use': '._pool_use',
    'ProbeWorkers': '._probe_workers',
    'end_process': '._process_exit',
    'GRACE_SECONDS': '._process_reaper',
    'ProcessReaper': '._process_reaper',
    'REAP_POLL_SECONDS': '._process_reaper',
    'describe_exit': '._process_reaper',
    'BURST_SPARES': '._spares',
    'CONTEXT_BYTES': '._spares',
    'CPU_SPARES': '._spares',
    'INSTANCE_COPIES': '._spares',
    'MAX_SPARES': '._spares',
    'MEMORY_SHARE': '._spares',
    'SPARE_RESTORE_BYTES': '._spares',
    'SparePool': '._spares',
    'capacity': '._spares',
    'MAX_VISIBLE_GPUS': '._worker',
    'POISONED_EXIT_STATUS': '._worker',
    'SESSIONS_PER_WORKER': '._worker',
    'SessionPool': '._worker',
    'device_hello': '._worker',
    'failure_kind': '._worker',
    'instance_key': '._worker',
    'poisoned_exit': '._worker',
    'precompile': '._worker',
    'resolved': '._worker',
    'worker_main': '._worker',
    'worker_visible_devices': '._worker',
    'Restart': '._worker_records',
    'TaskRecord': '._worker_records',
    'WorkerRecord': '._worker_records',
    'PRELOAD': '._worker_server',
    'allow_fork_start': '._worker_server',
    'fork_context': '._worker_server',
    'start_worker_server': '._worker_server',
    'stop_worker_server': '._worker_server',
    'worker_context': '._worker_server',
    'AdoptedProcess': '._warm_workers',
    'WarmWorkers': '._warm_workers',
    'command_slots': '._warm_workers',
    'device_ordinals': '._warm_workers',
    'forget_server_children': '._warm_workers',
    'WorkerStart': '._worker_start',
    'prepare_baseline': '._worker_start',
}

# The same names for type checkers and the API reference (tests/test_types.py checks
# that they are the table's), re-exported explicitly (`name as name`).
# isort: off
if TYPE_CHECKING:
    from ._executor import (
        ReplayExecutor as ReplayExecutor, as_completed as as_completed,
        usable_cores as usable_cores,
    )
    from ._in_flight import BUDGET_SHARE as BUDGET_SHARE, depth as depth
    from ._pool_use import (
        LIMIT_USE as LIMIT_USE, BusySeconds as BusySeconds, describe as describe,
        pool_use as pool_use,
    )
    from ._probe_workers import ProbeWorkers as ProbeWorkers
    from ._process_exit import end_process as end_process
    from ._process_reaper import (
        GRACE_SECONDS as GRACE_SECONDS, REAP_POLL_SECONDS as REAP_POLL_SECONDS,
        ProcessReaper as ProcessReaper, describe_exit as describe_exit,
    )
    from ._spares import (
        BURST_SPARES as BURST_SPARES, CONTEXT_BYTES as CONTEXT_BYTES, CPU_SPARES as CPU_SPARES,
        INSTANCE_COPIES as INSTANCE_COPIES, MAX_SPARES as MAX_SPARES, MEMORY_SHARE as MEMORY_SHARE,
        SPARE_RESTORE_BYTES as SPARE_RESTORE_BYTES, SparePool as SparePool, capacity as capacity,
    )
    from ._worker import (
        MAX_VISIBLE_GPUS as MAX_VISIBLE_GPUS, POISONED_EXIT_STATUS as POISONED_EXIT_STATUS,
        SESSIONS_PER_WORKER as SESSIONS_PER_WORKER, SessionPool as SessionPool,
        device_hello as device_hello, failure_kind as failure_kind, instance_key as instance_key,
        poisoned_exit as poisoned_exit, precompile as precompile, resolved as resolved,
        worker_main as worker_main, worker_visible_devices as worker_visible_devices,
    )
    from ._worker_records import (
        Restart as Restart, TaskRecord as TaskRecord, WorkerRecord as WorkerRecord,
    )
    from ._worker_server import (
        PRELOAD as PRELOAD, allow_fork_start as allow_fork_start, fork_context as fork_context,
        start_worker_server as start_worker_server,
        stop_worker_server as stop_worker_server, worker_context as worker_context,
    )
    from ._warm_workers import (
        AdoptedProcess as AdoptedProcess, WarmWorkers as WarmWorkers, command_slots as command_slots, device_ordinals as device_ordinals,
        forget_server_children as forget_server_children,
    )
    from ._worker_start import WorkerStart as WorkerStart, prepare_baseline as prepare_baseline
# isort: on


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
