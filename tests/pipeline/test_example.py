"""The example pipeline of the README: counts per tag per minute to Parquet and back to a
topic, and a second run carries on from its checkpoint."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from rmqpy.pipeline.examples.tag_counts import start
from tests.integration.daemon import BrokerProcess
from tests.pipeline.live import reader, send


def test_counts_per_tag_per_minute_go_to_parquet_and_a_topic(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, to = "ExampleOrders", "ExampleTagCounts"
    send(broker, topic, 40, queues=2)  # tags T0 and T1, 20 each
    send(broker, to, 0, queues=1)
    out, checkpoint = str(tmp_path / "counts"), str(tmp_path / "checkpoint")

    def run() -> None:
        query = start(spark, broker.namesrv, topic, to, out, checkpoint)
        assert query.awaitTermination(120)
        assert query.exception() is None

    def latest() -> dict[str, int]:
        """Per tag, the sum over minutes of each minute's latest count (the sends may
        straddle a minute)."""
        per_minute = {}
        for r in spark.read.parquet(out).orderBy("batch_id").collect():
            per_minute[(r.minute, r.tag)] = r["count"]  # a later batch's count wins
        return totals(per_minute)

    run()
    assert latest() == {"T0": 20, "T1": 20}
    send(broker, topic, 10, queues=2, first=40)
    run()
    assert latest() == {"T0": 25, "T1": 25}

    messages = reader(spark, broker, to).collect()
    per_minute: dict[tuple[str, str], int] = {}
    for m in messages:
        c = json.loads(m.body)
        key = (c["minute"], c["tag"])
        per_minute[key] = max(per_minute.get(key, 0), c["count"])  # counts only grow
    assert totals(per_minute) == {"T0": 25, "T1": 25}
    assert {m.tags for m in messages} == {"T0", "T1"}


def totals(per_minute: Mapping[tuple[Any, str], int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_minute, tag), count in per_minute.items():
        out[tag] = out.get(tag, 0) + count
    return out
