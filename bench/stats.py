"""Latency histograms that processes can ship to each other and merge.

A load process keeps its raw round-trip times for one second, then folds them into a
`Histogram`: log-spaced buckets, `STEPS` per doubling (under 2.2 % error), with the exact
count, sum and maximum. Histograms travel as JSON (`to_json`/`from_json`) and add up
(`merge`), so `--procs N` reports true percentiles over all processes, not an average of
theirs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STEPS = 32  # buckets per doubling of the latency
FLOOR_US = 1.0  # everything under 1 µs lands in the first bucket


@dataclass
class Histogram:
    buckets: Counter[int] = field(default_factory=Counter)
    count: int = 0
    sum_ms: float = 0.0
    max_ms: float = 0.0

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Histogram:
        hist = cls()
        hist.add(samples_ms)
        return hist

    def add(self, samples_ms: Sequence[float]) -> None:
        if not samples_ms:
            return
        values = np.asarray(samples_ms, dtype=np.float64)
        micros = np.maximum(values * 1000.0, FLOOR_US)
        keys = np.floor(np.log2(micros) * STEPS).astype(np.int64)  # >= 0: micros >= 1
        counts = np.bincount(keys)  # linear: a sort of a second's samples stalled the loop
        found = np.flatnonzero(counts)
        self.buckets.update(dict(zip(found.tolist(), counts[found].tolist(), strict=True)))
        self.count += len(values)
        self.sum_ms += float(values.sum())
        self.max_ms = max(self.max_ms, float(values.max()))

    def merge(self, other: Histogram) -> None:
        self.buckets.update(other.buckets)
        self.count += other.count
        self.sum_ms += other.sum_ms
        self.max_ms = max(self.max_ms, other.max_ms)

    @classmethod
    def merged(cls, parts: Iterable[Histogram]) -> Histogram:
        total = cls()
        for part in parts:
            total.merge(part)
        return total

    @property
    def mean_ms(self) -> float:
        return self.sum_ms / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """The latency (ms) under which a fraction `q` of the samples fall: the middle of
        the bucket that holds the q-th sample, capped at the true maximum."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(q * self.count))  # the inverted CDF: numpy "inverted_cdf"
        seen = 0
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen >= rank:
                middle_us: float = 2.0 ** ((key + 0.5) / STEPS)
                return min(middle_us / 1000.0, self.max_ms)
        return self.max_ms

    def summary(self) -> dict[str, float]:
        return {
            "avg_ms": round(self.mean_ms, 3),
            "p50_ms": round(self.percentile(0.50), 3),
            "p99_ms": round(self.percentile(0.99), 3),
            "max_ms": round(self.max_ms, 3),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": {str(k): v for k, v in self.buckets.items()},
            "count": self.count,
            "sum_ms": self.sum_ms,
            "max_ms": self.max_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        return cls(
            Counter({int(k): int(v) for k, v in data["buckets"].items()}),
            int(data["count"]),
            float(data["sum_ms"]),
            float(data["max_ms"]),
        )
