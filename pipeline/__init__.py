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

from typing import Any


def register(spark: Any) -> None:
    """Register the `rmqpy` and `rmqpy-store` formats with this SparkSession."""
    from pipeline.broker_source import BrokerDataSource  # noqa: PLC0415 - pyspark is optional
    from pipeline.store_source import StoreDataSource  # noqa: PLC0415

    spark.dataSource.register(StoreDataSource)
    spark.dataSource.register(BrokerDataSource)
