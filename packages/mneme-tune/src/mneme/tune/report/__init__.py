"""A study's report folder: summary.json, trials.csv, best.json and the tables
(``_report``), its plots (``_plots``) and the process that draws them after the command
has returned (``_background_plots``)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
    'HANDOVER': '._background_plots',
    'LOG': '._background_plots',
    'draw_in_background': '._background_plots',
    'write_plots': '._plots',
    'TOP': '._report',
    'best_configuration': '._report',
    'exported_settings': '._report',
    'summary': '._report',
    'verdict': '._report',
    'write_report': '._report',
    'write_trials_csv': '._report',
}

# The same names for type checkers and the API reference (tests/test_types.py checks
# that they are the table's), re-exported explicitly (`name as name`).
# isort: off
if TYPE_CHECKING:
    from ._background_plots import (
        HANDOVER as HANDOVER, LOG as LOG, draw_in_background as draw_in_background,
    )
    from ._plots import write_plots as write_plots
    from ._report import (
        TOP as TOP, best_configuration as best_configuration,
        exported_settings as exported_settings, summary as summary, verdict as verdict,
        write_report as write_report, write_trials_csv as write_trials_csv,
    )
# isort: on


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
