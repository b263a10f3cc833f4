"""Dispatch writes the same consume queues and index whether it takes the commitlog's own
columns (a running store) or parses the files (a store opened on someone else's commitlog)."""

from __future__ import annotations

import shutil
from pathlib import Path

from store.layout import SysFlag
from store.message import Message
from store.message_store import MessageStore
from tests.conftest import small_config


def workload() -> list[list[list[Message]]]:
    """Puts of 8 groups each: singles over two topics and three queues, batches,
    transactions, odd keys, file rolls; then puts whose records all have one key, or none,
    and a batch holding a prepared transaction (the shapes dispatch takes column-wise)."""
    groups: list[list[Message]] = []
    for i in range(120):
        topic = "TopicA" if i % 3 else "TopicB"
        props = {"TAGS": f"Tag{i % 4}", "UNIQ_CLIENT_MESSAGE_ID_KEYIDX": f"U{i:030d}"}
        if i % 5:
            props["KEYS"] = f"k{i} shared  k{i}-\u00e9" if i % 7 == 0 else f"k{i}"
        flag = SysFlag.TRANSACTION_NOT_TYPE
        if i % 11 == 0:
            flag = SysFlag.TRANSACTION_PREPARED_TYPE
        elif i % 13 == 0:
            flag = SysFlag.TRANSACTION_ROLLBACK_TYPE
        msg = Message(topic, b"b" * (40 + i * 7 % 300), i // 3 % 3, props, sys_flag=flag)
        if i % 10 == 9:
            batch = [
                Message(topic, b"batch" * 20, i // 3 % 3, {**props, "KEYS": f"bk{i}-{j}"})
                for j in range(4)
            ]
            groups.append(batch)
        groups.append([msg])
    puts = [groups[i : i + 8] for i in range(0, len(groups), 8)]
    for shape in ("one key", "no key"):
        puts += [
            [
                [
                    Message(
                        "TopicA",
                        b"shaped",
                        n % 3,
                        {"UNIQ_CLIENT_MESSAGE_ID_KEYIDX": f"S{shape[0]}{p}-{n}"}
                        | ({"KEYS": f"sk{p}-{n}"} if shape == "one key" else {}),
                    )
                ]
                for n in range(8)
            ]
            for p in range(3)
        ]
    prepared = SysFlag.TRANSACTION_PREPARED_TYPE
    mixed = [
        Message("TopicB", b"mixed", 1, {"KEYS": f"mk{j}"}, sys_flag=prepared if j == 2 else 0)
        for j in range(4)
    ]
    puts.append([mixed])
    return puts


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def index_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def test_handed_over_and_parsed_dispatch_write_identical_files(tmp_path: Path) -> None:
    live = MessageStore(small_config(tmp_path / "live", mapped_file_size_consume_queue=20 * 8))
    live.start()
    for put in workload():
        assert all(r.ok for r in live.put_messages(put))
    assert live.wait_dispatched()
    assert live.reput.records_handed_over > 0
    live.shutdown()

    # The same commitlog, nothing else: the store dispatches it by parsing the files.
    (tmp_path / "parsed").mkdir()
    shutil.copytree(tmp_path / "live" / "commitlog", tmp_path / "parsed" / "commitlog")
    parsed = MessageStore(small_config(tmp_path / "parsed", mapped_file_size_consume_queue=20 * 8))
    parsed.start()
    assert parsed.wait_dispatched()
    assert parsed.reput.records_parsed == live.reput.records_handed_over + live.reput.records_parsed
    parsed.shutdown()

    live_cq = tree_bytes(tmp_path / "live" / "consumequeue")
    assert len(live_cq) > 6  # two topics x three queues, rolled over
    assert tree_bytes(tmp_path / "parsed" / "consumequeue") == live_cq
    assert index_bytes(tmp_path / "parsed") == index_bytes(tmp_path / "live")
