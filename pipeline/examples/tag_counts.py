"""Count a topic's messages per tag per minute, as a stream: the counts go to Parquet and,
as JSON messages, back to another topic.

    python -m rmqpy.pipeline.examples.tag_counts --namesrv 127.0.0.1:9876 --topic Orders \\
        --to TagCounts --out data/tag_counts [--follow]

Without `--follow` it reads what the topic holds now and stops (Spark's availableNow trigger);
with it, it keeps going every `--every` seconds until Ctrl-C. Progress lives in `--checkpoint`
(default: next to `--out`), so a second run carries on where the first stopped. Each
micro-batch writes the minutes it updated: a minute that gets more messages later appears
again with its new count (the row with the highest `batch_id` is the latest).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom
from pyspark.sql.streaming.query import StreamingQuery

from rmqpy import pipeline


def counts_per_tag_per_minute(spark: SparkSession, namesrv: str, topic: str) -> DataFrame:
    return (
        spark.readStream.format("rmqpy")
        .option("rmqpy.namesrv", namesrv)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .withWatermark("store_timestamp", "1 minute")
        .groupBy(
            F.window("store_timestamp", "1 minute").start.alias("minute"),
            F.coalesce("tags", F.lit("")).alias("tag"),
        )
        .count()
    )


def start(
    spark: SparkSession,
    namesrv: str,
    topic: str,
    to: str,
    out: str,
    checkpoint: str,
    follow_every_s: float | None = None,
) -> StreamingQuery:
    def each(batch: DataFrame, batch_id: int) -> None:
        rows = batch.withColumn("batch_id", F.lit(batch_id)).cache()
        rows.write.mode("append").parquet(out)
        (
            rows.select(
                F.to_json(F.struct("minute", "tag", "count")).alias("body"),
                F.col("tag").alias("tags"),
            )
            .write.format("rmqpy")
            .option("rmqpy.namesrv", namesrv)
            .option("topic", to)
            .mode("append")
            .save()
        )
        rows.unpersist()

    writer = (
        counts_per_tag_per_minute(spark, namesrv, topic)
        .writeStream.outputMode("update")
        .foreachBatch(each)
        .option("checkpointLocation", checkpoint)
    )
    if follow_every_s is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{follow_every_s} seconds")
    return writer.start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmqpy.pipeline.examples.tag_counts")
    parser.add_argument("--namesrv", default=os.environ.get("RMQPY_NAMESRV", "127.0.0.1:9876"))
    parser.add_argument("--topic", required=True, help="the topic to count")
    parser.add_argument("--to", default="TagCounts", help="topic for the counts (TagCounts)")
    parser.add_argument("--out", default="data/tag_counts", help="Parquet directory")
    parser.add_argument("--checkpoint", help="default: OUT.checkpoint")
    parser.add_argument("--follow", action="store_true", help="keep going until Ctrl-C")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between batches")
    args = parser.parse_args(argv)
    spark = pipeline.local_spark("rmqpy tag counts")
    query = start(
        spark,
        args.namesrv,
        args.topic,
        args.to,
        args.out,
        args.checkpoint or args.out.rstrip("/") + ".checkpoint",
        args.every if args.follow else None,
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.read.parquet(args.out).orderBy("minute", "tag", "batch_id").show(50, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
