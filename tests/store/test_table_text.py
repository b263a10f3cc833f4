"""topics.json and subscriptionGroup.json are written from cached entry texts: the bytes must
be exactly what encoding the whole table gives, through any sequence of changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmqpy.broker.topics import TopicConfig
from rmqpy.store.config_files import TableText, dump_fastjson

names = st.text(min_size=1, max_size=12)
configs = st.builds(
    TopicConfig,
    topicName=names,
    readQueueNums=st.integers(0, 64),
    perm=st.sampled_from([2, 4, 6]),
    order=st.booleans(),
)
changes = st.lists(st.tuples(names, st.one_of(st.none(), configs)), max_size=30)


@given(st.lists(changes, min_size=1, max_size=6), st.integers(0, 10**6), st.booleans())
def test_rendered_text_is_what_encoding_the_whole_table_gives(
    rounds: list[list[tuple[str, TopicConfig | None]]], counter: int, with_head: bool
) -> None:
    text = TableText("topicConfigTable", TopicConfig.to_json)
    table: dict[str, TopicConfig] = {}
    for changed in rounds:
        for name, config in changed:  # None deletes; a config adds or replaces
            if config is None:
                table.pop(name, None)
            else:
                table[name] = config
        head = {"dataVersion": {"counter": counter, "stateVersion": 0}} if with_head else {}
        whole = {**head, "topicConfigTable": {n: c.to_json() for n, c in sorted(table.items())}}
        assert text.render(head, table) == dump_fastjson(whole)
        counter += 1
