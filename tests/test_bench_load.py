"""The load generator sends what stock producers send: every message with its own UNIQ_KEY
(which the broker indexes), so the benches pay for the index as a real workload does."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from array import array

import pytest

from rmqpy.bench.load import Meter, consume, send_frames
from rmqpy.bench.stats import Histogram
from rmqpy.remoting.batch_body import decode_batch_body
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import FrameDecoder, encode_frame
from rmqpy.store.layout import MessageConst
from rmqpy.store.message import decode_properties


def sent_properties(frame: bytes) -> list[dict[str, str]]:
    """The properties of each message in one rendered frame, as the broker decodes them."""
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    cmd = decoder.next_command()
    assert cmd is not None
    if cmd.ext_fields.get("m") == "true":
        return [decode_properties(props) for _, _, props in decode_batch_body(cmd.body)]
    return [decode_properties(cmd.ext_fields["i"])]


def test_every_message_sent_carries_a_unique_uniq_key() -> None:
    single, batch = send_frames("T", 64, 1, [0])[0], send_frames("T", 64, 4, [0])[0]
    uniqs = []
    for opaque, (frame, base) in enumerate([(single, 0), (single, 1), (batch, 2), (batch, 6)]):
        rendered = frame.render(opaque, b"1" * 13, base, b"0" * 16)
        uniqs += [p[MessageConst.UNIQ_KEY] for p in sent_properties(rendered)]
    assert len(uniqs) == 10
    assert len(set(uniqs)) == 10
    assert all(re.fullmatch("[0-9A-F]{32}", u) for u in uniqs)


def test_latencies_of_the_warmup_are_left_out_of_the_totals_but_not_the_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    meter = Meter(warmup_s=0.2)
    meter.msgs, meter.samples, meter.e2e = (
        10,
        array("d", [50.0] * 10),
        array("d", [90.0] * 10),
    )  # start-up's slow ones
    time.sleep(0.25)
    meter.tick()  # a second that ends after the warm-up but began in it: left out
    meter.msgs, meter.samples, meter.e2e = 10, array("d", [1.0] * 10), array("d", [2.0] * 10)
    done = meter.done()
    assert done["msgs"] == 20 and done["requests"] == 10
    assert Histogram.from_json(done["e2e"]).max_ms == 2.0
    first_second = json.loads(capsys.readouterr().out.splitlines()[0])
    assert Histogram.from_json(first_second["e2e"]).max_ms == 90.0  # the live line keeps them


def pulls_in(decoder: FrameDecoder, data: bytes) -> list[RemotingCommand]:
    decoder.receive_data(data)
    pulls = []
    while (cmd := decoder.next_command()) is not None:
        assert cmd.code == RequestCode.PULL_MESSAGE
        pulls.append(cmd)
    return pulls


def test_the_pulls_a_read_of_answers_calls_for_go_out_in_one_write() -> None:
    """One write per read, not per pull: on a small machine the generator's own writes
    take CPU from the broker under test."""
    server = socket.create_server(("127.0.0.1", 0))
    queues = {q: 0 for q in range(8)}
    addr = f"127.0.0.1:{server.getsockname()[1]}"
    consumer = threading.Thread(
        target=lambda: asyncio.run(consume(addr, "T", "G", queues, 32, 5.0, 0, False))
    )
    consumer.start()
    conn, _ = server.accept()
    decoder = FrameDecoder()
    first = pulls_in(decoder, conn.recv(1 << 16))
    assert sorted(int(p.ext_fields["queueId"]) for p in first) == list(range(8))
    conn.sendall(b"".join(encode_frame(p.response(ResponseCode.PULL_NOT_FOUND)) for p in first))
    again = pulls_in(decoder, conn.recv(1 << 16))  # the first read of them has all eight
    assert sorted(int(p.ext_fields["queueId"]) for p in again) == list(range(8))
    assert {p.opaque for p in again}.isdisjoint(p.opaque for p in first)
    conn.close()
    consumer.join(10)
    server.close()
