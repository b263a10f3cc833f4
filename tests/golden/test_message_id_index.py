"""Records as stock producers write them are indexed under `topic#UNIQ_KEY`.

The commitlog is built field by field from the spec (`tests/spec_bytes.py`), with properties
as the C++ and Java clients send them, and the index file the store writes is read back with
the spec's layout, not with `store.index_file`.
"""

from __future__ import annotations

import struct
from pathlib import Path

from rmqpy.store.message import decode_record
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config
from tests.spec_bytes import spec_blank, spec_record

FILE_SIZE = 16 * 1024
SLOTS, ENTRIES = 64, 256


def java_hash(text: str) -> int:
    """String.hashCode over UTF-16 code units, as an unsigned 32-bit number."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h


def slot_hash(key: str) -> int:
    signed = struct.unpack(">i", struct.pack(">I", java_hash(key)))[0]
    h = abs(signed)
    return 0 if h > 0x7FFFFFFF else h


def index_offsets(index: bytes, key: str) -> list[int]:
    """Every phyOffset the chain of `key`'s slot holds for `key`'s hash."""
    h = slot_hash(key)
    count = struct.unpack_from(">i", index, 36)[0]
    n = struct.unpack_from(">i", index, 40 + (h % SLOTS) * 4)[0]
    found = []
    while 0 < n < count:
        key_hash, phy, _diff, prev = struct.unpack_from(">iqii", index, 40 + SLOTS * 4 + n * 20)
        if key_hash == h:
            found.append(phy)
        n = prev if prev != n else 0
    return found


# Properties in the order and spelling the stock clients send them.
STOCK = [
    ("cpp", {"KEYS": "order-7", "TAGS": "TagA", "UNIQ_KEY": "7F00000100002A9F0000000000000001"}),
    ("java", {"TAGS": "TagB", "WAIT": "true", "UNIQ_KEY": "7F0000013B6818B4AAC2067A1A5C0000"}),
    ("nokeys", {"UNIQ_KEY": "7F0000013B6818B4AAC2067A1A5C0001"}),
]
# Written by rmqpy 0.1.0 under the Java constant's name.
LEGACY = {"TAGS": "Old", "UNIQ_CLIENT_MESSAGE_ID_KEYIDX": "0A0000070001000000010000002A0000"}


def test_stock_client_records_are_indexed_under_their_uniq_key(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    records = []
    data = b""
    for i, (_, props) in enumerate([*STOCK, ("legacy", LEGACY)]):
        record = spec_record(
            body=f"body {i}".encode(),
            topic="Stock",
            props=props,
            queue_offset=i,
            phys_offset=len(data),
            born_ts=1_700_000_000_000 + i,
            store_ts=1_700_000_000_100 + i,
        )
        records.append((len(data), props))
        data += record
    data += spec_blank(FILE_SIZE - len(data))
    (root / "commitlog" / "00000000000000000000").write_bytes(data.ljust(FILE_SIZE, b"\0"))

    config = small_config(root, max_hash_slot_num=SLOTS, max_index_num=ENTRIES)
    store = MessageStore(config)
    store.start()
    try:
        for phy, props in records:
            uniq = props.get("UNIQ_KEY") or props["UNIQ_CLIENT_MESSAGE_ID_KEYIDX"]
            hits = store.query_message("Stock", uniq, 32)
            assert [decode_record(m).physical_offset for m in hits.messages] == [phy]
    finally:
        store.shutdown()

    [index_file] = list((root / "index").iterdir())
    index = index_file.read_bytes()
    # Two entries for the record with KEYS, one for each of the others, entry 0 unused.
    assert struct.unpack_from(">i", index, 36)[0] == 1 + 2 + 1 + 1 + 1
    for phy, props in records:
        uniq = props.get("UNIQ_KEY") or props["UNIQ_CLIENT_MESSAGE_ID_KEYIDX"]
        assert phy in index_offsets(index, f"Stock#{uniq}")
        if "KEYS" in props:
            assert phy in index_offsets(index, f"Stock#{props['KEYS']}")
