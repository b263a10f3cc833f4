"""rmqpy for Apache Spark, through PySpark's Python Data Source API (no jars, no JVM code).

    import pipeline
    pipeline.register(spark)
    spark.read.format("rmqpy-store").load("data/store")     # a store directory, offline

Needs the `spark` extra (`pip install '.[spark]'`). Spark's Python workers must run a Python
that has rmqpy installed: set PYSPARK_PYTHON to it (the tests use the venv's).
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the `rmqpy-store` format with this SparkSession."""
    from pipeline.store_source import StoreDataSource  # noqa: PLC0415 - pyspark is optional

    spark.dataSource.register(StoreDataSource)
