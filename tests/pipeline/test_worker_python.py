"""`pipeline.register` says at once which Python Spark's workers run when that one cannot
read rmqpy's formats (the first `load` failed with PYTHON_DATA_SOURCE_ERROR ... No module
named 'pyarrow' from inside Spark), with real interpreters."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from rmqpy.pipeline import worker_python_problem


def test_this_python_is_fine() -> None:
    assert worker_python_problem(sys.executable) is None


def test_the_system_python_is_named_with_the_fix() -> None:
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None or Path(system).resolve() == Path(sys.executable).resolve():
        pytest.skip("no system Python apart from this one")
    problem = worker_python_problem(system)
    assert problem is not None
    assert problem.startswith(f"Spark's Python workers run {system} (")
    assert "No module named" in problem and f"PYSPARK_PYTHON={sys.executable}" in problem


def test_a_python_that_is_not_there(tmp_path: Path) -> None:
    missing = str(tmp_path / "python9")
    problem = worker_python_problem(missing)
    assert problem is not None and "No such file or directory" in problem
