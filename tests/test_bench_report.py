"""The arithmetic behind `rmqpy bench` and `make bench`: percentiles that merge across
processes, and ratios taken round by round."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rmqpy.bench.compare import TARGETS, markdown, run_json, set_affinity, split_cpus, summarise
from rmqpy.bench.stats import Histogram

latencies = st.lists(st.floats(min_value=0.001, max_value=5_000.0), min_size=1, max_size=400)


@given(latencies, latencies)
def test_merged_histograms_give_the_percentiles_of_all_samples(
    a: list[float], b: list[float]
) -> None:
    merged = Histogram.merged([Histogram.from_json(Histogram.of(x).to_json()) for x in (a, b)])
    everything = a + b
    assert merged.count == len(everything)
    assert merged.max_ms == max(everything)
    assert abs(merged.mean_ms - float(np.mean(everything))) < 1e-6 * max(1.0, merged.mean_ms)
    for q in (0.5, 0.99):
        exact = float(np.percentile(everything, q * 100, method="inverted_cdf"))
        assert abs(merged.percentile(q) - exact) <= 0.025 * exact + 0.001


def one_round(ours: float, redis: float, echo_p50: float) -> dict[str, dict[str, dict[str, Any]]]:
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for t in TARGETS:
        for case, system in ((t.case, t.ours), (t.peer_case, t.peer)):
            if system is not None:
                figures.setdefault(case, {}).setdefault(system, {})
    for systems in figures.values():
        for system in systems:
            mine = system.startswith("rmqpy")
            systems[system] = {
                "msgs_per_s": ours if mine else redis,
                "p50_ms": 0.2 if mine else echo_p50,
                "p99_ms": 0.4 if mine else echo_p50 * 2,
                "cores": 0.2,
            }
    return figures


def test_ratios_are_taken_within_each_round_then_the_median() -> None:
    rounds = [one_round(100, 50, 0.1), one_round(60, 100, 0.05), one_round(90, 100, 0.2)]
    report = summarise(rounds)
    by_name = {t["target"]: t for t in report["targets"]}
    redis = by_name["async publish vs Redis everysec"]
    assert redis["per_round"] == [2.0, 0.6, 0.9]
    assert redis["ratio"] == 0.9 and redis["met"] is False
    p50 = by_name["latency p50 ASYNC vs Redis everysec (at most)"]
    assert p50["per_round"] == [2.0, 4.0, 1.0]
    assert p50["ratio"] == 2.0 and p50["met"] is False  # lower is better: at most 1.2×
    figures = report["cases"]["sync publish, 64 in flight"]["rmqpy SYNC_FLUSH"]["msgs_per_s"]
    assert figures == {"median": 90, "min": 60, "max": 100}
    # A bound on our own figure: the figure itself, in its unit, lower is better.
    e2e = by_name["end-to-end p99, send to receipt, at half the async rate (at most)"]
    assert e2e["per_round"] == [0.4, 0.4, 0.4] and e2e["met"] is True
    cpu = next(t for name, t in by_name.items() if name.startswith("broker CPU"))
    assert cpu["ratio"] == 0.2 and cpu["met"] is False  # at most 0.15 cores


def test_the_markdown_report_lists_every_target_and_figure() -> None:
    report = {
        "when": "2026-11-22 12:00 UTC", "command": "make bench", "rounds": 1, "duration_s": 5,
        "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 24, "kernel": "6", "python": "3.11",
                    "redis": "redis 7", "nats": "nats 2.9"},
        **summarise([one_round(100, 50, 0.1)]),
    }  # fmt: skip
    text = markdown(report)
    for t in TARGETS:
        assert f"| {t.what} |" in text
    assert "| async publish vs Redis everysec | ≥ 1.0× | 2.00× | 2.00 | yes |" in text
    ceiling = next(t for t in TARGETS if t.goal is None and "page-cache" in t.what)
    assert f"| {ceiling.what} | – | 2.00× | 2.00 | – |" in text  # a ceiling has no goal
    assert "| ≤ 2.0 ms | 0.40 ms | 0.40 | yes |" in text
    assert "| ≤ 0.15 cores | 0.20 cores | 0.20 | no |" in text
    assert "server CPU 0.20 (0.20–0.20) cores" in text


def test_the_end_to_end_row_gives_server_and_clients_cpus_of_their_own() -> None:
    """`split_cpus` halves the CPUs; `set_affinity` moves every thread of a running
    process, `run_json(cpus=...)` starts a command on the other half."""
    split = split_cpus()
    if len(os.sched_getaffinity(0)) < 2:
        assert split is None
        return
    assert split is not None
    server_cpus, client_cpus = split
    assert server_cpus and client_cpus and not server_cpus & client_cpus
    assert server_cpus | client_cpus == os.sched_getaffinity(0)
    threads = "import threading, time; [threading.Thread(target=time.sleep, args=(30,)).start() for _ in range(3)]; time.sleep(30)"  # noqa: E501
    server = subprocess.Popen([sys.executable, "-c", threads])
    try:
        time.sleep(0.5)
        set_affinity(server.pid, server_cpus)
        tids = os.listdir(f"/proc/{server.pid}/task")
        assert len(tids) == 4
        assert all(os.sched_getaffinity(int(tid)) == server_cpus for tid in tids)
    finally:
        server.kill()
        server.wait()
    shown = run_json(
        [
            sys.executable,
            "-c",
            "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0))}))",
        ],
        cpus=client_cpus,
    )
    assert set(shown["cpus"]) == client_cpus
