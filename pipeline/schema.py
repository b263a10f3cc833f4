"""The rows every rmqpy source yields, defined once: Spark's DDL and Arrow's schema are both
written from `COLUMNS`. A schema given to a read selects some of them (`chosen_columns`)."""

from __future__ import annotations

from typing import Any

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
SPARK_TYPES = {name: spark for name, spark, _ in COLUMNS}


def chosen_columns(schema: Any) -> tuple[str, ...] | None:
    """The columns a reader yields for the schema Spark hands it: None for the source's own
    row; for a schema the user gave (`spark.read.schema("body binary, keys string")`), its
    columns in its order, so a query that needs a few columns carries only those to the JVM
    (Spark does not tell a Python source which columns a query reads). Each must be one of
    `COLUMNS`, with its type; anything else is refused, naming what is wrong."""
    names = tuple(field.name for field in schema.fields)
    if len(set(names)) != len(names):
        raise ValueError(f"a column is named twice in the schema given: {', '.join(names)}")
    for field in schema.fields:
        wanted = SPARK_TYPES.get(field.name)
        if wanted is None:
            raise ValueError(
                f"rmqpy sources have no column {field.name!r}; they have: {', '.join(NAMES)}"
            )
        given = field.dataType.simpleString()
        if given != wanted:
            raise ValueError(f"column {field.name!r} is {wanted} in rmqpy sources, not {given}")
    return None if names == NAMES else names


def select(batch: pa.RecordBatch, columns: tuple[str, ...] | None) -> pa.RecordBatch:
    """`batch` with only `columns`, in their order (None: all of them)."""
    return batch if columns is None else batch.select(list(columns))
