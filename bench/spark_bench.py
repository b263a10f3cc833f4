"""`make bench-spark`: the Spark sources against Spark's own Parquet reader, same run, same data.

1. A store of `--messages` 1 KiB messages (8 queues, 256 MiB commitlog files) is written
   in-process. Spark then reads it through `rmqpy-store` and through Parquet (the same rows,
   written once by Spark), each scan summing body lengths so every body is read; the median of
   `--rounds` runs each, and the ratio (target ≥ 0.5×).
2. A broker is started on that store (pulls of up to 1024 messages) and a stream (`rmqpy`,
   availableNow, `pullBatchSize` 1024) copies every message into Parquet: rows/s end to end
   (target ≥ 200k rows/s on 2 cores). Then Spark alone copies the same rows from Parquet
   into Parquet, the same-run ceiling of Spark's Parquet writer for the stream's ratio.

    python -m bench.spark_bench [--messages 2000000] [--rounds 3] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.processes import free_port, wait_for_log, wait_for_port
from config.store_config import MessageStoreConfig
from store.message import Host, Message
from store.message_store import MessageStore

ROOT = Path(__file__).resolve().parent
TOPIC = "SparkBench"
QUEUES = 8
BODY = 1024


def build_store(root: Path, messages: int) -> None:
    config = MessageStoreConfig(
        store_path_root_dir=str(root), mapped_file_size_commitlog=256 * 1024 * 1024
    )
    born = Host(b"\x7f\x00\x00\x01", 40000)
    noise = os.urandom(1 << 20)

    def body(n: int) -> bytes:
        """Unique and incompressible, as real payloads are: identical bodies would let Parquet
        store one dictionary entry and skip the bytes, which is no comparison."""
        at = (n * 7919) % (len(noise) - BODY)
        return b"%012d" % n + noise[at : at + BODY - 12]

    with MessageStore(config) as store:
        done = 0
        while done < messages:
            group = [
                [Message(TOPIC, body(done + i), (done + i) % QUEUES, {"TAGS": f"T{(done + i) % 4}"},
                         born_host=born, born_timestamp=1_700_000_000_000 + done + i)]
                for i in range(min(512, messages - done))
            ]  # fmt: skip
            for result in store.put_messages(group):
                assert result.ok, result
            done += len(group)
        assert store.wait_dispatched(120)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    from pyspark.sql import functions as F  # noqa: N812, PLC0415 - the spark extra is optional

    import pipeline  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="rmqpy-spark-bench-"))
    store = work / "store"
    report: dict[str, Any] = {"messages": args.messages, "body_bytes": BODY}
    try:
        seconds, _ = timed(lambda: build_store(store, args.messages))
        print(f"store of {args.messages} messages written in {seconds:.1f} s", file=sys.stderr)
        spark = pipeline.local_spark("rmqpy spark bench", config={"spark.driver.memory": "4g"})
        parquet = work / "parquet"
        source = spark.read.format("rmqpy-store").load(str(store))
        source.write.parquet(str(parquet))

        def scan(df: Any) -> Callable[[], Any]:
            return lambda: df.agg(F.count("*"), F.sum(F.length("body"))).collect()[0]

        rates: dict[str, list[float]] = {"rmqpy-store": [], "parquet": []}
        for n in range(args.rounds):
            for name, df in (
                ("rmqpy-store", source),
                ("parquet", spark.read.parquet(str(parquet))),
            ):
                seconds, row = timed(scan(df))
                assert row[0] == args.messages, row
                rates[name].append(args.messages / seconds)
                print(f"round {n + 1} · {name}: {args.messages / seconds:,.0f} rows/s",
                      file=sys.stderr)  # fmt: skip
        ratios = [a / b for a, b in zip(rates["rmqpy-store"], rates["parquet"], strict=True)]
        report["store_vs_parquet"] = {
            "rows_per_s": {k: statistics.median(v) for k, v in rates.items()},
            "ratio": statistics.median(ratios),
            "per_round": [round(r, 3) for r in ratios],
            "goal": 0.5,
        }

        port, ns = free_port(), free_port()
        args_broker = [
            sys.executable, "-m", "broker", "--storePathRootDir", str(store),
            "--listenPort", str(port), "--namesrvListenPort", str(ns), "--fastListenPort", "0",
            "--brokerIP1", "127.0.0.1", "--metricsPort", "0",
            "--mappedFileSizeCommitLog", str(256 * 1024 * 1024),
            # Pulls of up to 1024 messages / 4 MiB (RocketMQ's defaults are 32 / 256 KiB).
            "--maxTransferCountOnMessageInMemory", "1024",
            "--maxTransferBytesOnMessageInMemory", str(4 * 1024 * 1024),
        ]  # fmt: skip
        with (work / "broker.log").open("wb") as log:
            broker = subprocess.Popen(args_broker, stdout=log, stderr=log)
        try:
            wait_for_port(ns, broker, timeout_s=120)
            wait_for_log(work / "broker.log", broker, timeout_s=120)
            query = (
                spark.readStream.format("rmqpy")
                .option("rmqpy.namesrv", f"127.0.0.1:{ns}")
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .option("pullBatchSize", "1024")
                .load()
                .writeStream.format("parquet")
                .option("path", str(work / "stream-out"))
                .option("checkpointLocation", str(work / "stream-checkpoint"))
                .trigger(availableNow=True)
            )
            seconds, _ = timed(lambda: query.start().awaitTermination())
            copied = spark.read.parquet(str(work / "stream-out")).count()
            assert copied == args.messages, copied
            streamed = args.messages / seconds
            print(f"stream → Parquet: {streamed:,.0f} rows/s", file=sys.stderr)
            # The peer: Spark alone writing the same rows from Parquet into Parquet, the most
            # a stream into Parquet could reach through Spark's writer on this machine today.
            seconds, _ = timed(
                lambda: spark.read.parquet(str(parquet)).write.parquet(str(work / "copy"))
            )
            copy = args.messages / seconds
            print(f"Parquet → Parquet (Spark alone): {copy:,.0f} rows/s", file=sys.stderr)
            report["stream_to_parquet"] = {
                "rows_per_s": streamed,
                "goal": 200_000,
                "parquet_copy_rows_per_s": copy,
                "ratio_to_parquet_copy": streamed / copy,
            }
        finally:
            broker.terminate()
            broker.wait(60)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spark.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
