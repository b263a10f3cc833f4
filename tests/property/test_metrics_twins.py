"""The compiled metrics tallies (`broker._metrics`) against the reference in
`broker.metrics`: random puts (topics, message types, body sizes on and around every bucket
bound, stored or not), random answers (codes, held pulls, latencies on and around every
bound) and random pulls' answers make the same tables, bucket for bucket and sum for sum."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.broker.metrics import (
    MESSAGE_SIZE_BUCKETS,
    RPC_LATENCY_BUCKETS,
    BrokerMetrics,
    Histogram,
    reference_tally_latencies,
    reference_tally_pull,
    reference_tally_sizes,
)
from rmqpy.store.layout import MARK_DELAY, MARK_SHARDING_KEY, PutMessageStatus, SysFlag

compiled = pytest.importorskip("rmqpy.broker._metrics", reason="the compiled core is not built")

SIZES = st.one_of(
    st.integers(0, 5 * 1024 * 1024),
    st.sampled_from([int(b) + d for b in MESSAGE_SIZE_BUCKETS for d in (-1, 0, 1)]),
)
MESSAGES = st.builds(
    SimpleNamespace,
    topic=st.sampled_from(["TopicA", "TopicB", "%RETRY%g"]),
    sys_flag=st.sampled_from(
        [0, int(SysFlag.TRANSACTION_PREPARED_TYPE), int(SysFlag.TRANSACTION_COMMIT_TYPE), 1]
    ),
    marks=st.sampled_from([0, MARK_DELAY, MARK_SHARDING_KEY, MARK_DELAY | MARK_SHARDING_KEY]),
    body=SIZES.map(lambda n: memoryview(bytearray(n))),
)
RESULTS = st.builds(
    SimpleNamespace,
    status=st.one_of(st.just(PutMessageStatus.PUT_OK), st.sampled_from(list(PutMessageStatus))),
)
LATENCIES = st.one_of(
    st.floats(0, 100, allow_nan=False),
    st.sampled_from(list(RPC_LATENCY_BUCKETS)),
)


def histograms(table: dict[Any, Histogram]) -> dict[Any, tuple[list[int], float]]:
    return {key: (h.counts, h.total) for key, h in table.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(MESSAGES, min_size=1, max_size=4), RESULTS), max_size=8))
def test_both_tally_the_same_sizes(puts: list[tuple[list[Any], Any]]) -> None:
    groups = [msgs for msgs, _ in puts]
    results = [result for _, result in puts]
    ours: dict[Any, Histogram] = {}
    theirs: dict[Any, Histogram] = {}
    for _ in range(2):  # the second round adds to histograms the first made
        compiled.tally_sizes(ours, groups, results)
        reference_tally_sizes(theirs, groups, results)
    assert histograms(ours) == histograms(theirs)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([10, 11, 310, 320]),
            st.sampled_from([0, 1, 2, 10, 17]),
            st.booleans(),
            LATENCIES,
            st.floats(0, 40, allow_nan=False),
        ),
        max_size=10,
    )
)
def test_both_tally_the_same_latencies(answers: list[tuple[int, int, bool, float, float]]) -> None:
    now = 1000.0
    pairs: Any = [
        (
            SimpleNamespace(
                request=SimpleNamespace(code=code),
                resumed=resumed,
                received_s=now - latency,
                held_s=held if resumed else 0.0,
            ),
            SimpleNamespace(code=answer),
        )
        for code, answer, resumed, latency, held in answers
    ]
    ours: dict[Any, Histogram] = {}
    theirs: dict[Any, Histogram] = {}
    compiled.tally_latencies(ours, pairs, now)
    reference_tally_latencies(theirs, pairs, now)
    assert histograms(ours) == histograms(theirs)


PULLS = st.lists(
    st.tuples(
        st.sampled_from([(11, 0, False), (11, 1, False), (11, 19, True), (10, 0, True)]),
        LATENCIES,
        st.sampled_from(["g1", "g2"]),
        st.sampled_from(["TopicA", "TopicB"]),
        st.integers(0, 3),
        st.integers(0, 1 << 40),
        st.integers(0, 32),
        st.integers(0, 1 << 20),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(PULLS)
def test_both_tally_the_same_pulls(pulls: list[tuple[Any, ...]]) -> None:
    ours, theirs = BrokerMetrics(), BrokerMetrics()
    for pull in pulls:
        compiled.tally_pull(ours, *pull)
        reference_tally_pull(theirs, *pull)
    assert histograms(ours.rpc) == histograms(theirs.rpc)
    assert (ours.pulled, ours.messages_out, ours.bytes_out) == (
        theirs.pulled,
        theirs.messages_out,
        theirs.bytes_out,
    )
    assert len(theirs.pulled) == len({(p[2], p[3], p[4]) for p in pulls})
