"""Records into Arrow columns for Spark: the compiled twins (`pipeline._commitlog_scan.scan`,
`pipeline._arrow_records.decode_batch`) against their references, over record streams
built from the spec (v1 and v2 magic, IPv4 and IPv6 hosts, properties as other writers leave
them, text that is no UTF-8) and then damaged at random. The twin declines what it does not
take (an IPv6 host, lengths that do not add up), and the reference decodes those: either
way the batch and the damage reported are the reference's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rmqpy.pipeline.arrow_records import decode_records, reference_decode_batch, reference_rows
from rmqpy.pipeline.commitlog_scan import reference_scan, scan
from tests.property.test_client_decode_twins import bodies, records
from tests.spec_bytes import spec_blank, spec_record

compiled = pytest.importorskip(
    "rmqpy.pipeline._arrow_records", reason="the compiled core is not built"
)
walker = pytest.importorskip(
    "rmqpy.pipeline._commitlog_scan", reason="the compiled core is not built"
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(bodies(), st.lists(records(), max_size=8).map(b"".join)))
def test_both_decode_every_record_stream_alike(body: bytes) -> None:
    """Damage is reported, never read past: a length pointing out of its record ends the
    batch there, with the record's position."""
    positions = scan(body).positions
    batch, damage = decode_records(body, positions)
    expected, expected_damage = reference_decode_batch(body, positions)
    taken = compiled.decode_batch(body, positions)
    event("compiled" if taken is not None else "declined: the reference decodes it")
    assert batch.equals(expected)
    assert damage == expected_damage
    if taken is not None:
        assert taken.equals(expected) and damage is None


def test_properties_hosts_and_ids_come_out_as_the_plain_decoder_reads_them() -> None:
    """The last KEYS and TAGS win, short or separator-less parts are no pair, the producer's
    id is UNIQ_KEY, else the legacy name, else the offset id; hosts print as ip:port."""
    body = b"".join(
        [
            spec_record(body=b"a", topic="T", props="TAGS\x01a\x02KEYS\x01k1\x02TAGS\x01b\x02x"),
            spec_record(body=b"", topic="Tópico", props={"UNIQ_CLIENT_MESSAGE_ID_KEYIDX": "L"},
                        phys_offset=1 << 40, born_ip=b"\x0a\x00\x00\x07", born_port=65535),
            spec_record(body=b"c" * 300, topic="T", props="", store_port=4000),
        ]
    )  # fmt: skip
    positions = scan(body).positions
    batch = compiled.decode_batch(body, positions)
    assert batch is not None
    assert batch.equals(reference_decode_batch(body, positions)[0])
    assert batch.to_pylist()[1:] == reference_rows(body, positions)[1:]
    assert batch["properties"].to_pylist()[0] == [("TAGS", "a"), ("KEYS", "k1"), ("TAGS", "b")]
    assert batch["tags"].to_pylist() == ["b", None, None]
    assert batch["born_host"].to_pylist()[1] == "10.0.0.7:65535"
    assert batch["msg_id"].to_pylist()[1] == "L"


def test_an_ipv6_host_or_a_damaged_record_is_left_to_the_reference() -> None:
    v6 = spec_record(body=b"x", topic="T", props={}, store_ip=bytes(15) + b"\x01")
    assert compiled.decode_batch(v6, np.array([0])) is None
    record = bytearray(spec_record(body=b"xyz", topic="T", props={"TAGS": "t"}))
    at = len(record) - len(b"TAGS\x01t\x02") - 2
    record[at : at + 2] = b"\x00\x01"  # a properties length short of the record's end
    positions = scan(bytes(record)).positions
    assert compiled.decode_batch(bytes(record), positions) is None
    batch, damage = decode_records(bytes(record), positions)
    assert batch.num_rows == 0 and damage is not None


def test_a_length_pointing_past_the_buffer_is_damage_not_a_crash() -> None:
    """A record whose head passes the walk but whose body length points far past the
    buffer: the records before it are decoded, and the damage names it."""
    good = spec_record(body=b"ok", topic="T", props={"TAGS": "t"})
    bad = bytearray(spec_record(body=b"xyz", topic="T", props={"TAGS": "t"}))
    bad[84:88] = (10**6).to_bytes(4, "big")  # BODYLEN of a record with IPv4 hosts
    body = good + bytes(bad)
    positions = scan(body).positions
    assert len(positions) == 2
    batch, damage = decode_records(body, positions)
    assert batch.num_rows == 1 and batch["body"].to_pylist() == [b"ok"]
    assert damage is not None and damage.position == len(good)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(bodies(), st.lists(records(), max_size=8).map(b"".join)),
    st.integers(0, 40),
    st.one_of(st.none(), st.integers(0, 2000)),
)
def test_both_walk_every_record_stream_alike(body: bytes, start: int, end: int | None) -> None:
    """The walk from record to record, from any start, up to any end: the same starts and
    the same damage, whether the twin walked it or declined it to the reference."""
    for filler in (b"", bytes(16), spec_blank(64)):
        data = body + filler
        ours, theirs = scan(data, start, end), reference_scan(data, start, end)
        assert ours.positions.tolist() == theirs.positions.tolist()
        assert ours.damage == theirs.damage
        walked = walker.scan(data, start, len(data) if end is None else min(end, len(data)))
        event("walked" if walked is not None else "declined: the reference walks it")
