"""The vectorised Java hashCode agrees with the one-string version on any text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmqpy.store.java_hash import java_concat_hashes, java_string_hash, java_string_hashes

ascii_text = st.text(st.characters(max_codepoint=127), max_size=120)  # the prefix-sum path
any_text = st.text(max_size=80)  # UTF-16 code units, surrogate pairs included


@given(st.lists(ascii_text | any_text, max_size=40))
def test_batch_hash_matches_scalar(keys: list[str]) -> None:
    assert [int(h) for h in java_string_hashes(keys)] == [java_string_hash(k) for k in keys]


@given(st.lists(ascii_text, max_size=40))
def test_ascii_batch_hash_matches_scalar(keys: list[str]) -> None:
    assert [int(h) for h in java_string_hashes(keys)] == [java_string_hash(k) for k in keys]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["TopicA", "T", "%RETRY%g", "Topic\u00e9"]), ascii_text | any_text
        ),
        max_size=40,
    )
)
def test_prefixed_hash_matches_hash_of_joined_string(pairs: list[tuple[str, str]]) -> None:
    topics = [t for t, _ in pairs]
    keys = [k for _, k in pairs]
    got = java_concat_hashes(topics, keys, joint="#")
    assert [int(h) for h in got] == [java_string_hash(f"{t}#{k}") for t, k in pairs]


def test_a_round_longer_than_one_prefix_pass_matches_too() -> None:
    """Keys joining to more than one pass's 256 Ki characters are hashed in parts."""
    keys = [f"key-{i:06d}-" * 100 for i in range(300)]  # 360,299 characters joined
    assert [int(h) for h in java_string_hashes(keys)] == [java_string_hash(k) for k in keys]
