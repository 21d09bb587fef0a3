import pytest
from mneme.replay.db import Database
from mneme.runtime import Device, driver_available
from replay_support import GOLDEN, write_database


@pytest.fixture(scope="session")
def replay_db(tmp_path_factory) -> Database:
    """A database with one hand-made instance of each tests/replay kernel."""
    work = tmp_path_factory.mktemp("replay-db")
    return Database.open(write_database(work / "test.rdb", work))


@pytest.fixture(scope="session")
def golden_db() -> Database:
    return Database.open(GOLDEN)


@pytest.fixture(scope="module")
def device() -> Device:
    if not driver_available():
        pytest.skip("no usable CUDA driver (libcuda.so.1 missing or cuInit failed)")
    return Device(0)
