"""The `rmqpy` command as an operator types it: a real process against a real broker."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqpy.bench.processes import free_port
from rmqpy.store.message import Host
from rmqpy.store.message_id import create_offset_msg_id
from tests.conftest import FIXTURES
from tests.integration.daemon import BrokerProcess
from tests.spec_bytes import spec_blank, spec_cq_entry, spec_record

RMQPY = str(Path(sys.executable).parent / "rmqpy")


def rmqpy(*args: str, stdin: bytes | None = None, namesrv: str | None = None) -> Any:
    """Run `rmqpy ARGS` with RMQPY_NAMESRV set as an operator would."""
    env = {**os.environ, "RMQPY_NAMESRV": namesrv or "127.0.0.1:1"}
    return subprocess.run(
        [RMQPY, *args], input=stdin, env=env, capture_output=True, timeout=60, check=False
    )


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return str(result.stdout.decode())


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def ns(broker: BrokerProcess) -> str:
    return broker.namesrv


def test_topic_create_list_route_delete(ns: str, topic: str) -> None:
    assert "created" in ok(rmqpy("topic", "create", topic, "--queues", "3", namesrv=ns))
    listed = json.loads(ok(rmqpy("topic", "list", "--json", namesrv=ns)))
    assert {"topic": topic, "read": 3, "write": 3, "perm": 6} in listed
    [route] = json.loads(ok(rmqpy("topic", "route", topic, "--json", namesrv=ns)))
    assert (route["broker"], route["write"]) == ("broker-a", 3)
    ok(rmqpy("topic", "delete", topic, namesrv=ns))
    listed = json.loads(ok(rmqpy("topic", "list", "--json", namesrv=ns)))
    assert topic not in {row["topic"] for row in listed}


def test_topic_create_refuses_to_cut_queues_without_force(ns: str, topic: str) -> None:
    """Recreating a topic with fewer queues hid the messages of the queues cut off (8 sent,
    2 visible): refused, exit 1, unless --force."""
    ok(rmqpy("topic", "create", topic, "--queues", "4", namesrv=ns))
    ok(rmqpy("send", topic, namesrv=ns, stdin=b"".join(b"m%d\n" % i for i in range(8))))
    cut = rmqpy("topic", "create", topic, "--queues", "2", namesrv=ns)
    assert cut.returncode == 1
    assert "has 4 queues" in cut.stderr.decode() and "--force" in cut.stderr.decode()
    assert len(ok(rmqpy("consume", topic, namesrv=ns)).splitlines()) == 8
    assert "created" in ok(rmqpy("topic", "create", topic, "--queues", "6", namesrv=ns))
    ok(rmqpy("topic", "create", topic, "--queues", "2", "--force", namesrv=ns))
    listed = json.loads(ok(rmqpy("topic", "list", "--json", namesrv=ns)))
    assert {"topic": topic, "read": 2, "write": 2, "perm": 6} in listed


def test_offsets_of_a_group_that_does_not_exist_say_so(ns: str, topic: str) -> None:
    ok(rmqpy("send", topic, "x", namesrv=ns))
    missing = rmqpy("offsets", "NoGroup", topic, namesrv=ns)  # it showed a backlog, exit 0
    assert missing.returncode == 1
    assert missing.stderr.decode().strip() == "rmqpy offsets: group NoGroup does not exist"


def test_deleting_a_topic_that_does_not_exist_says_so(ns: str) -> None:
    gone = rmqpy("topic", "delete", "NoSuchTopic", namesrv=ns)
    assert gone.returncode == 1
    assert gone.stderr.decode().strip() == "rmqpy topic: topic NoSuchTopic does not exist"


def test_send_from_argument_file_and_stdin_then_consume(
    ns: str, topic: str, tmp_path: Path
) -> None:
    ok(rmqpy("topic", "create", topic, "--queues", "2", namesrv=ns))
    sent = json_lines(
        ok(
            rmqpy(
                "send", topic, "from-arg", "--tags", "TagA", "--keys", "k1 k2", "--json", namesrv=ns
            )
        )
    )
    assert sent[0]["status"] == "SEND_OK"
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(b"from-file")
    ok(rmqpy("send", topic, "--file", str(body_file), namesrv=ns))
    lines = ok(rmqpy("send", topic, namesrv=ns, stdin=b"line-1\nline-2\n\nline-3\n"))
    assert lines.count("SEND_OK") == 3
    # options first, as the usage line shows them: the body is still the body
    assert "SEND_OK" in ok(rmqpy("send", topic, "--tags", "TagB", "opts-first", namesrv=ns))

    consumed = json_lines(ok(rmqpy("consume", topic, "--json", namesrv=ns)))
    bodies = sorted(m["body"] for m in consumed)
    assert bodies == ["from-arg", "from-file", "line-1", "line-2", "line-3", "opts-first"]
    tagged = next(m for m in consumed if m["body"] == "from-arg")
    assert (tagged["tags"], tagged["keys"], tagged["msgId"]) == (
        "TagA",
        ["k1", "k2"],
        sent[0]["msgId"],
    )
    text = ok(rmqpy("consume", topic, "--tags", "TagA", namesrv=ns))
    assert text.splitlines() == ["from-arg"]
    assert len(ok(rmqpy("consume", topic, "--max", "2", namesrv=ns)).splitlines()) == 2


def test_consume_json_gives_binary_bodies_whole_in_base64(
    ns: str, topic: str, tmp_path: Path
) -> None:
    """20,000 bytes that are no UTF-8 used to come out as 18,955 characters with
    replacements: the bytes were lost. `bodyBase64` has them all; `body` is null."""
    data = bytes(range(256)) * 78 + b"\xff\xfe" * 16
    (tmp_path / "blob.bin").write_bytes(data)
    ok(rmqpy("send", topic, "--file", str(tmp_path / "blob.bin"), namesrv=ns))
    ok(rmqpy("send", topic, "plain text", namesrv=ns))
    consumed = json_lines(ok(rmqpy("consume", topic, "--json", namesrv=ns)))
    [blob] = [m for m in consumed if m["body"] is None]
    assert base64.b64decode(blob["bodyBase64"]) == data
    [text] = [m for m in consumed if m["body"] is not None]
    assert text["body"] == "plain text" and text["bodyBase64"] == "cGxhaW4gdGV4dA=="


def test_consume_from_timestamp_and_as_a_group(ns: str, topic: str) -> None:
    ok(rmqpy("topic", "create", topic, "--queues", "1", namesrv=ns))
    ok(rmqpy("send", topic, "old", namesrv=ns))
    time.sleep(0.1)
    since = str(int(time.time() * 1000))
    time.sleep(0.1)
    ok(rmqpy("send", topic, "new", namesrv=ns))
    after = ok(rmqpy("consume", topic, "--from", "timestamp", "--timestamp", since, namesrv=ns))
    assert after.splitlines() == ["new"]
    assert ok(rmqpy("consume", topic, "--group", "cli-g", namesrv=ns)).splitlines() == [
        "old",
        "new",
    ]
    assert ok(rmqpy("consume", topic, "--group", "cli-g", namesrv=ns)) == ""
    [row] = json.loads(ok(rmqpy("offsets", "cli-g", topic, "--json", namesrv=ns)))
    assert (row["maxOffset"], row["committed"], row["lag"]) == (2, 2, 0)
    table = ok(rmqpy("offsets", "cli-g", topic, namesrv=ns))
    assert table.splitlines()[0].split() == [
        "brokerName",
        "queueId",
        "minOffset",
        "maxOffset",
        "committed",
        "lag",
    ]


def test_consume_without_a_group_only_reads_and_leaves_nothing_behind(ns: str, topic: str) -> None:
    """A look at a topic is not a member's work: no offsets committed, no group or retry
    topic left on the broker per run (a script that looks every minute would leave 1,440
    a day)."""
    ok(rmqpy("topic", "create", topic, "--queues", "2", namesrv=ns))
    ok(rmqpy("send", topic, namesrv=ns, stdin=b"a\nb\nc\n"))
    for _ in range(3):
        assert sorted(ok(rmqpy("consume", topic, namesrv=ns)).splitlines()) == ["a", "b", "c"]
    topics = {row["topic"] for row in json.loads(ok(rmqpy("topic", "list", "--json", namesrv=ns)))}
    assert not [t for t in topics if t.startswith("%RETRY%rmqpy-cli")]
    rows = json.loads(ok(rmqpy("offsets", "TOOLS_CONSUMER", topic, "--json", namesrv=ns)))
    assert [row["committed"] for row in rows] == [None, None]
    table = ok(rmqpy("offsets", "TOOLS_CONSUMER", topic, namesrv=ns)).splitlines()
    assert [line.split()[4] for line in table[1:]] == ["-", "-"]


def test_consuming_a_mistyped_topic_says_it_does_not_exist_and_creates_nothing(ns: str) -> None:
    for group in ([], ["--group", "typo-group"]):
        result = rmqpy("consume", "Ordres", *group, namesrv=ns)
        assert result.returncode == 1
        assert result.stderr.decode().strip() == "rmqpy consume: topic Ordres does not exist"
    topics = {row["topic"] for row in json.loads(ok(rmqpy("topic", "list", "--json", namesrv=ns)))}
    assert "Ordres" not in topics


def test_query_by_key_and_id(ns: str, topic: str) -> None:
    [sent] = json_lines(
        ok(rmqpy("send", topic, "keyed", "--keys", "order-9", "--json", namesrv=ns))
    )
    deadline = time.monotonic() + 10
    while (found := rmqpy("query", "key", topic, "order-9", "--json", namesrv=ns)).returncode:
        assert time.monotonic() < deadline, found.stderr
        time.sleep(0.1)
    assert json_lines(found.stdout.decode())[0]["body"] == "keyed"
    by_id = json_lines(
        ok(rmqpy("query", "id", sent["msgId"], "--topic", topic, "--json", namesrv=ns))
    )
    by_offset = json_lines(ok(rmqpy("query", "id", sent["offsetMsgId"], "--json", namesrv=ns)))
    assert by_id[0]["offsetMsgId"] == by_offset[0]["offsetMsgId"] == sent["offsetMsgId"]
    missing = rmqpy("query", "key", topic, "no-such-key", namesrv=ns)
    assert missing.returncode == 1
    # The msgId `send` prints first is a client id (UNIQ_KEY), found only within its topic;
    # read as an offsetMsgId its "port" is out of range, and no broker is dialled for it.
    without_topic = rmqpy("query", "id", sent["msgId"], namesrv=ns)
    assert without_topic.returncode == 1
    err = without_topic.stderr.decode()
    assert "--topic" in err and "cannot reach" not in err, err


def test_an_id_naming_no_broker_of_the_cluster_is_never_dialled(ns: str, topic: str) -> None:
    ok(rmqpy("send", topic, "x", namesrv=ns))
    with socket.create_server(("127.0.0.1", 0)) as stranger:
        stranger.setblocking(False)
        # A well-formed offsetMsgId whose store host listens but is no broker of the cluster.
        decoy = create_offset_msg_id(Host(b"\x7f\x00\x00\x01", stranger.getsockname()[1]), 0)
        for where in ([], ["--topic", topic], ["--topic", "NoSuchTopic"]):
            miss = rmqpy("query", "id", decoy, *where, namesrv=ns)
            assert miss.returncode == 1, miss.stderr
            err = miss.stderr.decode().strip()
            assert len(err.splitlines()) == 1 and f"no message with id {decoy}" in err, err
        with pytest.raises(BlockingIOError):
            stranger.accept()


def test_unreachable_broker_is_one_line_and_exit_1() -> None:
    port = free_port()
    result = rmqpy("topic", "list", "--namesrv", f"127.0.0.1:{port}")
    assert result.returncode == 1
    err = result.stderr.decode().strip()
    assert len(err.splitlines()) == 1
    assert f"127.0.0.1:{port}" in err and "Traceback" not in err


def test_usage_errors_exit_2_with_one_line() -> None:
    for args in (
        ["frobnicate"],
        ["topic"],
        ["consume"],
        ["send", "T", "--property", "x"],
        ["send", "T", "x", "--delay-level", "99"],  # was taken as level 18 (2 h)
        ["send", "T", "x", "--delay-level", "-1"],
    ):
        result = rmqpy(*args, namesrv=None)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.decode().strip().splitlines()) == 1, result.stderr


# --- store dump ------------------------------------------------------------------------------
def spec_commitlog(count: int) -> bytes:
    out = b""
    for i in range(count):
        out += spec_record(
            body=f"body-{i}".encode(),
            topic="DumpT",
            props={"TAGS": "TagA", "KEYS": f"key-{i}"},
            queue_offset=i,
            phys_offset=len(out),
            store_ts=1_700_000_000_000 + i,
        )
    return out


def test_dump_commitlog_written_from_the_spec(tmp_path: Path) -> None:
    data = spec_commitlog(3)
    path = tmp_path / "00000000000000000000"
    path.write_bytes(data + spec_blank(64) + b"\0" * 56)
    rows = json_lines(ok(rmqpy("store", "dump", "commitlog", str(path), "--json")))
    assert [r["body"] for r in rows] == ["body-0", "body-1", "body-2"]
    assert [r["queueOffset"] for r in rows] == [0, 1, 2]
    assert rows[1]["keys"] == "key-1"
    assert rows[0]["offsetMsgId"] == "7F00000100002A9F0000000000000000"


def test_dump_shows_a_compressed_body_as_consumers_receive_it(tmp_path: Path) -> None:
    text = "a body a Java producer compresses, being over 4 KiB " * 100
    stored = zlib.compress(text.encode(), 5)
    path = tmp_path / "00000000000000000000"
    path.write_bytes(spec_record(body=stored, topic="DumpT", props={}, sys_flag=1))
    (row,) = json_lines(ok(rmqpy("store", "dump", "commitlog", str(path), "--json")))
    assert row["body"] == text[:80] + "…"
    assert (row["bodyCompressed"], row["bodyLength"], row["sysFlag"]) == (True, len(stored), 1)


def test_dump_of_a_damaged_commitlog_stops_where_the_damage_is(tmp_path: Path) -> None:
    data = bytearray(spec_commitlog(3))
    second = len(spec_commitlog(1))
    third = len(spec_commitlog(2))
    data[third + 90] ^= 0xFF  # a byte of the third record's body: CRC mismatch
    path = tmp_path / "00000000000000004096"
    path.write_bytes(bytes(data))
    result = rmqpy("store", "dump", "commitlog", str(path))
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 2 and "commitlogOffset=4096" in lines[0]
    assert f"commitlogOffset={4096 + second}" in lines[1]
    err = result.stderr.decode()
    assert f"stopped at byte {third}" in err and "CRC" in err


def test_dump_consume_queue_and_index(tmp_path: Path) -> None:
    cq = tmp_path / "00000000000000000040"  # starts at entry 2
    cq.write_bytes(spec_cq_entry(100, 50, 2598919) + spec_cq_entry(150, 60, 0) + b"\0" * 40)
    rows = json_lines(ok(rmqpy("store", "dump", "consumequeue", str(cq), "--json")))
    assert [(r["index"], r["commitlogOffset"], r["size"], r["tagsCode"]) for r in rows] == [
        (2, 100, 50, 2598919),
        (3, 150, 60, 0),
    ]
    torn = tmp_path / "torn"
    torn.write_bytes(spec_cq_entry(100, 50, 0) + spec_cq_entry(-5, 10, 0))
    result = rmqpy("store", "dump", "consumequeue", str(torn))
    assert result.returncode == 1 and "stopped at byte 20" in result.stderr.decode()

    slots, entries = 8, 4
    header = struct.pack(">qqqqii", 1000, 2000, 0, 300, 2, 3)
    table = struct.pack(">8i", 0, 1, 0, 0, 2, 0, 0, 0)
    body = b"\0" * 20 + struct.pack(">iqii", 77, 0, 0, 0) + struct.pack(">iqii", 88, 300, 1, 0)
    index = tmp_path / "20260101000000000"
    index.write_bytes(header + table + body + b"\0" * 20)
    rows = json_lines(
        ok(rmqpy("store", "dump", "index", str(index), "--slots", str(slots), "--json"))
    )
    assert rows[0]["indexCount"] == 3 and rows[0]["capacity"] == entries
    assert [(r["keyHash"], r["commitlogOffset"]) for r in rows[1:]] == [(77, 0), (88, 300)]
    wrong = rmqpy("store", "dump", "index", str(index), "--slots", "7")
    assert wrong.returncode == 1 and "--slots" in wrong.stderr.decode()


def test_dump_reads_files_written_by_java_rocketmq_and_rocketmq_rust() -> None:
    expected = json.loads(
        (FIXTURES / "mxsm-rocketmq-rust-v0.9.0/expected-records.json").read_text()
    )
    rust = FIXTURES / "mxsm-rocketmq-rust-v0.9.0/local-file/commitlog/00000000000000000000"
    rows = json_lines(ok(rmqpy("store", "dump", "commitlog", str(rust), "--json")))
    bodies = [r["body"] for r in rows if r["topic"] == expected["topic"]]
    assert bodies == expected["message_bodies"]
    for java in sorted(FIXTURES.glob("*/*/commitlog/00000000000000000000")):
        if "rust" in str(java):
            continue
        result = rmqpy("store", "dump", "commitlog", str(java))
        assert result.returncode == 0, (java, result.stderr)
        assert result.stdout.count(b"topic=") > 0, java


def test_dump_tells_a_files_kind_from_where_it_lies_in_a_store(tmp_path: Path) -> None:
    java = FIXTURES / "dyzzwj-rocketmq-4.5.1/unit_test_store/commitlog/00000000000000000000"
    assert json_lines(ok(rmqpy("store", "dump", str(java), "--json")))[0]["topic"]
    cq = tmp_path / "store/consumequeue/DumpT/3/00000000000000000000"
    cq.parent.mkdir(parents=True)
    cq.write_bytes(spec_cq_entry(100, 50, 2598919) + b"\0" * 20)
    rows = json_lines(ok(rmqpy("store", "dump", str(cq), "--json")))
    assert [(r["commitlogOffset"], r["tagsCode"]) for r in rows] == [(100, 2598919)]
    loose = tmp_path / "00000000000000000000"
    loose.write_bytes(cq.read_bytes())
    result = rmqpy("store", "dump", str(loose))
    assert result.returncode == 2
    assert result.stderr.decode().count("\n") == 1 and "name its kind" in result.stderr.decode()


@contextlib.contextmanager
def following(ns: str, *args: str, stop: int = signal.SIGINT) -> Iterator[Any]:
    """`rmqpy consume ARGS --follow --json` running; `stop` must end it cleanly."""
    env = {**os.environ, "RMQPY_NAMESRV": ns}
    with subprocess.Popen(
        [RMQPY, "consume", *args, "--follow", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as follower:
        try:
            yield follower
        finally:
            follower.send_signal(stop)
            # Ctrl-C: the shell's 130, and what was printed; SIGTERM: a service's clean stop.
            assert follower.wait(15) == (130 if stop == signal.SIGINT else 0)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_follow_prints_new_messages_until_interrupted(ns: str, topic: str, stop: int) -> None:
    """Ctrl-C, or SIGTERM as `docker stop` and systemd send, ends a follow cleanly with its
    offsets committed (they are committed every 5 s otherwise; a SIGTERM used to kill it at
    once, and the next run was given again what this one had printed)."""
    ok(rmqpy("topic", "create", topic, "--queues", "1", namesrv=ns))
    with following(ns, topic, "--group", "follower", stop=stop) as follower:
        time.sleep(1.0)  # let it find the (empty) queue first
        ok(rmqpy("send", topic, "live", namesrv=ns))
        assert json.loads(follower.stdout.readline())["body"] == "live"
    [row] = json.loads(ok(rmqpy("offsets", "follower", topic, "--json", namesrv=ns)))
    assert row["committed"] == 1  # committed on the way out


def test_follow_waits_for_a_topic_that_does_not_exist_yet(ns: str, topic: str) -> None:
    """A consumer started before its producer (as in the compose file) waits for the topic
    its first send creates, saying so once, instead of failing."""
    with following(ns, topic, "--from", "first") as follower:
        waiting = follower.stderr.readline().decode().strip()
        assert waiting == f"rmqpy consume: waiting for topic {topic} to be created"
        ok(rmqpy("send", topic, "first one", namesrv=ns))
        assert json.loads(follower.stdout.readline())["body"] == "first one"


def test_ctrl_c_stops_a_send_saying_how_many_were_sent(ns: str, topic: str) -> None:
    """`seq 200000 | rmqpy send T` stopped by Ctrl-C: exit 130 and one line saying how many
    were sent (it exited 0 without a word, after 7,187 of 200,000)."""
    ok(rmqpy("topic", "create", topic, "--queues", "2", namesrv=ns))
    env = {**os.environ, "RMQPY_NAMESRV": ns}
    with subprocess.Popen(
        [RMQPY, "send", topic], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, bufsize=0,  # nothing left to flush into a closed pipe
    ) as sender:  # fmt: skip
        assert sender.stdin is not None and sender.stdout is not None
        feeder = threading.Thread(target=feed, args=(sender.stdin, 200_000), daemon=True)
        feeder.start()
        printed = [sender.stdout.readline() for _ in range(50)]
        assert all(b"SEND_OK" in line for line in printed)
        sender.send_signal(signal.SIGINT)
        rest = sender.stdout.read().count(b"SEND_OK")
        assert sender.wait(30) == 130
        assert sender.stderr is not None
        said = sender.stderr.read().decode().strip()
    assert said == f"rmqpy send: interrupted, {50 + rest:,} messages sent"


def feed(pipe: Any, lines: int) -> None:
    with contextlib.suppress(OSError):  # the sender stopped reading
        for i in range(lines):
            pipe.write(b"line %d\n" % i)
        pipe.close()


def test_version_global_options_first_and_the_settings_in_help(ns: str) -> None:
    assert re.fullmatch(r"rmqpy \d+\.\d+\.\d+\S*\n", ok(rmqpy("--version")))
    # The common options before the command, as in `git -C` (they were refused there).
    listed = json.loads(ok(rmqpy("--namesrv", ns, "--json", "topic", "list", namesrv=None)))
    assert isinstance(listed, list)
    helped = ok(rmqpy("broker", "--help"))
    assert "--key value" in helped and "flushDiskType" in helped and "bindAddress" in helped
    settings = json.loads(ok(rmqpy("config", "--json", "--listenPort", "1234")))
    assert settings["listenPort"] == "1234" and settings["flushDiskType"] == "ASYNC_FLUSH"


def test_an_operator_inspects_the_cluster_and_moves_a_group_back(ns: str, topic: str) -> None:
    """mqadmin's everyday commands: clusterList, topicStatus, consumerProgress, groups,
    resetOffsetByTime, updateSubGroup/deleteSubGroup, getBrokerConfig."""
    [broker] = json.loads(ok(rmqpy("cluster", "list", "--json", namesrv=ns)))
    assert (broker["cluster"], broker["broker"], broker["id"]) == ("DefaultCluster", "broker-a", 0)
    assert "broker-a" in ok(rmqpy("cluster", "list", namesrv=ns))
    ok(rmqpy("topic", "create", topic, "--queues", "1", namesrv=ns))
    ok(rmqpy("send", topic, namesrv=ns, stdin=b"a\nb\nc\n"))
    status = json.loads(ok(rmqpy("topic", "status", topic, "--json", namesrv=ns)))
    assert [(q["queueId"], q["maxOffset"]) for q in status] == [(0, 3)]
    assert re.search(
        r"broker-a\s+0\s+0\s+3\s+3\s+\d{4}-\d\d-\d\d ",
        ok(rmqpy("topic", "status", topic, namesrv=ns)),
    )
    group = f"{topic}-ops"
    assert len(ok(rmqpy("consume", topic, "--group", group, namesrv=ns)).splitlines()) == 3
    assert json.loads(ok(rmqpy("topic", "consumers", topic, "--json", namesrv=ns))) == [
        {"group": group}
    ]
    progress = json.loads(ok(rmqpy("group", "progress", group, "--json", namesrv=ns)))
    assert (progress["lag"], progress["queues"][0]["consumerOffset"]) == (0, 3)
    listed = {
        row["group"]: row for row in json.loads(ok(rmqpy("group", "list", "--json", namesrv=ns)))
    }
    assert (listed[group]["lag"], listed[group]["online"]) == (0, 0)
    reset = json.loads(
        ok(rmqpy("group", "reset", group, topic, "--to", "begin", "--json", namesrv=ns))
    )
    assert reset == [{"broker": "broker-a", "queue": 0, "offset": 0}]
    assert "lag 3" in ok(rmqpy("group", "progress", group, namesrv=ns)).replace("total lag", "lag")
    offline = rmqpy("group", "members", group, namesrv=ns)
    assert offline.returncode == 1 and "no consumer of group" in offline.stderr.decode()
    ok(rmqpy("group", "create", f"{group}-2", "--retry-max-times", "2", namesrv=ns))
    ok(rmqpy("group", "delete", f"{group}-2", namesrv=ns))
    gone = rmqpy("group", "delete", f"{group}-2", namesrv=ns)
    assert gone.returncode == 1 and "does not exist" in gone.stderr.decode()
    [config] = json.loads(ok(rmqpy("cluster", "config", "--json", namesrv=ns)))
    assert config["settings"]["brokerName"] == "broker-a"
    at = json_lines(
        ok(rmqpy("query", "offset", topic, "0", "1", "--count", "2", "--json", namesrv=ns))
    )
    assert [(m["queueOffset"], m["body"]) for m in at] == [(1, "b"), (2, "c")]
    nothing = rmqpy("query", "offset", topic, "0", "9", namesrv=ns)
    assert nothing.returncode == 1 and "no message at offset 9" in nothing.stderr.decode()
    assert rmqpy("group", "resend-dlq", group, namesrv=ns).returncode == 2  # which ones?
    assert "set brokerPermission=6" in ok(rmqpy("cluster", "set", "brokerPermission=6", namesrv=ns))
    live_only = rmqpy("cluster", "set", "flushDiskType=SYNC_FLUSH", namesrv=ns)
    assert live_only.returncode == 1 and "flushDiskType cannot change" in live_only.stderr.decode()
