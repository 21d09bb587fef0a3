"""Fixtures of the recording-database tests."""

from __future__ import annotations

import pytest
from db_support import INFO, STATIC, kernel_record, simple_instance
from hostile_support import copy_golden, format_2_database
from mneme.replay.db import DatabaseWriter


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "rec.rdb"


@pytest.fixture
def small_db(db_path):
    with DatabaseWriter.create(db_path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, simple_instance(1))
    return db_path, dyn


@pytest.fixture
def golden(tmp_path):
    """A copy of tests/data/golden.rdb to damage."""
    return copy_golden(tmp_path)


@pytest.fixture
def fmt2(tmp_path):
    """A format-2 database to damage: (its path, the diff instance, the bytes instance)."""
    return format_2_database(tmp_path)
