"""The compiled `put_index_keys` (`store._index`) against the reference: the same random
rounds of keys (ASCII, other scripts, characters beyond the BMP that Java hashes as two
UTF-16 units) into index files of a few slots and entries (so buckets chain and files fill),
the same count added and the same file to the byte. And a dispatch round's
`IndexService.build_index` with its compiled usual round (`build_round`) against the one
without, over rounds that fill files, repeat keys indexed before, and reserve blocks."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqpy.store.index_file
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.store.index_file import IndexFile, IndexService, put_index_keys

compiled = pytest.importorskip("rmqpy.store._index", reason="the compiled core is not built")

KEYS = st.one_of(
    st.sampled_from(["AC1100017F0000", "order-1", "", "k", "键", "\U0001f600", "Aa", "BB"]),
    st.text(max_size=6),
)
ROUND = st.lists(st.tuples(st.sampled_from(["T", "TopicA", "主题"]), KEYS), min_size=1, max_size=12)


def index_file(directory: Path, begin: int) -> IndexFile:
    return IndexFile(str(directory / "index"), 5, 24, create=True, end_timestamp=begin)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(ROUND, min_size=1, max_size=4),
    st.sampled_from([0, 1_700_000_000_000]),
    st.integers(0, 2**40),
    st.lists(st.integers(0, 3_000_000), min_size=48, max_size=48),
)
def test_both_add_the_same_keys_to_the_same_bytes(
    rounds: list[list[tuple[str, str]]], begin: int, first_phy: int, gaps_ms: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        files = index_file(Path(a), begin), index_file(Path(b), begin)
        phy, stamp, n = first_phy, 1_700_000_000_000, 0
        for keys in rounds:
            phys, stamps = [], []
            for _ in keys:
                phys.append(phy)
                stamps.append(stamp)
                phy += 100
                stamp += gaps_ms[n % len(gaps_ms)]
                n += 1
            topics, names = [t for t, _ in keys], [k for _, k in keys]
            added = [
                put(f, topics, names, phys, stamps)
                for put, f in zip((put_index_keys, compiled.put_index_keys), files, strict=True)
            ]
            assert added[0] == added[1]
        heads = [
            (f.index_count, f.hash_slot_count, f.begin_timestamp, f.begin_phy_offset,
             f.end_phy_offset, f.end_timestamp)
            for f in files
        ]  # fmt: skip
        assert heads[0] == heads[1]
        data = [Path(f.path).read_bytes() for f in files]
        for f in files:
            f._mm.close()
        assert data[0] == data[1]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(ROUND, st.integers(0, 3)), min_size=1, max_size=8),
    st.booleans(),
)
def test_both_index_a_dispatch_rounds_keys_alike(
    rounds: list[tuple[list[tuple[str, str]], int]], sparse: bool
) -> None:
    """Rounds of keys, each round now and then starting a few records back (keys indexed
    before, as a round after a restart), through index files of 24 entries."""
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
        services = [
            IndexService(d, 5, 24, clock_ms=lambda: next(clock), sparse=sparse) for d in (a, b)
        ]
        phy, stamp = 0, 1_700_000_000_000
        try:
            for keys, back in rounds:
                phy = max(phy - back * 100, 0)
                phys = [phy + 100 * i for i in range(len(keys))]
                stamps = [stamp + 10 * i for i in range(len(keys))]
                phy, stamp = phys[-1] + 100, stamps[-1] + 10
                columns = ([t for t, _ in keys], [k for _, k in keys], phys, stamps)
                services[0].build_index(*columns)
                twin, rmqpy.store.index_file._compiled = rmqpy.store.index_file._compiled, None
                try:
                    services[1].build_index(*columns)  # the reference's round
                finally:
                    rmqpy.store.index_file._compiled = twin
            files = [[Path(f.path).read_bytes() for f in s.files] for s in services]
            assert files[0] == files[1]
            reserved = [[f.blocks.reserved for f in s.files] for s in services]
            assert reserved[0] == reserved[1]
        finally:
            for service in services:
                for f in service.files:
                    f._mm.close()


def test_the_index_uses_the_twin_unless_told_not_to() -> None:
    assert rmqpy.store.index_file._compiled is (None if PURE_PYTHON else compiled)
