"""Tuned kernels put back into the unmodified application: the plan the swapper reads
and its report (``_apply_plan``), why a
kernel ran in no swapped launch (``_apply_reasons``), its tables (``_apply_tables``),
the application's runs (``_app_process``), the in-app confirmation of a search's best
(``_app_confirm``) and the comparison of the application's outputs (``_output_compare``,
``_output_report``). The ``mneme run --apply`` command (``_apply_command``) is the CLI's.
"""

from typing import TYPE_CHECKING

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
    'Dim3': '._apply_plan',
    'KernelReport': '._apply_plan',
    'PLAN_HEADER': '._apply_plan',
    'SwapReport': '._apply_plan',
    'TunedKernel': '._apply_plan',
    'application_globals': '._apply_plan',
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
    'output_json': '._output_report',
    'print_output_check': '._output_report',
}

# The same names for type checkers and the API reference (tests/test_types.py checks
# that they are the table's), re-exported explicitly (`name as name`).
# isort: off
if TYPE_CHECKING:
    from ._app_confirm import (
        IN_APP_COLUMNS as IN_APP_COLUMNS, MIN_TAU_CANDIDATES as MIN_TAU_CANDIDATES,
        TIMEOUT_FACTOR as TIMEOUT_FACTOR, TIMEOUT_MIN_S as TIMEOUT_MIN_S, InAppRun as InAppRun,
        application_command as application_command, candidates_of as candidates_of,
        check_application as check_application, confirm_in_app as confirm_in_app,
        in_app_lines as in_app_lines, in_app_row as in_app_row, in_app_summary as in_app_summary,
        kendall_tau as kendall_tau, print_in_app as print_in_app, run_in_app as run_in_app,
        run_timeout as run_timeout,
    )
    from ._app_process import (
        SWAPPER as SWAPPER, ApplicationFailedError as ApplicationFailedError, Run as Run,
        resolve_command as resolve_command, run_once as run_once, swap_env as swap_env,
        swapper_library as swapper_library, timing_method_of as timing_method_of,
    )
    from ._output_report import output_json as output_json, print_output_check as print_output_check
    from ._apply_plan import (
        PLAN_HEADER as PLAN_HEADER, Dim3 as Dim3, KernelReport as KernelReport,
        SwapReport as SwapReport, TunedKernel as TunedKernel,
        application_globals as application_globals, configs_in as configs_in,
        grid_rule as grid_rule, load_tuned as load_tuned, read_report as read_report,
        write_plan as write_plan,
    )
    from ._apply_reasons import why_not_swapped as why_not_swapped
    from ._apply_tables import (
        LISTING_COLUMNS as LISTING_COLUMNS, TIMES_COLUMNS as TIMES_COLUMNS,
        listing_row as listing_row, milliseconds as milliseconds,
        print_kernel_times as print_kernel_times, print_listing as print_listing, ratio as ratio,
        times_row as times_row,
    )
    from ._output_compare import (
        Comparison as Comparison, Difference as Difference, Field as Field,
        PlainBaseline as PlainBaseline, compare_runs as compare_runs, fields as fields,
        masked as masked, terminal_lines as terminal_lines,
    )
# isort: on


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
