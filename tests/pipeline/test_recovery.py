"""A stream that is killed mid-batch resumes with every message exactly once in its Parquet
output; a stream whose next messages expired fails, or skips them with failOnDataLoss=false."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from rmqpy.client.admin import Admin
from tests.integration.daemon import BrokerProcess
from tests.pipeline.live import send

pytestmark = pytest.mark.slow


def test_a_query_killed_mid_batch_resumes_exactly_once(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "SparkKilled"
    send(broker, topic, 400, queues=4)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    job = [sys.executable, "-m", "tests.pipeline.stream_job", broker.namesrv, topic]
    job += [str(out), str(checkpoint)]
    log_path = tmp_path / "job.log"
    with log_path.open("wb") as log:
        first = subprocess.Popen(job, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not (checkpoint / "commits" / "2").exists():  # a few batches are done
            assert first.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first run made no progress"
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        started = {p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()}
        done = {p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
        assert len(done) < 20
        again = subprocess.run(
            [*job, "--available-now"],
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=180,
            check=False,
        )
    assert again.returncode == 0, log_path.read_text()[-3000:]
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 400, f"batches started {sorted(started)}, committed {sorted(done)}"
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == 400
    assert sorted(int(r.body[1:]) for r in rows) == list(range(400))


@pytest.fixture
def expiring_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker whose full commitlog files (64 KiB) are deleted at once, as a disk past
    diskSpaceCleanForciblyRatio makes it do with cleanFileForciblyEnable."""
    flags = {
        "mappedFileSizeCommitLog": str(64 * 1024),
        "diskMaxUsedSpaceRatio": "1",
        "diskSpaceCleanForciblyRatio": "2",
        "cleanFileForciblyEnable": "true",
        "diskSpaceWarningLevelRatio": "99",
        "cleanResourceInterval": "200",
    }
    process = BrokerProcess(tmp_path / "store", extra=flags).start()
    yield process
    assert process.stop() == 0


def test_expired_data_fails_the_query_or_is_skipped(
    spark: SparkSession, expiring_broker: BrokerProcess, tmp_path: Path
) -> None:
    broker, topic = expiring_broker, "SparkExpiring"
    send(broker, topic, 10, queues=1)

    def run(checkpoint: Path, out: Path, fail_on_data_loss: str) -> None:
        query = (
            spark.readStream.format("rmqpy")
            .option("rmqpy.namesrv", broker.namesrv)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
            .select("queue_offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]

    for name in ("strict", "lenient"):
        run(tmp_path / name / "checkpoint", tmp_path / name / "out", "true")

    # Meanwhile 800 more messages (about 2.5 files' worth); the full files, holding offsets
    # 10 and on, expire.
    send(broker, topic, 800, queues=1, first=10)

    async def min_offset() -> int:
        async with Admin(broker.namesrv) as admin:
            [row] = await admin.consumer_offsets("nobody", topic)
            return row.min_offset

    deadline = time.monotonic() + 30
    while (low := asyncio.run(min_offset())) <= 10:
        assert time.monotonic() < deadline, "nothing expired"
        time.sleep(0.2)

    with pytest.raises(StreamingQueryException, match="are gone"):
        run(tmp_path / "strict" / "checkpoint", tmp_path / "strict" / "out", "true")

    run(tmp_path / "lenient" / "checkpoint", tmp_path / "lenient" / "out", "false")
    offsets = sorted(
        r.queue_offset for r in spark.read.parquet(str(tmp_path / "lenient" / "out")).collect()
    )
    assert offsets[:10] == list(range(10))
    assert offsets[10] >= low
    assert offsets[10:] == list(range(offsets[10], 810))
