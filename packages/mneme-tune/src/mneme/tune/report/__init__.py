"""A study's report folder: summary.json, trials.csv, best.json and the tables
(``_report``), its plots (``_plots``) and the process that draws them after the command
has returned (``_background_plots``)."""

import importlib

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


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # (looked up here once)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "HANDOVER",
    "LOG",
    "TOP",
    "best_configuration",
    "draw_in_background",
    "exported_settings",
    "summary",
    "verdict",
    "write_plots",
    "write_report",
    "write_trials_csv"
]
