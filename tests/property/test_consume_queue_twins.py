"""The compiled `encode_entries` (`store._consume_queue`) against the reference: the same
bytes for any columns a dispatch round can hold (offsets and tags as wide as a long, sizes
as an int)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqpy.store.consume_queue
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.store.consume_queue import encode_entries

compiled = pytest.importorskip(
    "rmqpy.store._consume_queue", reason="the compiled core is not built"
)

LONGS = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(LONGS, st.integers(-(2**31), 2**31 - 1), LONGS), max_size=40))
def test_both_encode_the_same_entries(entries: list[tuple[int, int, int]]) -> None:
    phys, sizes, tags = ([e[i] for e in entries] for i in range(3))
    assert compiled.encode_entries(phys, sizes, tags) == encode_entries(phys, sizes, tags)


def test_consume_queues_use_the_twin_unless_told_not_to() -> None:
    expected = encode_entries if PURE_PYTHON else compiled.encode_entries
    assert rmqpy.store.consume_queue.encode is expected
