"""The console's rates and chart series, from samples as the sampler takes them."""

from __future__ import annotations

from typing import Any, cast

from rmqpy.client.admin import Admin
from rmqpy.console.history import History, Sample


def test_rates_are_differences_between_the_last_two_samples() -> None:
    history = History(cast(Admin, None))
    history.samples.extend(
        [
            Sample(100.0, {"Orders": 10}, {"billing": 4}, {"billing": 6}, {"Orders": 4}),
            Sample(102.0, {"Orders": 30}, {"billing": 14}, {"billing": 16}, {"Orders": 14}),
        ]
    )
    assert history.rate_in("Orders") == 10.0  # 20 messages in 2 s
    assert history.rate_out("billing") == 5.0
    assert history.topic_rate_out("Orders") == 5.0
    assert history.rate_in("Gone") == 0.0
    series: dict[str, Any] = history.series()
    assert series["times"] == [102.0]
    assert series["in"] == {"Orders": [10.0]} and series["lag"] == {"billing": [16]}
