"""A Hypothesis state machine drives put / batch / get / query / flush / delete a topic /
expire old files / crash-and-recover, and reads of sends and of pulls the broker's way (pulls
that wait for messages too), against a plain Python model of what the store must hold."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rmqpy.broker.clients import ClientManager
from rmqpy.broker.context import RequestContext
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.long_polling import ParkedPull, PullRequestHoldService
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.broker.processors.pull import PullProcessor
from rmqpy.broker.processors.send import SendIdentity, SendProcessor
from rmqpy.broker.topics import TopicConfig, TopicConfigManager
from rmqpy.client.message import decode_messages
from rmqpy.config.store_config import FlushDiskType
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import FrameDecoder
from rmqpy.remoting.headers.pull import FLAG_SUBSCRIPTION, FLAG_SUSPEND
from rmqpy.remoting.headers.send import SendMessageRequestHeader
from rmqpy.store.layout import GetMessageStatus
from rmqpy.store.message import Message, decode_record, tags_code
from rmqpy.store.message_id import decode_offset_msg_id
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config

QUEUES = [("TopicA", 0), ("TopicA", 1), ("TopicB", 0)]
TAGS = ["red", "green"]

Item = tuple[bytes, str, str, int]  # body, key, tag, commitlog offset

queue_st = st.sampled_from(QUEUES)
body_st = st.binary(min_size=0, max_size=3000)
key_st = st.sampled_from(["k1", "k2", "k3", "k4"])
SEND_KEYS = SendMessageRequestHeader.ext_keys(v2=True)
LOOP = asyncio.new_event_loop()  # the client manager's (nothing runs on it here)


class StillOpen:
    """The `closed` future of a connection whose client is still there."""

    @staticmethod
    def done() -> bool:
        return False


class ReadConnection:
    """What the send and pull processors use of the connection a read came from: its peer,
    whether it closed, and the answers they write, whole frames (decoded here) or commands."""

    peer = "127.0.0.1:50001"
    closed = StillOpen()

    def __init__(self) -> None:
        self.answers: list[RemotingCommand] = []

    def answer_frames(self, frames: list[bytes], handled: int) -> None:
        decoder = FrameDecoder()
        decoder.receive_data(b"".join(frames))
        while (answer := decoder.next_command()) is not None:
            self.answers.append(answer)

    def respond_all(self, pairs: list[tuple[RemotingCommand, RemotingCommand]]) -> None:
        self.answers += [answer for _request, answer in pairs]


@dataclass
class Waiting:
    """A pull parked at its queue's end (long polling), on a connection of its own."""

    conn: ReadConnection
    where: tuple[str, int]
    offset: int
    tag: str | None
    restarted: bool = False  # its topic was deleted since: its queue starts over


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="rmqpy-machine-"))
        self.mode = FlushDiskType.ASYNC_FLUSH
        self.store = self._open()
        # (topic, queue) -> [(body, key, tag, commitlog offset)] in queue-offset order
        self.model: dict[tuple[str, int], list[Item]] = {q: [] for q in QUEUES}
        # (topic, key) -> commitlog offsets of the messages put with it (the index keeps a
        # deleted topic's keys; expiry takes away those below the commitlog's minimum)
        self.keyed: dict[tuple[str, str], list[int]] = {}

    def _open(self) -> MessageStore:
        store = MessageStore(
            small_config(
                self.dir,
                mapped_file_size_commitlog=8192,
                flush_disk_type=self.mode,
                file_reserved_time_hours=0.0,  # every file but the last is due when asked
            )
        )
        store.start()
        # The broker's send path over this store: the compiled send lane where it is built.
        topics = TopicConfigManager(str(self.dir / "broker"), "DefaultCluster", "broker-a", 8)
        topics.table["TopicA"] = TopicConfig("TopicA", 2, 2)
        topics.table["TopicB"] = TopicConfig("TopicB", 1, 1)
        groups = SubscriptionGroupManager(str(self.dir / "broker"), True, 16)
        identity = SendIdentity("DefaultCluster", "broker-a", PERM_READ | PERM_WRITE, True)
        self.sender = SendProcessor(store, topics, groups, identity)
        # ... and its pull path: the compiled pull lane where it is built; a pull that would
        # read the disk is run as the pull threads run it. Parked pulls are woken by the
        # dispatch thread (or by `park` itself) into `woken`; a restart loses them, as their
        # connections would be.
        self.woken: list[ParkedPull] = []
        self.waiting: list[Waiting] = []
        hold = PullRequestHoldService(store.get_max_offset_in_queue, self.woken.extend)
        store.register_arrival_listener(hold.on_arrivals)
        self.puller = PullProcessor(
            store, topics, groups, ClientManager(LOOP, 120_000),
            ConsumerOffsetManager(str(self.dir / "broker")), hold,
            PERM_READ | PERM_WRITE, long_polling_enable=True, short_polling_ms=1000,
            is_master=True,
        )  # fmt: skip
        return store

    def _message(self, where: tuple[str, int], body: bytes, key: str, tag: str) -> Message:
        return Message(where[0], body, where[1], {"KEYS": key, "TAGS": tag})

    @rule(where=queue_st, body=body_st, key=key_st, tag=st.sampled_from(TAGS))
    def put(self, where: tuple[str, int], body: bytes, key: str, tag: str) -> None:
        result = self.store.put_message(self._message(where, body, key, tag))
        assert result.ok, result
        assert result.queue_offset == len(self.model[where])
        self._add(where, [(body, key, tag)], result.record_offsets)

    @rule(
        where=queue_st,
        items=st.lists(st.tuples(body_st, key_st, st.sampled_from(TAGS)), min_size=1, max_size=6),
    )
    def put_batch(self, where: tuple[str, int], items: list[tuple[bytes, str, str]]) -> None:
        result = self.store.put_batch([self._message(where, *item) for item in items])
        assert result.ok, result
        assert result.queue_offset == len(self.model[where])
        self._add(where, items, result.record_offsets)

    @rule(
        where=queue_st,
        sends=st.lists(
            st.lists(st.tuples(body_st, key_st, st.sampled_from(TAGS)), min_size=1, max_size=3),
            min_size=1,
            max_size=5,
        ),
        kind=st.sampled_from(list(SerializeType)),
    )
    def send_read(
        self,
        where: tuple[str, int],
        sends: list[list[tuple[bytes, str, str]]],
        kind: SerializeType,
    ) -> None:
        """One read of sends (of one message, or of a batch where more), as a producer
        pipelines them, the broker's way: stored and answered at once where the send lane
        takes them (a run that fits the current file, no flush to wait for), else as the
        send executor runs them."""
        requests = [self._send_request(i, where, items, kind) for i, items in enumerate(sends)]
        conn = ReadConnection()
        answers: list[RemotingCommand | None] = conn.answers  # type: ignore[assignment]
        if not self.sender.send_read(conn, requests, 0.0, None):  # type: ignore[arg-type]
            answers = self.sender([RequestContext(conn, r, None) for r in requests])  # type: ignore[arg-type]
        assert len(answers) == len(requests)
        for i, (answer, items) in enumerate(zip(answers, sends, strict=True)):
            assert answer is not None and answer.code == ResponseCode.SUCCESS, answer
            assert answer.opaque == i
            assert int(answer.ext_fields["queueOffset"]) == len(self.model[where])
            ids = answer.ext_fields["msgId"].split(",")
            assert len(ids) == len(items)
            self._add(where, items, [decode_offset_msg_id(msg_id)[1] for msg_id in ids])

    @staticmethod
    def _send_request(
        opaque: int,
        where: tuple[str, int],
        items: list[tuple[bytes, str, str]],
        kind: SerializeType,
    ) -> RemotingCommand:
        """A send as a Java producer writes it: SEND_MESSAGE_V2 for one message, else
        SEND_BATCH_MESSAGE with each message's keys and tag in its batch item."""
        props = [f"KEYS\x01{key}\x02TAGS\x01{tag}\x02" for _body, key, tag in items]
        code, body, properties = RequestCode.SEND_MESSAGE_V2, items[0][0], props[0]
        if len(items) > 1:
            code, properties = RequestCode.SEND_BATCH_MESSAGE, ""
            body = encode_batch_body(
                [BatchItem(0, body, p) for (body, _key, _tag), p in zip(items, props, strict=True)]
            )
        return RemotingCommand(
            code,
            opaque=opaque,
            ext_fields={
                SEND_KEYS["producer_group"]: "PG",
                SEND_KEYS["topic"]: where[0],
                SEND_KEYS["default_topic"]: "TBW102",
                SEND_KEYS["default_topic_queue_nums"]: "4",
                SEND_KEYS["queue_id"]: str(where[1]),
                SEND_KEYS["sys_flag"]: "0",
                SEND_KEYS["born_timestamp"]: "1700000000000",
                SEND_KEYS["flag"]: "0",
                SEND_KEYS["properties"]: properties,
                SEND_KEYS["reconsume_times"]: "0",
            },
            body=body,
            serialize_type=kind,
        )

    def _add(
        self, where: tuple[str, int], items: list[tuple[bytes, str, str]], phys: list[int]
    ) -> None:
        for (body, key, tag), phy in zip(items, phys, strict=True):
            self.model[where].append((body, key, tag, phy))
            self.keyed.setdefault((where[0], key), []).append(phy)

    def _live(self, items: list[Item]) -> list[Item]:
        """The items expiry has not taken."""
        low = self.store.commitlog.min_offset()
        return [item for item in items if item[3] >= low]

    @rule()
    def expire(self) -> None:
        """Filler sends roll the commitlog on; then every file but the last goes (once
        dispatch is past it), and the consume-queue and index files that only point at
        them."""
        for _ in range(3):
            assert self.store.put_message(Message("Filler", bytes(3000), 0)).ok
        assert self.store.wait_dispatched()
        self.store.expiry.delete_expired_now()
        self.store.expiry.clean()

    @rule(topic=st.sampled_from(["TopicA", "TopicB"]))
    def delete_topic(self, topic: str) -> None:
        """Its queues go and start over at offset 0 when it is sent to again; no restart
        brings them back."""
        self.store.delete_topic(topic)
        for where in self.model:
            if where[0] == topic:
                self.model[where] = []
        for waiting in self.waiting:
            waiting.restarted |= waiting.where[0] == topic

    @rule()
    def flush(self) -> None:
        self.store.commitlog.queue.flush(0)
        self.store.consume_queues.flush(0)

    @rule(mode=st.sampled_from(list(FlushDiskType)))
    def clean_restart(self, mode: FlushDiskType) -> None:
        self.store.shutdown()
        self.mode = mode
        self.store = self._open()
        assert self.store.recovery_report is not None
        assert not self.store.recovery_report.abnormal

    @rule()
    def crash_and_recover(self) -> None:
        self.store.halt()
        self.store = self._open()
        report = self.store.recovery_report
        assert report is not None and report.abnormal and report.damage is None

    @precondition(lambda self: any(self.model.values()))
    @rule(where=queue_st, data=st.data())
    def get_from_offset(self, where: tuple[str, int], data: st.DataObject) -> None:
        expected = self.model[where]
        assert self.store.wait_dispatched()
        offset = data.draw(st.integers(0, len(expected) + 2))
        got = self.store.get_message(where[0], where[1], offset, 8)
        first_live = len(expected) - len(self._live(expected))
        if offset < first_live:
            assert got.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert got.next_begin_offset == first_live
        elif offset < len(expected):
            assert got.status is GetMessageStatus.FOUND
            bodies = [decode_record(m).body for m in got.messages]
            assert bodies == [b for b, _, _, _ in expected[offset : offset + len(bodies)]]
            assert len(bodies) >= 1
        else:
            assert got.status is not GetMessageStatus.FOUND

    def _pull(
        self,
        where: tuple[str, int],
        offset: int,
        tag: str | None,
        kind: SerializeType,
        suspend: bool = False,
    ) -> ReadConnection:
        """One pull, as a consumer sends it (with its subscription, and suspended where
        `suspend`), the broker's way: `pull_read`, then what it hands to the pull threads.
        Its connection holds the answer, or none while it is parked."""
        request = RemotingCommand(
            RequestCode.PULL_MESSAGE,
            opaque=offset,
            ext_fields={
                "consumerGroup": "CG",
                "topic": where[0],
                "queueId": str(where[1]),
                "queueOffset": str(offset),
                "maxMsgNums": "4",
                "sysFlag": str(FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend else 0)),
                "commitOffset": "0",
                "suspendTimeoutMillis": "60000" if suspend else "0",
                "subscription": tag or "*",
                "subVersion": "0",
                "expressionType": "TAG",
            },
            serialize_type=kind,
        )
        conn = ReadConnection()
        cold: list[RequestContext] = []
        self.puller.hand_over = cold.append
        assert self.puller.pull_read(conn, [request], 0.0, None)  # type: ignore[arg-type]
        for ctx in cold:
            answer = self.puller(ctx)
            if answer is not None:
                conn.answers.append(answer)
        assert all(answer.opaque == offset for answer in conn.answers)
        return conn

    @precondition(lambda self: any(self.model.values()))
    @rule(
        where=queue_st,
        data=st.data(),
        tag=st.sampled_from([None, *TAGS]),
        kind=st.sampled_from(list(SerializeType)),
    )
    def pull_from_offset(
        self, where: tuple[str, int], data: st.DataObject, tag: str | None, kind: SerializeType
    ) -> None:
        """A consumer pulls on from an offset to the queue's end: it receives every live
        message its tag takes, in order, each with its queue offset, told where to go on
        when its offset is gone."""
        expected = self.model[where]
        assert self.store.wait_dispatched()
        offset = data.draw(st.integers(0, len(expected) + 2))
        first_live = len(expected) - len(self._live(expected))
        received: list[tuple[int, bytes]] = []
        at = offset
        while at < len(expected):
            answers = self._pull(where, at, tag, kind).answers
            assert len(answers) == 1
            answer = answers[0]
            next_at = int(answer.ext_fields["nextBeginOffset"])
            assert int(answer.ext_fields["maxOffset"]) == len(expected)
            if answer.code == ResponseCode.SUCCESS:
                received += [(m.queue_offset, m.body) for m in decode_messages(answer.body)]
            else:
                assert answer.code in (
                    ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_RETRY_IMMEDIATELY
                ), answer  # fmt: skip
            assert next_at > at, answer
            at = next_at
        wanted = [
            (i, body)
            for i, (body, _key, t, _phy) in enumerate(expected)
            if i >= max(offset, first_live) and tag in (None, t)
        ]
        assert received == wanted

    @rule(
        where=queue_st,
        tag=st.sampled_from([None, *TAGS]),
        kind=st.sampled_from(list(SerializeType)),
    )
    def wait_at_the_end(self, where: tuple[str, int], tag: str | None, kind: SerializeType) -> None:
        """A push consumer that has caught up: its pull at the queue's end is parked until
        a message its tag takes arrives."""
        assert self.store.wait_dispatched()
        conn = self._pull(where, len(self.model[where]), tag, kind, suspend=True)
        assert conn.answers == []
        self.waiting.append(Waiting(conn, where, len(self.model[where]), tag))

    def _due(self, waiting: Waiting) -> bool:
        """Whether a message the parked pull takes has arrived since it parked."""
        news = self.model[waiting.where][waiting.offset :]
        return any(waiting.tag in (None, tag) for _body, _key, tag, _phy in news)

    @precondition(lambda self: self.waiting)
    @rule()
    def answer_woken(self) -> None:
        """Each parked pull a message it takes has arrived for is woken, once, and answered
        with the messages from its offset (as many as it asks for); the others stay parked.
        (A pull whose topic was deleted meanwhile may be woken by any message: its queue
        started over, and it is told where to go on.)"""
        assert self.store.wait_dispatched()
        due = {id(w.conn) for w in self.waiting if self._due(w) and not w.restarted}
        deadline = time.monotonic() + 5.0  # listeners are told just after dispatch moves on
        while not due <= {id(p.ctx.conn) for p in self.woken} and time.monotonic() < deadline:
            time.sleep(0.001)
        taken: list[ParkedPull] = []
        while self.woken:
            taken.append(self.woken.pop(0))
        by_conn = {id(w.conn): w for w in self.waiting}
        woken = [by_conn[id(p.ctx.conn)] for p in taken]
        assert len({id(w.conn) for w in woken}) == len(woken)  # each once
        assert due <= {id(w.conn) for w in woken}
        assert all(id(w.conn) in due or w.restarted for w in woken)
        self.waiting = [w for w in self.waiting if w not in woken]
        for pull in self.puller.resume(taken, time.monotonic()):
            answer = self.puller.answer(pull.ctx, pull.header)
            if answer is not None:
                pull.ctx.conn.respond_all([(pull.ctx.request, answer)])
        for w in woken:
            assert len(w.conn.answers) == 1
            answer = w.conn.answers[0]
            if w.restarted:
                continue
            expected = self.model[w.where]
            first_live = len(expected) - len(self._live(expected))
            if w.offset < first_live:  # expired since it was woken: told where to go on
                assert answer.code == ResponseCode.PULL_OFFSET_MOVED, answer
                assert int(answer.ext_fields["nextBeginOffset"]) == first_live
                continue
            assert answer.code == ResponseCode.SUCCESS, answer
            wanted = [
                (i, body)
                for i, (body, _key, tag, _phy) in enumerate(expected)
                if i >= w.offset and w.tag in (None, tag)
            ]
            got = [(m.queue_offset, m.body) for m in decode_messages(answer.body)]
            assert got == wanted[: len(got)] and got

    @rule(where=queue_st, tag=st.sampled_from(TAGS))
    def get_by_tag(self, where: tuple[str, int], tag: str) -> None:
        assert self.store.wait_dispatched()
        wanted = [b for b, _, t, _ in self._live(self.model[where]) if t == tag]
        seen: list[bytes] = []
        offset = 0
        while offset < len(self.model[where]):
            got = self.store.get_message(where[0], where[1], offset, 32, {tags_code(tag)})
            seen += [decode_record(m).body for m in got.messages]
            offset = got.next_begin_offset
        assert seen == wanted

    @rule(topic=st.sampled_from(["TopicA", "TopicB"]), key=key_st)
    def query(self, topic: str, key: str) -> None:
        assert self.store.wait_dispatched()
        low = self.store.commitlog.min_offset()
        expected = sum(1 for phy in self.keyed.get((topic, key), []) if phy >= low)
        hits = self.store.query_message(topic, key, 64)
        assert len(hits.messages) == min(expected, 64)

    @invariant()
    def max_offsets_match(self) -> None:
        assert self.store.wait_dispatched()
        for (topic, qid), items in self.model.items():
            assert self.store.get_max_offset_in_queue(topic, qid) == len(items)

    def teardown(self) -> None:
        if self.store.running:
            self.store.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, print_blob=True
)
TestStoreMachine = StoreMachine.TestCase
