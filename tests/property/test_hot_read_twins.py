"""A pull's hot records gathered in one call: the compiled twin (`store._hot_read.gather`)
against the reference, over a real mapped commitlog file of spec-built records (v1 and v2
magic, several sizes, a blank tail) and consume-queue entries that point at them, at
nowhere, at the middle of a record, or hold the placeholder; with and without a tag filter,
and every limit."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rmqpy.store.hot_read import reference_gather
from rmqpy.store.layout import CQ_ENTRY, CQ_PLACEHOLDER
from tests.spec_bytes import spec_record

compiled = pytest.importorskip("rmqpy.store._hot_read", reason="the compiled core is not built")

BASE = 1 << 30  # the file's first commitlog offset


@st.composite
def commitlog_file(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int, int]]]:
    """File bytes, and (offset, size, tags code) of each record in it."""
    data = bytearray()
    records = []
    for n in range(draw(st.integers(0, 12))):
        record = spec_record(body=bytes(draw(st.integers(0, 300))), topic="T",
                             props={"TAGS": f"t{n % 3}"}, phys_offset=BASE + len(data))  # fmt: skip
        if draw(st.integers(0, 6)) == 0:  # a v2 record: not taken the fast way
            record = record[:4] + struct.pack(">i", -626843477) + record[8:]
        records.append((BASE + len(data), len(record), n % 3))
        data += record
    data += bytes(draw(st.integers(8, 64)))  # the file's unwritten tail
    return bytes(data), records


# (file bytes, written, consume-queue entries, tags codes wanted, low, max count, max bytes)
Case = tuple[bytes, int, bytes, frozenset[int] | None, int, int, int]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    data, records = draw(commitlog_file())
    entries = []
    for _ in range(draw(st.integers(0, 16))):
        kind = draw(st.integers(0, 9))
        if records and kind < 7:
            entries.append(draw(st.sampled_from(records)))
        elif kind == 7:
            entries.append(CQ_PLACEHOLDER)
        elif kind == 8 and records:  # the middle of a record, or a wrong size
            phy, size, tags = draw(st.sampled_from(records))
            entries.append((phy + draw(st.integers(0, 8)), size + draw(st.integers(-2, 2)), tags))
        else:  # beyond the file, or before it
            entries.append((draw(st.sampled_from([0, BASE - 100, BASE + len(data)])), 100, 0))
    written = draw(st.integers(0, len(data)))
    wanted = draw(st.one_of(st.none(), st.frozensets(st.integers(0, 3), max_size=3)))
    low = BASE + draw(st.integers(-10, 400))
    return (data, written, b"".join(CQ_ENTRY.pack(*e) for e in entries), wanted, low,
            draw(st.integers(1, 20)), draw(st.integers(0, 3000)))  # fmt: skip


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cases())
def test_both_gather_the_same_records(tmp_path: Path, case: Case) -> None:
    data, written, entries, tags, low, max_count, max_bytes = case
    path = tmp_path / "00000000001073741824"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        args = (mapping, BASE, written, entries, tags, low, max_count, max_bytes)
        ours, theirs = compiled.gather(*args), reference_gather(*args)
    event(f"{min(len(theirs[1]), 3)}+ records")
    assert ours == theirs
    body, sizes, scanned = theirs
    assert len(body) == sum(sizes) and scanned >= len(sizes)


def test_a_pull_takes_the_wanted_tags_from_the_front_and_stops_at_a_removed_record(
    tmp_path: Path,
) -> None:
    data = b"".join(
        spec_record(body=b"m%d" % n, topic="T", props={}, phys_offset=0) for n in range(4)
    )
    path = tmp_path / "00000000001073741824"
    path.write_bytes(data + bytes(8))
    size = len(data) // 4
    entries = [(BASE + n * size, size, n % 2) for n in range(4)]
    entries.insert(3, CQ_PLACEHOLDER)  # what a removed or unwritten slot holds
    raw = b"".join(CQ_ENTRY.pack(*e) for e in entries)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        for gather in (compiled.gather, reference_gather):
            body, sizes, scanned = gather(mapping, BASE, len(data), raw, {1}, BASE, 32, 1 << 20)
            assert (sizes, scanned) == ([size], 3)  # entries 0 and 2 skipped, stopped at 3
            assert body == data[size : 2 * size]
            body, sizes, scanned = gather(mapping, BASE, len(data), raw, None, BASE, 2, 1 << 20)
            assert (body, sizes, scanned) == (data[: 2 * size], [size, size], 2)
