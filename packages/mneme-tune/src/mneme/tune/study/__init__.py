"""A tuning run's Optuna study: storage URLs, the in-memory mirror and its writes to the
storage (SQLite template, study lock, claims of trials), the liveness of the tuner that
owns a trial and the recovery of trials an interrupted run left, and the launch shapes
kept beside the recording (shape cache).

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used (Optuna and SQLAlchemy are heavy)."""

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
    'ABANDONED_AFTER': '._interrupted_trials',
    'TUNER_ATTR': '._interrupted_trials',
    'recover_interrupted': '._interrupted_trials',
    'VALID': '._shape_cache',
    'cache_path': '._shape_cache',
    'launch_key': '._shape_cache',
    'load': '._shape_cache',
    'store': '._shape_cache',
    'cache_dir': '._sqlite_template',
    'copy_template': '._sqlite_template',
    'template_path': '._sqlite_template',
    'CREATOR_WAIT_STEPS': '._study',
    'DEFAULT_STORAGE_FILE': '._study',
    'MirroredStudy': '._study',
    'RUNNING_ATTR': '._study',
    'RUNNING_REFRESH_SECONDS': '._study',
    'RUNNING_STALE_SECONDS': '._study',
    'SAMPLERS': '._study',
    'STUDY_ATTR': '._study',
    'WRITE_BATCH': '._study',
    'default_sampler': '._study',
    'make_sampler': '._study',
    'open_storage': '._study',
    'open_study': '._study',
    'owner_alive': '._study',
    'study_identity': '._study',
    'tuner_owner': '._study',
    'JOURNAL_LOCK_GRACE_SECONDS': '._study_lock',
    'StudyLock': '._study_lock',
    'study_lock': '._study_lock',
    'RDBReader': '._study_writes',
    'RDBWriter': '._study_writes',
    'rdb_backend': '._study_writes',
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
