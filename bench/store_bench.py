"""`make bench-store`: store throughput in one process, next to peers measured in the same run.

Cases (1 KiB bodies, one key and one tag each):

* raw sequential write: pwrite 1 MiB chunks + one fdatasync, and O_DIRECT writes of 1 MiB,
  the disk's ceiling: append + dispatch of batches of 32 is set against the O_DIRECT
  bandwidth (target 0.5);
* new page-cache pages, a physical peer run before each run of batches with dispatch:
  preallocated files brought into the page cache as the store's warming thread does it, the
  rate at which one core gets fresh pages for appended bytes (in a VM whose host backs fresh
  memory lazily, far below the disk's bandwidth);
* append only: CommitLog puts, no dispatch - one message per call and 32 per call;
* append + dispatch: MessageStore puts, timed until consume queue and index are written:
  32 single-message sends per call, and batches of 32 (what SEND_BATCH_MESSAGE stores);
* SYNC_FLUSH, 8 producer threads: msgs/s and fsyncs/s, against a raw pwrite + fdatasync
  loop writing the same bytes in groups of the size group commit achieved;
* reads: 32-message get_message batches over hot data;
* bare append loops, CPU peers: RocketMQ-shaped records packed by a plain loop into a warm
  mapping, and into a new (preallocated, unwarmed) file's mapping. They run right before
  each run of the batches with dispatch and of the reads, with the median of the run-by-run
  ratios: these VMs' CPU speed differs twofold and more between hours, and the ratios tell
  a change in the code from a change in the machine.

fsync latency on shared machines drifts within minutes, so only same-run ratios mean anything.
CPU speed on these virtual machines wanders too (one case measured twice in a row can differ
by 40%), so every throughput case runs `--repeat` times and the table shows the median and
the range.
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zlib_ng.zlib_ng import crc32

from rmqpy.bench.compare import direct_write_bandwidth, page_cache_bandwidth
from rmqpy.config.store_config import FlushDiskType, MessageStoreConfig
from rmqpy.store.commitlog import CommitLog
from rmqpy.store.layout import CRC_MASK, MESSAGE_MAGIC_V1, PROPS_LEN, RECORD_FIXED, TOPIC_LEN_V1
from rmqpy.store.message import Message
from rmqpy.store.message_store import MessageStore

BODY = b"x" * 1024
BARE_PROPS = b"KEYS\x01key-0\x02TAGS\x01TagA\x02UNIQ_KEY\x01" + b"0" * 32 + b"\x02"
BARE_TAIL = TOPIC_LEN_V1.pack(10) + b"BenchTopic" + PROPS_LEN.pack(len(BARE_PROPS)) + BARE_PROPS
MiB = 1024 * 1024
WARM_PEER = "bare append loop, warm mapping"
FILE_PEER = "bare append loop, new file"
PAGE_PEER = "new page-cache pages, one core"
READS_TARGET = 1_000_000


def make_messages(n: int, topic: str = "BenchTopic", queues: int = 4) -> list[Message]:
    """The input, built before timing starts; frozen out of the garbage collector's sight,
    since a broker never holds a backlog of hundreds of thousands of messages in memory."""
    msgs = [
        Message(
            topic,
            BODY,
            i % queues,
            {"KEYS": f"key-{i}", "TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"},
        )
        for i in range(n)
    ]
    gc.freeze()
    return msgs


def config_for(root: Path, **changes: Any) -> MessageStoreConfig:
    base: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commitlog": 256 * MiB,
        "max_hash_slot_num": 500_000,
        "max_index_num": 2_000_000,
    }
    base.update(changes)
    return MessageStoreConfig(**base)


def fresh_dir(root: Path) -> Path:
    """An empty directory for one run. Earlier runs' files are deleted first (which drops
    their dirty pages) and the rest is synced, so no run pays for its predecessors'
    writeback."""
    for old in root.glob("run-*"):
        shutil.rmtree(old, ignore_errors=True)
    os.sync()
    return Path(tempfile.mkdtemp(prefix="run-", dir=root))


def raw_write_bandwidth(root: Path, total: int = 512 * MiB) -> float:
    """MB/s of sequential 1 MiB pwrites plus one fdatasync (the disk's ceiling here)."""
    path = root / "raw-write"
    chunk = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for off in range(0, total, MiB):
            os.pwrite(fd, chunk, off)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return total / elapsed / 1e6


def raw_group_fsync(root: Path, group_bytes: int, seconds: float) -> tuple[float, float]:
    """(groups/s, MB/s) of a pwrite + fdatasync loop writing `group_bytes` per fsync."""
    path = root / "raw-fsync"
    data = os.urandom(max(group_bytes, 1))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, 256 * MiB)
    groups = 0
    off = 0
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.pwrite(fd, data, off)
            os.fdatasync(fd)
            off = (off + len(data)) % (200 * MiB)
            groups += 1
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return groups / elapsed, groups * len(data) / elapsed / 1e6


