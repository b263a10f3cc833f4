"""The load generator sends what stock producers send: every message with its own UNIQ_KEY
(which the broker indexes), so the benches pay for the index as a real workload does."""

from __future__ import annotations

import json
import re
import time
from array import array

import pytest

from rmqpy.bench.load import Meter, send_frames
from rmqpy.bench.stats import Histogram
from rmqpy.remoting.batch_body import decode_batch_body
from rmqpy.remoting.frame import FrameDecoder
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
