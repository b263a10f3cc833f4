"""`make bench-spark`: the Spark sources against Spark's own Parquet reader, same run, same data.

1. A store of `--messages` 1 KiB messages (8 queues, 256 MiB commitlog files) is written
   in-process. Spark then reads it through `rmqpy-store` and through Parquet (the same rows,
   written once by Spark), each scan summing body lengths so every body is read; the median of
   `--rounds` runs each, and the ratio (target ≥ 0.5×). The query reads only `body`: Parquet
   prunes the other columns itself, and `rmqpy-store` is given the schema `body binary` (a
   Python source learns the columns a query needs only from the schema given to the read).
   The scan of whole rows is shown beside it, without a goal.
2. A broker is started on that store (pulls of up to 1024 messages) and a stream (`rmqpy`,
   availableNow, `pullBatchSize` 1024) copies every message into Parquet: rows/s end to end.
   Its peer, in the same rounds: Spark alone copying the same rows from Parquet into Parquet,
   the ceiling of Spark's Parquet writer on this machine; the ratio (target ≥ 0.8×). Each
   starts with the page cache's writes done (`sync`), and a round's outputs are removed
   before the next.

Writes `spark.json` and `spark.md` (the targets with each round's ratio).

    python -m rmqpy.bench.spark_bench [--messages 2000000] [--rounds 3] [--out bench/results]
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
from functools import partial
from pathlib import Path
from typing import Any

import uvloop

from rmqpy.bench.processes import free_port, wait_for_log, wait_for_port
from rmqpy.client.admin import Admin
from rmqpy.config.store_config import MessageStoreConfig
from rmqpy.store.message import Host, Message
from rmqpy.store.message_store import MessageStore

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
    parser = argparse.ArgumentParser(prog="python -m rmqpy.bench.spark_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    from pyspark.sql import functions as F  # noqa: N812, PLC0415 - the spark extra is optional

    import pipeline  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="rmqpy-spark-bench-"))
    store = work / "store"
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "messages": args.messages,
        "body_bytes": BODY,
        "rounds": args.rounds,
    }
    try:
        seconds, _ = timed(lambda: build_store(store, args.messages))
        print(f"store of {args.messages} messages written in {seconds:.1f} s", file=sys.stderr)
        spark = pipeline.local_spark("rmqpy spark bench", config={"spark.driver.memory": "4g"})
        parquet = work / "parquet"
        source = spark.read.format("rmqpy-store").load(str(store))
        source.write.parquet(str(parquet))

        def scan(df: Any) -> Callable[[], Any]:
            return lambda: df.agg(F.count("*"), F.sum(F.length("body"))).collect()[0]

        # The query reads `body` alone: Parquet prunes the other columns itself; a Python
        # source is told which columns to yield by the schema given to the read.
        chosen = spark.read.format("rmqpy-store").schema("body binary").load(str(store))
        rates: dict[str, list[float]] = {"rmqpy-store": [], "rmqpy-store, whole rows": [],
                                         "parquet": []}  # fmt: skip
        for n in range(args.rounds):
            for name, df in (
                ("rmqpy-store", chosen),
                ("rmqpy-store, whole rows", source),
                ("parquet", spark.read.parquet(str(parquet))),
            ):
                seconds, row = timed(scan(df))
                assert row[0] == args.messages, row
                rates[name].append(args.messages / seconds)
                print(f"round {n + 1} · {name}: {args.messages / seconds:,.0f} rows/s",
                      file=sys.stderr)  # fmt: skip
        for key, ours, goal in (
            ("store_vs_parquet", "rmqpy-store", 0.5),
            ("whole_rows_vs_parquet", "rmqpy-store, whole rows", None),
        ):
            ratios = [a / b for a, b in zip(rates[ours], rates["parquet"], strict=True)]
            report[key] = {
                "rows_per_s": {k: statistics.median(rates[k]) for k in (ours, "parquet")},
                "ratio": statistics.median(ratios),
                "per_round": [round(r, 3) for r in ratios],
                "goal": goal,
            }  # fmt: skip

        port, ns = free_port(), free_port()
        args_broker = [
            sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(store),
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
            # The store was written without a broker: its topic is made known to it, as an
            # operator would after moving a store (a route query creates nothing).
            uvloop.run(create_topic(f"127.0.0.1:{ns}"))
            streamed: list[float] = []
            copied: list[float] = []
            for n in range(args.rounds):
                stream_out, copy_out = work / f"stream-{n}", work / f"copy-{n}"
                # Each starts with nothing left to write back, so that neither pays for the
                # other's writes (the second of a pair ran while the first's output was
                # still going to disk), and a round's outputs are removed before the next.
                # The order stays as it always was (taking turns going first did not make
                # the rounds any less spread: a copy ran 193-194k rows/s in either order).
                os.sync()
                seconds = stream_into_parquet(spark, ns, stream_out, args.messages)
                streamed.append(args.messages / seconds)
                os.sync()
                # The peer: Spark alone writing the same rows from Parquet into Parquet, the
                # most a stream into Parquet could reach through Spark's writer here.
                seconds, _ = timed(partial(copy_parquet, spark, parquet, copy_out))
                copied.append(args.messages / seconds)
                shutil.rmtree(stream_out, ignore_errors=True)
                shutil.rmtree(copy_out, ignore_errors=True)
                print(f"round {n + 1} · stream → Parquet {streamed[-1]:,.0f} rows/s, "
                      f"Parquet → Parquet (Spark alone) {copied[-1]:,.0f} rows/s",
                      file=sys.stderr)  # fmt: skip
            ratios = [a / b for a, b in zip(streamed, copied, strict=True)]
            report["stream_to_parquet"] = {
                "rows_per_s": {
                    "rmqpy stream": statistics.median(streamed),
                    "parquet copy": statistics.median(copied),
                },
                "ratio": statistics.median(ratios),
                "per_round": [round(r, 3) for r in ratios],
                "goal": 0.8,
            }
        finally:
            broker.terminate()
            broker.wait(60)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spark.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / "spark.md").write_text(text)
    print(text)
    return 0


async def create_topic(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, QUEUES)


def copy_parquet(spark: Any, source: Path, out: Path) -> None:
    spark.read.parquet(str(source)).write.parquet(str(out))


def stream_into_parquet(spark: Any, namesrv_port: int, out: Path, messages: int) -> float:
    """Seconds an availableNow `rmqpy` stream takes to copy the topic into Parquet at `out`."""
    query = (
        spark.readStream.format("rmqpy")
        .option("rmqpy.namesrv", f"127.0.0.1:{namesrv_port}")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("pullBatchSize", "1024")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
    )
    seconds, _ = timed(lambda: query.start().awaitTermination())
    copied = spark.read.parquet(str(out / "data")).count()
    assert copied == messages, copied
    return seconds


TARGETS = {
    "store_vs_parquet": "store scan (`rmqpy-store`, the query's column) vs Spark's Parquet scan "
    "of the same rows",
    "whole_rows_vs_parquet": "store scan of whole rows (every column to the JVM) vs the same "
    "Parquet scan (no goal)",
    "stream_to_parquet": "stream from a live broker into Parquet vs Spark's Parquet → Parquet copy",
}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# rmqpy Spark sources vs Spark's Parquet — {report['when']}",
        "",
        f"`make bench-spark` · {report['messages']:,} messages of {report['body_bytes']} B · "
        f"{report['rounds']} interleaved rounds; ratios of the same round, then their median",
        "",
        "| target | goal | ratio | rounds | met | rows/s (median) |",
        "| --- | ---: | ---: | --- | :---: | --- |",
    ]
    for key, what in TARGETS.items():
        t = report.get(key)
        if t is None:
            continue
        rounds = ", ".join(f"{r:.2f}" for r in t["per_round"])
        goal = t["goal"]
        met = "–" if goal is None else "yes" if t["ratio"] >= goal else "no"
        rates = ", ".join(f"{name} {rate:,.0f}" for name, rate in t["rows_per_s"].items())
        shown = "–" if goal is None else f"≥ {goal}×"
        lines.append(f"| {what} | {shown} | {t['ratio']:.2f}× | {rounds} | {met} | {rates} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
