"""One local[2] SparkSession for the whole run, its Python workers on this venv's Python."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from rmqpy import pipeline
from tests.integration.daemon import BrokerProcess


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session: SparkSession = pipeline.local_spark("rmqpy-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker process for the module's tests (each uses its own topics)."""
    process = BrokerProcess(tmp_path_factory.mktemp("spark-live") / "store").start()
    yield process
    assert process.stop() == 0
