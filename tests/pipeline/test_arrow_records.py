"""Bodies reach Spark as consumers receive them: a body the record's sysFlag marks
compressed comes out inflated (the stored flags stay in `sys_flag`), and one that does not
inflate is reported where it is, the records before it kept."""

from __future__ import annotations

import zlib

from rmqpy.pipeline.arrow_records import decode_batch, reference_rows
from rmqpy.pipeline.commitlog_scan import scan
from rmqpy.store.layout import SysFlag
from tests.spec_bytes import spec_record

BIG = bytes(range(256)) * 40  # 10 KiB: a Java producer compresses bodies over 4 KiB


def records(*bodies: tuple[bytes, int]) -> bytes:
    return b"".join(
        spec_record(body=body, topic="T", props={"TAGS": "t"}, sys_flag=flags, queue_offset=i)
        for i, (body, flags) in enumerate(bodies)
    )


def test_compressed_bodies_come_out_inflated_and_their_flags_as_stored() -> None:
    buf = records((b"plain", 0), (zlib.compress(BIG, 5), SysFlag.COMPRESSED), (b"", 0))
    positions = scan(buf).positions
    batch, damage = decode_batch(buf, positions)
    assert damage is None
    assert batch["body"].to_pylist() == [b"plain", BIG, b""]
    assert batch["sys_flag"].to_pylist() == [0, SysFlag.COMPRESSED, 0]
    assert batch.to_pylist() == reference_rows(buf, positions)


def test_a_compressed_body_that_does_not_inflate_ends_the_batch_before_its_record() -> None:
    buf = records(
        (zlib.compress(b"first", 5), SysFlag.COMPRESSED),
        (b"not zlib at all", SysFlag.COMPRESSED),
        (b"after", 0),
    )
    positions = scan(buf).positions
    batch, damage = decode_batch(buf, positions)
    assert batch["body"].to_pylist() == [b"first"]
    assert damage is not None and damage.position == int(positions[1])
    assert "does not inflate" in damage.reason
