"""Shared by every test folder: this file puts tests/ on sys.path (pytest's rule for a
conftest.py outside packages), so each folder's support module can import
script_modules; and it shares the machine between pytest-xdist workers (parallel_runs)."""

import os

from parallel_runs import (  # noqa: F401  (hooks, found here by pytest)
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_protocol,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)

# A command server a developer left running serves only the tests that start their own
# (tests/tune/test_command_server.py): every other command runs in its own process.
os.environ["MNEME_SERVER"] = "0"
