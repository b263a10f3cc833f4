"""The rows every rmqpy source yields, defined once: Spark's DDL and Arrow's schema are both
written from `COLUMNS`."""

from __future__ import annotations

import pyarrow as pa

# (name, Spark SQL type, Arrow type)
COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "bigint", pa.int64()),
    ("commitlog_offset", "bigint", pa.int64()),
    ("body", "binary", pa.binary()),
    ("keys", "string", pa.string()),
    ("tags", "string", pa.string()),
    ("properties", "map<string,string>", pa.map_(pa.string(), pa.string())),
    ("born_timestamp", "timestamp", pa.timestamp("us", tz="UTC")),
    ("store_timestamp", "timestamp", pa.timestamp("us", tz="UTC")),
    ("born_host", "string", pa.string()),
    ("store_host", "string", pa.string()),
    ("sys_flag", "int", pa.int32()),
    ("reconsume_times", "int", pa.int32()),
    ("msg_id", "string", pa.string()),  # the producer's id (UNIQ_KEY), else offset_msg_id
    ("offset_msg_id", "string", pa.string()),  # store host + commitlog offset
)

DDL = ", ".join(f"{name} {spark}" for name, spark, _ in COLUMNS)
ARROW_SCHEMA = pa.schema([pa.field(name, arrow) for name, _, arrow in COLUMNS])
NAMES = tuple(name for name, _, _ in COLUMNS)
