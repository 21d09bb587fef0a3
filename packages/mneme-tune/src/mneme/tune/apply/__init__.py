"""Tuned kernels put back into the unmodified application: the plan the swapper reads
and its report (``_apply_plan``), ``mneme run --apply`` (``_apply_command``), why a
kernel ran in no swapped launch (``_apply_reasons``), its tables (``_apply_tables``),
the application's runs (``_app_process``), the in-app confirmation of a search's best
(``_app_confirm``) and the comparison of the application's outputs (``_output_compare``).
"""

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
    'IN_APP_COLUMNS': '._app_confirm',
    'InAppRun': '._app_confirm',
    'MIN_TAU_CANDIDATES': '._app_confirm',
    'TIMEOUT_FACTOR': '._app_confirm',
    'TIMEOUT_MIN_S': '._app_confirm',
    'application_command': '._app_confirm',
    'candidates_of': '._app_confirm',
    'check_application': '._app_confirm',
    'confirm_in_app': '._app_confirm',
    'in_app_lines': '._app_confirm',
    'in_app_row': '._app_confirm',
    'in_app_summary': '._app_confirm',
    'kendall_tau': '._app_confirm',
    'print_in_app': '._app_confirm',
    'run_in_app': '._app_confirm',
    'run_timeout': '._app_confirm',
    'ApplicationFailedError': '._app_process',
    'Run': '._app_process',
    'SWAPPER': '._app_process',
    'resolve_command': '._app_process',
    'run_once': '._app_process',
    'swap_env': '._app_process',
    'swapper_library': '._app_process',
    'timing_method_of': '._app_process',
    'OUTPUT_DIFFERS_EXIT': '._apply_command',
    'output_json': '._apply_command',
    'print_output_check': '._apply_command',
    'replay_times': '._apply_command',
    'run': '._apply_command',
    'Dim3': '._apply_plan',
    'KernelReport': '._apply_plan',
    'PLAN_HEADER': '._apply_plan',
    'SwapReport': '._apply_plan',
    'TunedKernel': '._apply_plan',
    'configs_in': '._apply_plan',
    'grid_rule': '._apply_plan',
    'load_tuned': '._apply_plan',
    'read_report': '._apply_plan',
    'write_plan': '._apply_plan',
    'why_not_swapped': '._apply_reasons',
    'LISTING_COLUMNS': '._apply_tables',
    'TIMES_COLUMNS': '._apply_tables',
    'listing_row': '._apply_tables',
    'milliseconds': '._apply_tables',
    'print_kernel_times': '._apply_tables',
    'print_listing': '._apply_tables',
    'ratio': '._apply_tables',
    'times_row': '._apply_tables',
    'Comparison': '._output_compare',
    'Difference': '._output_compare',
    'Field': '._output_compare',
    'PlainBaseline': '._output_compare',
    'compare_runs': '._output_compare',
    'fields': '._output_compare',
    'masked': '._output_compare',
    'terminal_lines': '._output_compare',
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
