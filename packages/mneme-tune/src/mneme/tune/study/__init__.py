"""A tuning run's Optuna study: storage URLs, the storage that keeps the study in memory
and writes it behind to the study's storage (SQLite template, study lock, claims of
trials), a fresh study opened on a thread beside the run's start, the liveness of the
tuner that owns a trial and the recovery of trials an interrupted run left, and the launch
shapes kept beside the recording (shape cache).

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used (Optuna and SQLAlchemy are heavy)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
    'ABANDONED_AFTER': '._interrupted_trials',
    'TUNER_ATTR': '._interrupted_trials',
    'recover_interrupted': '._interrupted_trials',
    'MirroredStorage': '._mirrored_storage',
    'WRITE_BATCH': '._mirrored_storage',
    'VALID': '._shape_cache',
    'cache_path': '._shape_cache',
    'launch_key': '._shape_cache',
    'load': '._shape_cache',
    'store': '._shape_cache',
    'copy_template': '._sqlite_template',
    'template_path': '._sqlite_template',
    'CREATOR_WAIT_STEPS': '._study',
    'DEFAULT_STORAGE_FILE': '._study',
    'RUNNING_ATTR': '._study',
    'RUNNING_REFRESH_SECONDS': '._study',
    'RUNNING_STALE_SECONDS': '._study',
    'SAMPLERS': '._study',
    'STUDY_ATTR': '._study',
    'default_sampler': '._study',
    'default_storage_url': '._study',
    'make_sampler': '._study',
    'open_storage': '._study',
    'open_study': '._study',
    'owner_alive': '._study',
    'study_identity': '._study',
    'tuner_owner': '._study',
    'StudyOpening': '._study_open',
    'fresh_study': '._study_open',
    'JOURNAL_LOCK_GRACE_SECONDS': '._study_lock',
    'StudyLock': '._study_lock',
    'study_lock': '._study_lock',
    'RDBReader': '._study_writes',
    'RDBWriter': '._study_writes',
    'rdb_backend': '._study_writes',
}

# The same names for type checkers and the API reference (tests/test_types.py checks
# that they are the table's), re-exported explicitly (`name as name`).
# isort: off
if TYPE_CHECKING:
    from ._interrupted_trials import (
        ABANDONED_AFTER as ABANDONED_AFTER, TUNER_ATTR as TUNER_ATTR,
        recover_interrupted as recover_interrupted,
    )
    from ._mirrored_storage import (
        WRITE_BATCH as WRITE_BATCH, MirroredStorage as MirroredStorage,
    )
    from ._shape_cache import (
        VALID as VALID, cache_path as cache_path, launch_key as launch_key, load as load,
        store as store,
    )
    from ._sqlite_template import (
        copy_template as copy_template, template_path as template_path,
    )
    from ._study import (
        CREATOR_WAIT_STEPS as CREATOR_WAIT_STEPS, DEFAULT_STORAGE_FILE as DEFAULT_STORAGE_FILE,
        RUNNING_ATTR as RUNNING_ATTR, RUNNING_REFRESH_SECONDS as RUNNING_REFRESH_SECONDS,
        RUNNING_STALE_SECONDS as RUNNING_STALE_SECONDS, SAMPLERS as SAMPLERS,
        STUDY_ATTR as STUDY_ATTR, default_sampler as default_sampler,
        default_storage_url as default_storage_url, make_sampler as make_sampler,
        open_storage as open_storage, open_study as open_study, owner_alive as owner_alive,
        study_identity as study_identity, tuner_owner as tuner_owner,
    )
    from ._study_open import StudyOpening as StudyOpening, fresh_study as fresh_study
    from ._study_lock import (
        JOURNAL_LOCK_GRACE_SECONDS as JOURNAL_LOCK_GRACE_SECONDS, StudyLock as StudyLock,
        study_lock as study_lock,
    )
    from ._study_writes import (
        RDBReader as RDBReader, RDBWriter as RDBWriter, rdb_backend as rdb_backend,
    )
# isort: on


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
