"""rmqpy for Apache Spark, through PySpark's Python Data Source API (no jars, no JVM code).

    from rmqpy import pipeline
    pipeline.register(spark)
    spark.read.format("rmqpy-store").load("data/store")     # a store directory, offline
    spark.readStream.format("rmqpy").option("rmqpy.namesrv", "127.0.0.1:9876")
        .option("subscribe", "Orders").load()                # a live broker

Needs the `spark` extra (`pip install '.[spark]'`). Spark's Python workers must run a Python
that has rmqpy installed: set PYSPARK_PYTHON to it (the tests use the venv's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from rmqpy.pipeline.spark_home import default_cache, home_without_zip

LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}


class WorkerPythonError(RuntimeError):
    """Spark's Python workers would run a Python that cannot read rmqpy's formats."""


def register(spark: Any) -> None:
    """Register the `rmqpy` and `rmqpy-store` formats with this SparkSession. Spark runs the
    sources in Python workers of their own: when those run a Python that lacks rmqpy or
    pyarrow, say so now, in one line, instead of at the first `load`."""
    problem = worker_python_problem(spark.sparkContext.pythonExec)
    if problem is not None:
        raise WorkerPythonError(problem)
    from rmqpy.pipeline.broker_source import BrokerDataSource  # noqa: PLC0415 - pyspark is optional
    from rmqpy.pipeline.store_source import StoreDataSource  # noqa: PLC0415

    spark.dataSource.register(StoreDataSource)
    spark.dataSource.register(BrokerDataSource)


WORKER_IMPORTS = "rmqpy.pipeline.store_source, rmqpy.pipeline.broker_source"


def worker_python_problem(python: str) -> str | None:
    """Why Spark's Python workers, running `python`, could not use rmqpy's formats (None:
    they can). This Python is taken as able; another is asked to import what they need."""
    found = shutil.which(python) or python
    if os.path.realpath(found) == os.path.realpath(sys.executable):
        return None
    try:
        proc = subprocess.run(
            [found, "-c", f"import pyarrow, {WORKER_IMPORTS}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        if proc.returncode == 0:
            return None
        lines = proc.stderr.strip().splitlines()
        reason = lines[-1] if lines else f"exit {proc.returncode}"
    return (
        f"Spark's Python workers run {python} ({reason}): set PYSPARK_PYTHON={sys.executable} "
        "before the SparkSession is built (or spark.pyspark.python)"
    )


def prefer_installed_pyspark() -> None:
    """Unless SPARK_HOME is set, point it at a home mirroring a pip-installed PySpark's without
    its bundled zip, so that the Python processes Spark starts import the installed PySpark
    instead of compiling the zip's copy each time (`spark_home`). Call it before the first
    SparkSession is built: Spark reads SPARK_HOME as it starts."""
    if "SPARK_HOME" in os.environ:
        return
    import pyspark  # noqa: PLC0415 - pyspark is optional

    home = home_without_zip(Path(pyspark.__file__).parent, default_cache())
    if home is not None:
        os.environ["SPARK_HOME"] = str(home)


def local_spark(app_name: str, cores: int = 2, config: dict[str, str] | None = None) -> Any:
    """A local SparkSession (no UI, quiet logs, UTC) with the rmqpy formats registered and its
    Python workers on this Python, unless PYSPARK_PYTHON already names one; its Python
    processes import the installed PySpark (`prefer_installed_pyspark`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    prefer_installed_pyspark()
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is optional

    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in {**LOCAL_DEFAULTS, **(config or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
