"""Shared by every test folder: this file puts tests/ on sys.path (pytest's rule for a
conftest.py outside packages), so each folder's support module can import
script_modules; and it shares the machine between pytest-xdist workers (parallel_runs)."""

from parallel_runs import (  # noqa: F401  (hooks, found here by pytest)
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_protocol,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
