"""The worker pool that replays trials: the ReplayExecutor and its dispatcher, the worker
processes (their main loop, records, spare and probe processes, the reaper of those that
exit), the pool's start beside the study, the use of the pool and the trials kept in
flight, and the end of the ``mneme tune`` process.

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used: a worker process (the fork server's preload) imports
``_worker`` alone, neither Optuna nor the executor."""

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
    'WorkerStart': '._worker_start',
    'prepare_baseline': '._worker_start',
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
