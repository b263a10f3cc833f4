"""A streaming query in a process of its own, for tests that kill it: a topic into Parquet
(Spark's file sink, exactly-once through its own log), `maxOffsetsPerTrigger` 20.

    python -m tests.pipeline.stream_job NAMESRV TOPIC OUT CHECKPOINT [--available-now]
"""

from __future__ import annotations

import sys

from rmqpy import pipeline


def main(argv: list[str]) -> int:
    namesrv, topic, out, checkpoint = argv[:4]
    available_now = "--available-now" in argv
    spark = pipeline.local_spark("rmqpy stream job")
    writer = (
        spark.readStream.format("rmqpy")
        .option("rmqpy.namesrv", namesrv)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .load()
        .select("queue_id", "queue_offset", "body")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
    )
    trigger = {"availableNow": True} if available_now else {"processingTime": "0 seconds"}
    query = writer.trigger(**trigger).start()
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
