"""The compiled hold of parked pulls (`broker._long_polling`) against the reference in
`broker.long_polling`: random pulls parked (some finding their queue moved on meanwhile) and
random dispatch rounds' arrivals (tag codes matching or not, queues moved on or started over)
wake the same pulls, in the same order, and leave the same pulls parked."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.broker import long_polling
from rmqpy.broker.long_polling import (
    ParkedPull,
    PullRequestHoldService,
    reference_on_arrivals,
    reference_park,
)
from rmqpy.store.dispatch import Arrival

compiled = pytest.importorskip(
    "rmqpy.broker._long_polling", reason="the compiled core is not built"
)

QUEUES = [("TopicA", 0), ("TopicA", 1), ("TopicB", 0)]
CODES = st.one_of(st.none(), st.frozensets(st.integers(1, 4), max_size=3))
PARK = st.tuples(
    st.just("park"), st.sampled_from(QUEUES), st.integers(0, 6), CODES, st.integers(0, 7)
)
ARRIVALS = st.tuples(
    st.just("arrivals"),
    st.lists(
        st.tuples(st.sampled_from(QUEUES), st.integers(0, 7), st.frozensets(st.integers(1, 4))),
        max_size=4,
    ),
)


class Side:
    """A hold, its queues' ends, and the pulls it woke, by label."""

    def __init__(self, make_pull: Any) -> None:
        self.make_pull = make_pull
        self.ends: dict[tuple[str, int], int] = {}
        self.woken: list[list[Any]] = []
        self.hold = PullRequestHoldService(
            lambda topic, queue_id: self.ends.get((topic, queue_id), 0),
            lambda pulls: self.woken.append([p.ctx for p in pulls]),
        )

    def parked(self) -> dict[tuple[str, int], list[Any]]:
        return {key: [p.ctx for p in pulls] for key, pulls in self.hold._parked.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(PARK, ARRIVALS), max_size=30))
def test_both_park_and_wake_the_same_pulls(steps: list[tuple[Any, ...]]) -> None:
    ours, theirs = Side(compiled.ParkedPull), Side(ParkedPull)
    for label, step in enumerate(steps):
        if step[0] == "park":
            _, (topic, queue_id), offset, codes, end = step
            for side, park in ((ours, compiled.park), (theirs, reference_park)):
                side.ends[(topic, queue_id)] = end  # the queue's end as the pull parks
                sub = SimpleNamespace(codes=codes)
                park(side.hold, side.make_pull(label, topic, queue_id, offset, sub, 0.0, None))
        else:
            arrivals = [
                Arrival(topic, queue_id, next_offset, codes, 0)
                for (topic, queue_id), next_offset, codes in step[1]
            ]
            compiled.on_arrivals(ours.hold, arrivals)
            reference_on_arrivals(theirs.hold, arrivals)
        assert ours.woken == theirs.woken
        assert ours.parked() == theirs.parked()


def test_the_hold_uses_the_compiled_twin() -> None:
    if long_polling._compiled is None:
        pytest.skip("RMQPY_PURE_PYTHON=1: the reference is in use")
    hold = PullRequestHoldService(lambda _t, _q: 0, lambda _p: None)
    assert hold.park.__func__ is compiled.park  # type: ignore[attr-defined]
    assert hold.on_arrivals.__func__ is compiled.on_arrivals  # type: ignore[attr-defined]
    pull = compiled.ParkedPull(1, "TopicA", 0, 5, SimpleNamespace(codes=None), 0.0, None)
    assert (pull.topic, pull.queue_id, pull.offset) == ("TopicA", 0, 5)
    assert repr(pull).startswith("ParkedPull(ctx=1, topic='TopicA'")
