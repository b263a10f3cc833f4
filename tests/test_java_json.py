"""fastjson's JSON dialect: bare integer keys and object keys read, object-keyed maps written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqpy.config.java_json import ObjectKeyed, dumps, loads, object_key

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_standard_json_reads_back_unchanged(value: Any) -> None:
    assert loads(dumps(value)) == value
    assert loads(json.dumps(value, indent="\t")) == value


def test_what_a_java_broker_writes_is_read() -> None:
    text = (
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":3},'
        '{"brokerName":"b","queueId":1,"topic":"T"}:{"maxOffset":0}},'
        '"list":[{"a":1},{"b":{"c":[2,{"d":3}]}}],"bare":{0:12,-1:7},"s":"{not:a key}"}'
    )
    value = loads(text)
    keys = [object_key(k) for k in value["offsetTable"]]
    assert keys == [{"brokerName": "b", "queueId": q, "topic": "T"} for q in (0, 1)]
    assert value["list"] == [{"a": 1}, {"b": {"c": [2, {"d": 3}]}}]
    assert value["bare"] == {"0": 12, "-1": 7} and value["s"] == "{not:a key}"


def test_an_object_keyed_map_is_written_as_fastjson_writes_it() -> None:
    mq = {"topic": "T", "queueId": 0, "brokerName": "b"}
    text = dumps({"offsetTable": ObjectKeyed.of([(mq, 5)]), "consumeTps": 0.5})
    assert text == '{"consumeTps":0.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}'
    assert loads(text)["offsetTable"] == {
        json.dumps(dict(sorted(mq.items())), separators=(",", ":")): 5
    }


@pytest.mark.parametrize("text", ['{{"a":1:2}', '{"a":' + "[" * 100_000, "{{"])
def test_broken_text_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads(text)
