"""rmqpy for Apache Spark, through PySpark's Python Data Source API (no jars, no JVM code).

    import pipeline
    pipeline.register(spark)
    spark.read.format("rmqpy-store").load("data/store")     # a store directory, offline
    spark.readStream.format("rmqpy").option("rmqpy.namesrv", "127.0.0.1:9876")
        .option("subscribe", "Orders").load()                # a live broker

Needs the `spark` extra (`pip install '.[spark]'`). Spark's Python workers must run a Python
that has rmqpy installed: set PYSPARK_PYTHON to it (the tests use the venv's).
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}


def register(spark: Any) -> None:
    """Register the `rmqpy` and `rmqpy-store` formats with this SparkSession."""
    from pipeline.broker_source import BrokerDataSource  # noqa: PLC0415 - pyspark is optional
    from pipeline.store_source import StoreDataSource  # noqa: PLC0415

    spark.dataSource.register(StoreDataSource)
    spark.dataSource.register(BrokerDataSource)


def local_spark(app_name: str, cores: int = 2, config: dict[str, str] | None = None) -> Any:
    """A local SparkSession (no UI, quiet logs, UTC) with the rmqpy formats registered and its
    Python workers on this Python, unless PYSPARK_PYTHON already names one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is optional

    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in {**LOCAL_DEFAULTS, **(config or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
