"""Hash index from message keys to commitlog offsets (RocketMQ `IndexFile`/`IndexService`).

One file::

    header (40 B): i64 beginTimestamp | i64 endTimestamp | i64 beginPhyOffset
                   | i64 endPhyOffset | i32 hashSlotCount | i32 indexCount
    slots: hashSlotNum x i32, the number of the newest entry of each bucket (0 = empty)
    entries: indexNum x (i32 keyHash | i64 phyOffset | i32 timeDiffSec | i32 prevIndex)

Entry numbers start at 1 (entry 0 is never used). Buckets chain through `prevIndex`, newest
first. Keys are `topic#UNIQ_KEY` and `topic#key` for each of KEYS. Files are written through
a writable shared mmap: updates are random (a slot and an entry per key), which pwrite would
turn into two syscalls per key. A full disk must not fault there (SIGBUS), so the blocks
written are always reserved first: the header and slots when the file is created, and the
entries `reserve_step` ahead of the next entry, or the whole file when it is created with
`warmMapedFileEnable`. A reservation that fails leaves those records unindexed (logged),
as a file that cannot be created does.
"""

from __future__ import annotations

import mmap
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import structlog

from rmqpy.config.compiled import twin
from rmqpy.store.fileio import (
    BlockReserve,
    create_preallocated,
    drop_derived_files,
    remove_stray_tmp_files,
    reserve_step,
)
from rmqpy.store.java_hash import java_concat_hashes, java_string_hash
from rmqpy.store.layout import (
    INDEX_ENTRY,
    INDEX_ENTRY_DTYPE,
    INDEX_HEADER,
    INDEX_SLOT,
    INDEX_SLOT_SIZE,
)
from rmqpy.store.mapped_file import StoreFileError

log = structlog.get_logger(__name__)
_compiled = twin("rmqpy.store._index")  # put_index_keys, compiled

INT_MAX = 0x7FFFFFFF
QUERY_MAX_NUM = 64
FEW_KEYS = 24  # a round with at most this many keys is indexed one key at a time


