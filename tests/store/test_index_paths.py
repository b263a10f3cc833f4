"""The index's two ways of adding keys leave the same bytes: one key at a time (small dispatch
rounds, RocketMQ's own `putKey`) and the vectorised pass (big rounds)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.store.index_file import IndexFile

# Few slots, so keys collide and chain; few entries, so files fill up mid-call.
SLOTS, ENTRIES = 5, 12
ROUNDS = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 2**31 - 1),  # key hash
            st.integers(0, 3_000),  # gap to the previous record
            st.integers(-2_000, 50_000),  # store time step, ms (clocks may step back)
        ),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(ROUNDS, st.integers(0, 1_700_000_000_000))
def test_one_key_at_a_time_equals_the_vectorised_pass(
    rounds: list[list[tuple[int, int, int]]], first_stamp: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        few = IndexFile(str(Path(tmp, "few")), SLOTS, ENTRIES, create=True)
        vectorised = IndexFile(str(Path(tmp, "vectorised")), SLOTS, ENTRIES, create=True)
        phy, stamp = 0, first_stamp
        for keys in rounds:
            hashes, phys, stamps = [], [], []
            for key_hash, gap, step in keys:
                phy, stamp = phy + gap, max(stamp + step, 0)
                hashes.append(key_hash)
                phys.append(phy)
                stamps.append(stamp)
            added = few.put_few(hashes, phys, stamps)
            as_arrays = [np.array(column, dtype=np.int64) for column in (hashes, phys, stamps)]
            assert vectorised.put_keys(*as_arrays) == added
        try:
            assert Path(tmp, "few").read_bytes() == Path(tmp, "vectorised").read_bytes()
            assert few.index_count == vectorised.index_count
        finally:
            few.close()
            vectorised.close()