def bare_mmap_append(n: int) -> float:
    """msgs/s of a CPU peer, a plain Python loop's floor for the same work:
    v1 records (fixed part packed, body CRC, body, topic, properties) appended one at a time
    by a plain loop, no checks, queues or index, into a mapping faulted in beforehand and
    written round (fresh file pages would add page faults, which vary far more than the CPU
    between runs)."""
    size = bare_record_size()
    ring = (16 * MiB // size) * size
    mm = mmap.mmap(-1, ring)
    mm[:] = bytes(ring)  # fault every page in
    try:
        return bare_append_loop(mm, n, ring)
    finally:
        mm.close()


def bare_file_append(root: Path, n: int) -> float:
    """The same loop into a new file's mapping, the other reading of the target's "bare mmap
    append": preallocated as commitlog files are, but not warmed, so its first write to each
    page faults that page in (the store warms its files on a background thread)."""
    size = n * bare_record_size()
    path = fresh_dir(root) / "bare-file"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        mm = mmap.mmap(fd, size)
        try:
            return bare_append_loop(mm, n, size)
        finally:
            mm.close()
    finally:
        os.close(fd)
        path.unlink()


def bare_record_size() -> int:
    return RECORD_FIXED[(False, False)].size + len(BODY) + len(BARE_TAIL)


def bare_append_loop(mm: mmap.mmap, n: int, ring: int) -> float:
    """msgs/s of appending `n` records to `mm`, wrapping round at `ring` bytes."""
    head = RECORD_FIXED[(False, False)]
    size = bare_record_size()
    ip, port = b"\x7f\x00\x00\x01", 10911
    start = time.perf_counter()
    pos = 0
    for i in range(n):
        head.pack_into(mm, pos, size, MESSAGE_MAGIC_V1, crc32(BODY) & CRC_MASK, i & 3, 0,
                       i >> 2, pos, 0, 0, ip, port, 0, ip, port, 0, 0, len(BODY))  # fmt: skip
        body_at = pos + head.size
        mm[body_at : body_at + len(BODY)] = BODY
        mm[body_at + len(BODY) : pos + size] = BARE_TAIL
        pos = (pos + size) % ring
    return n / (time.perf_counter() - start)


def new_page_cache_rate(root: Path, record_bytes: int, seconds: float) -> float:
    """Records/s worth of new page-cache pages one core makes in `seconds`
    (`page_cache_bandwidth`), then a pause half as long again: the kernel reports the
    probe's freed pages to the VM's host after about 2 s, and a case run before that would
    be handed them at no cost."""
    rate = float(page_cache_bandwidth(root, seconds, record=record_bytes)["msgs_per_s"])
    time.sleep(1.5 * seconds)
    return rate


def put_all(
    put_groups: Callable[[list[list[Message]]], object],
    msgs: list[Message],
    per_call: int,
    batch: bool = False,
) -> None:
    """Put every message, `per_call` of them per call: each its own group, or one batch."""
    for i in range(0, len(msgs), per_call):
        chunk = msgs[i : i + per_call]
        put_groups([chunk] if batch else [[m] for m in chunk])


def bench_append_only(root: Path, n: int, per_call: int) -> float:
    commitlog = CommitLog(config_for(fresh_dir(root)))
    msgs = make_messages(n)
    start = time.perf_counter()
    put_all(commitlog.put_groups, msgs, per_call)
    elapsed = time.perf_counter() - start
    commitlog.shutdown()
    return n / elapsed


def bench_append_dispatch(root: Path, n: int, per_call: int, batch: bool = False) -> float:
    store = MessageStore(config_for(fresh_dir(root)))
    store.start()
    msgs = make_messages(n, queues=1 if batch else 4)
    start = time.perf_counter()
    put_all(store.put_messages, msgs, per_call, batch)
    assert store.wait_dispatched(timeout=600)
    elapsed = time.perf_counter() - start
    store.shutdown()
    return n / elapsed


def bench_sync_flush(root: Path, threads: int, seconds: float) -> dict[str, float]:
    store = MessageStore(config_for(fresh_dir(root), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.start()
    assert store.group_commit is not None
    counts = [0] * threads
    stop = threading.Event()
    msgs = make_messages(2000)

    def producer(t: int) -> None:
        i = t
        while not stop.is_set():
            if store.put_message(msgs[i % len(msgs)]).ok:
                counts[t] += 1
            i += threads

    workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
    fsyncs_before = store.group_commit.fsyncs
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    fsyncs = store.group_commit.fsyncs - fsyncs_before
    msg_bytes = msgs[0].encoded_length(False)
    store.shutdown()
    total = sum(counts)
    return {
        "msgs_per_s": total / elapsed,
        "fsyncs_per_s": fsyncs / elapsed,
        "msgs_per_fsync": total / max(fsyncs, 1),
        "group_bytes": total * msg_bytes / max(fsyncs, 1),
    }


def bench_reads(root: Path, n: int) -> float:
    store = MessageStore(config_for(fresh_dir(root)))
    store.start()
    msgs = make_messages(n, queues=1)
    put_all(store.put_messages, msgs, 64)
    assert store.wait_dispatched(timeout=600)
    got_total = got_bytes = 0
    start = time.perf_counter()
    offset = 0
    while offset < n:
        got = store.get_message("BenchTopic", 0, offset, 32)
        got_total += got.count
        got_bytes += len(got.body)  # the records, back to back, as a pull answers with them
        offset = got.next_begin_offset
    elapsed = time.perf_counter() - start
    store.shutdown()
    assert got_total == n and got_bytes == sum(m.encoded_length(False) for m in msgs)
    return n / elapsed


def timed(label: str, fn: Callable[[], Any]) -> Any:
    print(f"  running: {label} ...", flush=True)
    return fn()


def repeated(label: str, times: int, fn: Callable[[], float]) -> tuple[float, float, float]:
    """(median, lowest, highest) msgs/s over `times` runs."""
    print(f"  running: {label} x{times} ...", flush=True)
    return spread([fn() for _ in range(times)])


def spread(rates: list[float]) -> tuple[float, float, float]:
    return statistics.median(rates), min(rates), max(rates)


def beside_peers(
    label: str,
    times: int,
    fn: Callable[[], float],
    peers: dict[str, Callable[[], float]],
    seen: dict[str, list[float]],
) -> tuple[tuple[float, float, float], dict[str, float]]:
    """`repeated`, each run right after a run of each peer (kept in `seen`), and for each
    peer the median of the run-by-run ratios to it: CPU speed here drifts within minutes, so
    a case is set against peers measured next to it, not against one taken at another time."""
    print(f"  running: {label} x{times}, each beside {', '.join(peers)} ...", flush=True)
    rates: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(times):
        before = {name: peer() for name, peer in peers.items()}
        rates.append(fn())
        for name, rate in before.items():
            seen.setdefault(name, []).append(rate)
            ratios[name].append(rates[-1] / rate)
    return spread(rates), {name: statistics.median(r) for name, r in ratios.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmqpy.bench.store_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--sync-seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per throughput case")
    parser.add_argument(
        "--page-seconds", type=float, default=2.0, help="each run of the page-cache peer"
    )
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir here)")
    parser.add_argument("--json", default="bench/results/store-latest.json")
    parser.add_argument("--raw-mib", type=int, default=512, help="written by the raw write case")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rmqpy-bench-", dir=args.dir or "."))
    n = args.messages
    record_bytes = make_messages(1)[0].encoded_length(False)
    reps = args.repeat
    try:
        raw_mb = timed(
            "raw sequential write", lambda: raw_write_bandwidth(root, args.raw_mib * MiB)
        )
        direct = timed("O_DIRECT sequential write", lambda: direct_write_bandwidth(root, 2.0))
        # Where O_DIRECT is refused (tmpfs), the page-cache write stands in for it.
        direct_mb = float(direct.get("mb_per_s") or raw_mb)
        peers: dict[str, list[float]] = {}
        warm = {WARM_PEER: lambda: bare_mmap_append(n // 2)}
        both = warm | {
            FILE_PEER: lambda: bare_file_append(root, n // 2),
            PAGE_PEER: lambda: new_page_cache_rate(root, record_bytes, args.page_seconds),
        }

        append1 = repeated("append only, 1/call", reps, lambda: bench_append_only(root, n, 1))
        append32 = repeated("append only, 32/call", reps, lambda: bench_append_only(root, n, 32))
        disp1 = repeated(
            "append + dispatch, 1/call", reps, lambda: bench_append_dispatch(root, n, 1)
        )
        disp32 = repeated(
            "append + dispatch, 32/call", reps, lambda: bench_append_dispatch(root, n, 32)
        )
        batch32, batch32_peers = beside_peers(
            "append + dispatch, batches of 32",
            reps,
            lambda: bench_append_dispatch(root, n, 32, batch=True),
            both,
            peers,
        )
        sync = timed("SYNC_FLUSH, 8 threads", lambda: bench_sync_flush(root, 8, args.sync_seconds))
        raw_groups, _ = timed(
            "raw pwrite+fdatasync, same group size",
            lambda: raw_group_fsync(root, int(sync["group_bytes"]), args.sync_seconds),
        )
        raw_sync_msgs = raw_groups * sync["msgs_per_fsync"]
        reads, reads_peers = beside_peers(
            "reads, 32/pull", reps, lambda: bench_reads(root, n), warm, peers
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def mb(rate: float) -> float:
        return rate * record_bytes / 1e6

    sync_rate = sync["msgs_per_s"]
    direct_of = "of O_DIRECT write MB/s"
    rows = [
        ("append only, 1 msg/call", append1, mb(append1[0]) / direct_mb, direct_of),
        ("append only, 32 msgs/call", append32, mb(append32[0]) / direct_mb, direct_of),
        ("append + dispatch, 1 msg/call", disp1, mb(disp1[0]) / direct_mb, direct_of),
        ("append + dispatch, 32 msgs/call", disp32, mb(disp32[0]) / direct_mb, direct_of),
        (
            "append + dispatch, batches of 32",
            batch32,
            mb(batch32[0]) / direct_mb,
            f"{direct_of} (target 0.5)",
        ),
        (
            "batches of 32 / new page-cache pages",
            batch32,
            batch32_peers[PAGE_PEER],
            "of the new page-cache pages one core makes beside it",
        ),
        (
            "batches of 32 / bare append, warm",
            batch32,
            batch32_peers[WARM_PEER],
            "of the warm loop beside it",
        ),
        (
            "batches of 32 / bare append, new file",
            batch32,
            batch32_peers[FILE_PEER],
            "of the new-file loop beside it",
        ),
        (
            "SYNC_FLUSH, 8 threads",
            (sync_rate, sync_rate, sync_rate),
            sync_rate / raw_sync_msgs,
            "of raw pwrite+fdatasync (target 0.5)",
        ),
        ("reads, 32 msgs/pull (hot)", reads, reads[0] / READS_TARGET, "of target 1M/s"),
        ("reads / bare append, warm", reads, reads_peers[WARM_PEER], "of the warm loop beside it"),
    ]
    print()
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print(
        f"record size {record_bytes} B (1 KiB body); raw sequential write {raw_mb:,.0f} MB/s "
        f"(page cache + fdatasync), O_DIRECT {direct_mb:,.0f} MB/s"
    )
    print(f"median of {reps} runs per case (range in brackets)")
    print("| case | msgs/s | range | MB/s | ratio | against |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, (rate, low, high), ratio, against in rows:
        print(
            f"| {name} | {rate:,.0f} | {low / 1000:,.0f}k-{high / 1000:,.0f}k "
            f"| {mb(rate):,.1f} | {ratio:.2f} | {against} |"
        )
    for name, rates in peers.items():
        median, low, high = spread(rates)
        print(f"{name} (a peer, run before each run of the cases set against it): "
              f"{median:,.0f} msgs/s ({low:,.0f}-{high:,.0f})")  # fmt: skip
    print("the ratios to the peers change with the code, not with the machine's speed that day")
    print(
        f"SYNC_FLUSH: {sync['fsyncs_per_s']:,.0f} fsyncs/s, {sync['msgs_per_fsync']:.1f} msgs per "
        f"fsync; raw loop with the same group size: {raw_groups:,.0f} fsyncs/s "
        f"= {raw_sync_msgs:,.0f} msgs/s"
    )
    result = {
        "machine": platform.platform(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "messages": n,
        "record_bytes": record_bytes,
        "raw_write_mb_s": raw_mb,
        "direct_write_mb_s": direct_mb,
        "repeat": reps,
        "cases": {
            name: {
                "msgs_per_s": rate,
                "lowest": low,
                "highest": high,
                "ratio": ratio,
                "against": against,
            }
            for name, (rate, low, high), ratio, against in rows
        },
        "sync_flush": sync | {"raw_fsyncs_per_s": raw_groups, "raw_msgs_per_s": raw_sync_msgs},
        "peers_msgs_per_s": peers,
    }
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