def index_key_hash(key: str) -> int:
    """The slot hash of an index key (`topic#key`): abs(String.hashCode), 0 when that stays
    negative (Integer.MIN_VALUE)."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def index_key_hashes(topics: Sequence[str], keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """`index_key_hash(topic + "#" + key)` of each pair, vectorised."""
    hashes = np.abs(java_concat_hashes(topics, keys, joint="#"))
    hashes[hashes > INT_MAX] = 0
    return hashes


def put_index_keys(
    f: IndexFile, topics: list[str], keys: list[str], phys: list[int], stamps: list[int]
) -> int:
    """Add each `topic#key` to `f` with its record's offset and store time, one at a time
    and in order, as many as fit; how many were added. Its compiled twin does every round;
    the reference does rounds of up to FEW_KEYS and `IndexFile.put_keys` the larger ones."""
    room = max(f.index_num - f.index_count, 0)
    pairs = zip(topics[:room], keys[:room], strict=False)
    return f.put_few([index_key_hash(f"{topic}#{key}") for topic, key in pairs], phys, stamps)


def index_file_size(slots: int, entries: int) -> int:
    return INDEX_HEADER.size + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY.size


class IndexFile:
    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        *,
        create: bool,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        sparse: bool = False,
    ) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_at = INDEX_HEADER.size + hash_slot_num * INDEX_SLOT_SIZE
        step = reserve_step(self.file_size) if sparse else 0
        upfront = min(self._entries_at + step, self.file_size)  # header, slots, first entries
        if create:
            self.fd = create_preallocated(path, self.file_size, upfront if sparse else None)
        else:
            self.fd = os.open(path, os.O_RDWR)
        reserved = (upfront if create else 0) if sparse else self.file_size
        self.blocks = BlockReserve(self.fd, self.file_size, step, reserved)
        try:
            if not create and os.fstat(self.fd).st_size != self.file_size:
                raise StoreFileError(
                    f"{path}: index file size does not match maxHashSlotNum/maxIndexNum"
                )
            self._mm = mmap.mmap(self.fd, self.file_size, mmap.MAP_SHARED)
        except BaseException:
            os.close(self.fd)
            if create:
                os.unlink(path)
            raise
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = INDEX_HEADER.unpack_from(self._mm, 0)
        self._header_count = self.index_count
        self.index_count = max(self.index_count, 1)
        if create:
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp

    def damage(self, entries_too: bool) -> str | None:
        """What makes this file untrustworthy, or None. The header must be one a writer
        could leave (indexCount within maxIndexNum, offsets and times in order); with
        `entries_too`, every slot must name a written entry and every entry's prevIndex an
        earlier one, so no query can read past the file or chase a cycle. Java's files pass."""
        count, raw = self.index_count, self._header_count
        if not 0 <= raw <= self.index_num:
            return f"indexCount {raw} is outside 0..{self.index_num}"
        if not 0 <= self.hash_slot_count <= count:
            return f"hashSlotCount {self.hash_slot_count} is outside 0..{count}"
        if not 0 <= self.begin_phy_offset <= self.end_phy_offset:
            return f"phy offsets {self.begin_phy_offset}..{self.end_phy_offset} are not in order"
        if count > 1 and not 0 <= self.begin_timestamp <= self.end_timestamp:
            return f"timestamps {self.begin_timestamp}..{self.end_timestamp} are not in order"
        if not entries_too:
            return None
        slots = np.frombuffer(
            self._mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER.size
        )
        entries = np.frombuffer(
            self._mm, dtype=INDEX_ENTRY_DTYPE, count=count, offset=self._entries_at
        )[1:]
        try:
            if ((slots < 0) | (slots >= count)).any():
                return "a hash slot names an entry past indexCount"
            prev = entries["prev"].astype(np.int64)
            if ((prev < 0) | (prev >= np.arange(1, count, dtype=np.int64))).any():
                return "an entry's prevIndex is not an earlier entry"
            if (entries["diff"] < 0).any() or (entries["phy"] < 0).any():
                return "an entry has a negative time or offset"
            return None
        finally:
            del slots, entries  # no view of the mmap may outlive this call

    def is_full(self) -> bool:
        return bool(self.index_count >= self.index_num)

    def write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def reserve_entries(self, count: int) -> None:
        """Reserve the blocks of the next `count` entries (as many as fit), before they are
        written through the mapping; NoSpaceError when the disk has no room for them."""
        n = min(count, self.index_num - self.index_count)
        at = self._entries_at + self.index_count * INDEX_ENTRY.size
        self.blocks.cover(at, at + n * INDEX_ENTRY.size)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add one key; False when the file is full."""
        return self.put_few([index_key_hash(key)], [phy_offset], [store_timestamp]) == 1

    def put_few(
        self, key_hashes: Sequence[int], phy_offsets: Sequence[int], store_timestamps: Sequence[int]
    ) -> int:
        """`put_keys` one key at a time, as RocketMQ `IndexFile.putKey` does: cheaper than
        the vectorised pass for a handful of keys (numpy's cost is per call, not per key)."""
        k = min(self.index_num - self.index_count, len(key_hashes))
        if k <= 0:
            return 0
        mm = self._mm
        slot_num = self.hash_slot_num
        entries_at = self._entries_at
        n = self.index_count
        for key_hash, phy, stamp in zip(
            key_hashes[:k], phy_offsets, store_timestamps, strict=False
        ):
            slot_pos = INDEX_HEADER.size + key_hash % slot_num * INDEX_SLOT_SIZE
            (prev,) = INDEX_SLOT.unpack_from(mm, slot_pos)
            if prev <= 0 or prev > n:
                prev = 0
                self.hash_slot_count += 1
            begin = self.begin_timestamp
            diff = min(max((stamp - begin) // 1000, 0), INT_MAX) if begin > 0 else 0
            if n <= 1:  # the first entry of a file sets its begin time
                self.begin_timestamp, self.begin_phy_offset = stamp, phy
            INDEX_ENTRY.pack_into(mm, entries_at + n * INDEX_ENTRY.size, key_hash, phy, diff, prev)
            INDEX_SLOT.pack_into(mm, slot_pos, n)
            n += 1
        self.index_count = n
        self.end_phy_offset = int(phy_offsets[k - 1])
        self.end_timestamp = int(store_timestamps[k - 1])
        self.write_header()
        return int(k)

    def put_keys(
        self,
        key_hashes: npt.NDArray[np.int64],
        phy_offsets: npt.NDArray[np.int64],
        store_timestamps: npt.NDArray[np.int64],
    ) -> int:
        """Add keys in order, as many as fit; returns how many were added.

        Vectorised RocketMQ `IndexFile.putKey`: entry numbers run on from `indexCount`;
        each entry's prevIndex is the previous entry of its slot in this batch, else the
        slot's old value; each slot ends up holding its newest entry number."""
        k = min(self.index_num - self.index_count, len(key_hashes))
        if k <= 0:
            return 0
        hashes, phys, stamps = key_hashes[:k], phy_offsets[:k], store_timestamps[:k]
        n0 = self.index_count
        diffs = np.zeros(k, dtype=np.int64)
        begin = self.begin_timestamp
        if n0 <= 1:  # the first entry of a file sets its begin time
            if begin > 0:
                diffs[0] = min(max((int(stamps[0]) - begin) // 1000, 0), INT_MAX)
            begin = int(stamps[0])
            self.begin_timestamp, self.begin_phy_offset = begin, int(phys[0])
            rest = slice(1, k)
        else:
            rest = slice(0, k)
        if begin > 0:
            diffs[rest] = np.clip((stamps[rest] - begin) // 1000, 0, INT_MAX)
        numbers = n0 + np.arange(k, dtype=np.int64)
        slots = hashes % self.hash_slot_num
        slot_table = np.frombuffer(
            self._mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER.size
        )
        try:
            old = slot_table[slots].astype(np.int64)
            old[(old <= 0) | (old > n0)] = 0
            order = np.argsort(slots, kind="stable")
            sorted_slots = slots[order]
            first_of_slot = np.ones(k, dtype=bool)
            first_of_slot[1:] = sorted_slots[1:] != sorted_slots[:-1]
            prev_in_batch = np.concatenate(([0], numbers[order][:-1]))
            prev = np.empty(k, dtype=np.int64)
            prev[order] = np.where(first_of_slot, old[order], prev_in_batch)
            entries = np.empty(k, dtype=INDEX_ENTRY_DTYPE)
            entries["hash"], entries["phy"], entries["diff"], entries["prev"] = (
                hashes,
                phys,
                diffs,
                prev,
            )
            at = self._entries_at + n0 * INDEX_ENTRY.size
            self._mm[at : at + k * INDEX_ENTRY.size] = entries.tobytes()
            last_of_slot = np.ones(k, dtype=bool)
            last_of_slot[:-1] = sorted_slots[:-1] != sorted_slots[1:]
            slot_table[sorted_slots[last_of_slot]] = numbers[order][last_of_slot]
            self.hash_slot_count += int(np.count_nonzero(old[order][first_of_slot] == 0))
        finally:
            del slot_table  # no view of the mmap may outlive this call
        self.index_count = n0 + k
        self.end_phy_offset = int(phys[-1])
        self.end_timestamp = int(stamps[-1])
        self.write_header()
        return int(k)

    def is_time_matched(self, begin: int, end: int) -> bool:
        return bool(begin <= self.end_timestamp and end >= self.begin_timestamp)

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets stored under `key` with store time in [begin, end], newest first."""
        found: list[int] = []
        key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER.size + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE
        (slot_value,) = INDEX_SLOT.unpack_from(self._mm, slot_pos)
        count = self.index_count
        if slot_value <= 0 or slot_value > count or count <= 1:
            return found
        current = slot_value
        while len(found) < max_num:
            entry_hash, phy, diff, prev = INDEX_ENTRY.unpack_from(
                self._mm, self._entries_at + current * INDEX_ENTRY.size
            )
            if diff < 0:
                break
            time_read = self.begin_timestamp + diff * 1000
            if entry_hash == key_hash and begin <= time_read <= end:
                found.append(phy)
            if prev <= 0 or prev >= current or time_read < begin:  # chains run backwards
                break
            current = prev
        return found

    def flush(self) -> None:
        self._mm.flush()

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()
            os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        os.unlink(self.path)


@dataclass(frozen=True, slots=True)
class QueryOffsetResult:
    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


def _index_file_name(now_ms: int) -> str:
    secs, ms = divmod(now_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(secs)) + f"{ms:03d}"


class IndexService:
    """Keeps the index files, adds dispatched records, answers queries by key."""

    def __init__(
        self,
        index_dir: str,
        hash_slot_num: int,
        index_num: int,
        on_file_full: Callable[[int], None] = lambda _ts: None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        sparse: bool = False,
    ) -> None:
        self.index_dir = index_dir
        self.sparse = sparse  # files reserve their entries' blocks ahead (`IndexFile`)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.on_file_full = on_file_full
        self._clock_ms = clock_ms
        self.files: list[IndexFile] = []
        self.error: OSError | None = None

    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> int:
        """Open the index files; after a crash drop those newer than the checkpoint. A file
        that cannot be trusted (the wrong size: cut short, or maxHashSlotNum/maxIndexNum
        changed since; a header no writer leaves; in the newest file, where a crash or a bad
        write lands, a slot or chain pointing where none can) is dropped with every file
        after it; the caller re-indexes from the end of the last one kept, as it does for
        the dropped newer ones. Returns how many were dropped."""
        dropped = 0
        if not os.path.isdir(self.index_dir):
            return 0
        remove_stray_tmp_files(self.index_dir)
        names = sorted(n for n in os.listdir(self.index_dir) if n.isdigit())
        for at, name in enumerate(names):
            path = os.path.join(self.index_dir, name)
            try:
                f = IndexFile(
                    path, self.hash_slot_num, self.index_num, create=False, sparse=self.sparse
                )
            except StoreFileError as exc:
                return dropped + drop_derived_files(self.index_dir, names[at:], str(exc))
            if not last_exit_ok and f.end_timestamp > index_msg_timestamp:
                log.info("dropping index file newer than the checkpoint", path=f.path)
                f.destroy()
                dropped += 1
                continue
            problem = f.damage(entries_too=at == len(names) - 1)
            if problem is not None:
                f.close()
                return dropped + drop_derived_files(
                    self.index_dir, names[at:], f"{path}: {problem}"
                )
            self.files.append(f)
        return dropped

    def _writable_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full():
            return last
        os.makedirs(self.index_dir, exist_ok=True)
        now = self._clock_ms()
        while os.path.exists(os.path.join(self.index_dir, _index_file_name(now))):
            now += 1
        f = IndexFile(
            os.path.join(self.index_dir, _index_file_name(now)),
            self.hash_slot_num,
            self.index_num,
            create=True,
            end_phy_offset=last.end_phy_offset if last else 0,
            end_timestamp=last.end_timestamp if last else 0,
            sparse=self.sparse,
        )
        self.files = [*self.files, f]
        if last is not None:
            last.flush()
            self.on_file_full(last.end_timestamp)
        return f

    def build_index(
        self, topics: list[str], keys: list[str], phys: list[int], stamps: list[int]
    ) -> None:
        """Index each `topic#key` at its record's offset and store time, in commitlog order.
        When no index file can be created (a full disk) the records are left unindexed, as
        RocketMQ does, so consume queues keep flowing. (The compiled core takes a usual round,
        keys added to the last file, in one call: `_index.build_round`.)"""
        if not keys or (
            _compiled is not None and _compiled.build_round(self, topics, keys, phys, stamps)
        ):
            return
        try:
            self._build(topics, keys, phys, stamps)
        except OSError as exc:
            if self.error is None:
                log.error("cannot write the index; records go unindexed", error=str(exc))
            self.error = exc
        else:
            self.error = None

    def _build(
        self, topics: list[str], keys: list[str], phys: list[int], stamps: list[int]
    ) -> None:
        f = self._writable_file()
        skip = bisect_left(phys, f.end_phy_offset)  # indexed before
        count = len(keys) - skip
        if count <= 0:
            return
        if skip:
            topics, keys, phys, stamps = topics[skip:], keys[skip:], phys[skip:], stamps[skip:]
        put: Callable[[IndexFile, int], int]
        if _compiled is not None or count <= FEW_KEYS:
            one_by_one = put_index_keys if _compiled is None else _compiled.put_index_keys

            def put(f: IndexFile, done: int) -> int:
                if not done:  # the usual round: the columns as they are
                    return one_by_one(f, topics, keys, phys, stamps)
                return one_by_one(f, topics[done:], keys[done:], phys[done:], stamps[done:])
        else:
            hashes = index_key_hashes(topics, keys)
            phy_arr = np.array(phys, dtype=np.int64)
            stamp_arr = np.array(stamps, dtype=np.int64)

            def put(f: IndexFile, done: int) -> int:
                return f.put_keys(hashes[done:], phy_arr[done:], stamp_arr[done:])

        f.reserve_entries(count)
        done = put(f, 0)
        while done < count:
            f = self._writable_file()
            f.reserve_entries(count - done)
            done += put(f, done)

    def query_offset(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryOffsetResult:
        """Newest file first, only files whose time range overlaps [begin, end]."""
        max_num = min(max_num, QUERY_MAX_NUM)
        found: list[int] = []
        files = self.files
        last_ts = files[-1].end_timestamp if files else 0
        last_phy = files[-1].end_phy_offset if files else 0
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                try:
                    found += f.select_phy_offsets(
                        f"{topic}#{key}", max_num - len(found), begin, end
                    )
                except ValueError:  # deleted by expiry while we looked, with what it indexed
                    continue
            if f.begin_timestamp < begin or len(found) >= max_num:
                break
        return QueryOffsetResult(found, last_ts, last_phy)

    def truncate(self, phy_offset: int) -> int:
        """After the commitlog was cut at `phy_offset`: drop files that only index what is gone,
        and lower the last file's end so records written from there on are indexed again.
        Entries beyond the cut stay but are harmless: queries verify each record's key."""
        dropped = 0
        while self.files and self.files[-1].begin_phy_offset >= phy_offset > 0:
            if self.files[-1].index_count <= 1:
                break
            self.files.pop().destroy()
            dropped += 1
        if self.files and self.files[-1].end_phy_offset > phy_offset:
            self.files[-1].end_phy_offset = phy_offset
            self.files[-1].write_header()
        return dropped

    def delete_expired_files(self, commitlog_min: int) -> int:
        doomed = [f for f in self.files[:-1] if f.end_phy_offset < commitlog_min]
        if doomed:
            self.files = [f for f in self.files if f not in doomed]
            for f in doomed:
                f.destroy()
        return len(doomed)

    def flush(self) -> None:
        for f in self.files:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
