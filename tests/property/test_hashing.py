"""The vectorised Java hashCode agrees with the one-string version on any text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.java_hash import java_string_hash, java_string_hashes


@given(st.lists(st.text(max_size=80), max_size=40))
def test_batch_hash_matches_scalar(keys: list[str]) -> None:
    assert [int(h) for h in java_string_hashes(keys)] == [java_string_hash(k) for k in keys]
