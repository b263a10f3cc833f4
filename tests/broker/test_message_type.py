"""The message_type label of the stored-message metrics, as RocketMQ 5 names it."""

from __future__ import annotations

import pytest

from rmqpy.broker.metrics import message_type
from rmqpy.store.layout import MessageConst, SysFlag
from rmqpy.store.message import Message


@pytest.mark.parametrize(
    ("properties", "sys_flag", "label"),
    [
        ({MessageConst.TAGS: "a"}, 0, "normal"),
        ({MessageConst.DELAY: "3"}, 0, "delay"),
        ({MessageConst.SHARDING_KEY: "order-7"}, 0, "fifo"),
        ({}, SysFlag.TRANSACTION_PREPARED_TYPE, "transaction"),
        ({"X": f"{MessageConst.DELAY}"}, 0, "normal"),  # the name as a value is not the property
    ],
)
def test_each_kind_of_message_is_labelled(
    properties: dict[str, str], sys_flag: int, label: str
) -> None:
    assert message_type(Message("T", b"x", properties=properties, sys_flag=sys_flag)) == label
