"""Encoded properties read without a dict, and messages made from a send's template."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmqpy.store.layout import MessageConst
from rmqpy.store.message import (
    Host,
    Message,
    MessageTemplate,
    decode_properties,
    encode_properties,
    encode_record,
    property_value,
    with_property,
)

TAGS, KEYS, UNIQ = MessageConst.TAGS, MessageConst.KEYS, MessageConst.UNIQ_KEY
NAMES = st.sampled_from([TAGS, KEYS, UNIQ, "WAIT", "CLUSTER", "XTAGS", "TA"])
VALUES = st.text(st.characters(blacklist_characters="\x02", codec="utf-8"), max_size=8)
# Segments as clients and hand-made files have them: duplicates, a missing last separator,
# empty and malformed segments (which the decoder skips).
SEGMENTS = st.one_of(
    st.tuples(NAMES, VALUES).map(lambda nv: f"{nv[0]}\x01{nv[1]}"),
    st.sampled_from(["", "x", "TAGS", "\x01v"]),
)
TEXTS = st.tuples(st.lists(SEGMENTS, max_size=6), st.booleans()).map(
    lambda parts: "\x02".join(parts[0]) + ("\x02" if parts[1] else "")
)


@given(TEXTS, NAMES)
def test_property_value_is_what_decoding_gives(text: str, name: str) -> None:
    assert property_value(text, name) == decode_properties(text).get(name)


@given(TEXTS, NAMES, VALUES)
def test_with_property_sets_one_name_and_keeps_the_rest(text: str, name: str, value: str) -> None:
    assert decode_properties(with_property(text, name, value)) == {
        **decode_properties(text),
        name: value,
    }


@given(st.dictionaries(NAMES, VALUES, max_size=5), st.binary(max_size=64), st.booleans())
def test_a_template_message_encodes_as_a_message_built_from_its_dict(
    props: dict[str, str], body: bytes, v6: bool
) -> None:
    born = Host(bytes(range(16)) if v6 else b"\x0a\x00\x00\x07", 4321)
    built = Message(
        "TplT", body, 3, props, flag=9, born_timestamp=77, born_host=born, reconsume_times=2
    )
    template = MessageTemplate("TplT", 3, born_host=born, reconsume_times=2)
    made = template.message(body, 9, encode_properties(props), 77)
    store_host = Host(b"\x7f\x00\x00\x01", 10911)
    encoded = []
    for msg in (built, made):
        out = bytearray()
        encode_record(out, msg, 5, 1000, 123, store_host)
        encoded.append(bytes(out))
        assert (msg.tags_code, msg.keys, msg.uniq_key) == (
            built.tags_code,
            props.get(KEYS, ""),
            props.get(UNIQ),
        )
    assert encoded[0] == encoded[1]
    assert made.properties == built.properties == props
