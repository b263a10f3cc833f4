"""The compiled `runs_of` and `by_connection` (`broker._context`) against the reference in
`broker.context`: random reads of requests (codes a table has and has not, in any order)
give the same runs with the same contexts, and random answers for several connections
give the same pairs per connection, in order."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.broker.context import RequestContext, reference_by_connection, reference_runs_of
from rmqpy.remoting.command import RemotingCommand

compiled = pytest.importorskip("rmqpy.broker._context", reason="the compiled core is not built")

TABLE: dict[int, Any] = {
    10: ("send", "x"),
    310: ("send", "x"),
    11: ("pull", "y"),
    36: ("back", "x"),
}
CODES = st.sampled_from([10, 310, 320, 11, 36, 999, -1])


def shown(runs: list[tuple[Any, list[Any]]]) -> list[Any]:
    """A run's entry and, for each item, its request and every field of its context."""
    return [
        (
            entry,
            [
                item
                if isinstance(item, RemotingCommand)
                else (type(item), [getattr(item, f.name) for f in fields(RequestContext)])
                for item in run
            ],
        )
        for entry, run in runs
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(CODES, max_size=12), st.floats(0, 1e6, allow_nan=False))
def test_both_make_the_same_runs(codes: list[int], received_s: float) -> None:
    conn: Any = SimpleNamespace(peer="127.0.0.1:1")
    loop: Any = object()
    requests = [RemotingCommand(code, opaque=i) for i, code in enumerate(codes)]
    ours = compiled.runs_of(TABLE, conn, requests, loop, received_s)
    theirs = reference_runs_of(TABLE, conn, requests, loop, received_s)
    assert shown(ours) == shown(theirs)


class Peer:
    """A connection as the grouping sees it: hashed by identity."""

    def __init__(self, peer: str) -> None:
        self.peer = peer


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=12))
def test_both_group_the_same_answers(owners: list[int]) -> None:
    conns = [Peer(f"10.0.0.{n}:1") for n in range(4)]
    items: Any = [
        (
            SimpleNamespace(conn=conns[n], request=RemotingCommand(10, opaque=i)),
            RemotingCommand(0, opaque=i),
        )
        for i, n in enumerate(owners)
    ]
    ours = compiled.by_connection(items)
    theirs = reference_by_connection(items)
    assert list(ours.items()) == list(theirs.items())
