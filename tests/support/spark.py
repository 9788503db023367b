"""Pytest plugin: one shared local SparkSession for the whole test session.

PySpark start-up takes 13-28 s on the 2-core CI machine, so every test that needs Spark
shares this session-scoped fixture. Register it with
``pytest_plugins = ["tests.support.spark"]`` in ``tests/conftest.py`` (or import the fixture
into a test module: ``from tests.support.spark import spark  # noqa: F401``).

Spark is a hard requirement: the fixture never skips; if Spark cannot start, the tests
that use it error out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from weir.datastream.connectors.spark_stager import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_MASTER = "local[2]"
SPARK_STARTUP_S: dict[str, float] = {}
"""Wall-clock seconds the shared session took to start (key ``"local[2]"``), for reports."""


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A shared local[2] SparkSession (loopback, quiet), stopped at the end of the session."""
    started = time.monotonic()
    session = spark_session(SPARK_MASTER, app_name="weir-tests")
    SPARK_STARTUP_S[SPARK_MASTER] = time.monotonic() - started
    try:
        yield session
    finally:
        session.stop()
