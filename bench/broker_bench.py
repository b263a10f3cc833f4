"""`make bench-broker`: the broker alone over loopback, with the load in separate processes.

Starts `python -m broker` (ASYNC_FLUSH, a fresh store under the system temp dir), then runs
`bench.load` processes, one case after the other, 1 KiB bodies:

* (a) one message per request, 64 in flight;
* (b) batches of 32 (SEND_BATCH_MESSAGE), 64 in flight;
* consume: long-polling pulls of 32 from every queue of what (a) and (b) stored;
* latency at half of (a)'s rate: p50/p99 with each send paced on its own, and the same for a
  bare echo server (`bench.echo`) at that rate: the floor of this machine in this run.

Each case runs `--rounds` times: the load cases report the median rate and the range, the
latency cases (broker and echo alternating) the run with the median p99. The table and the
targets from the broker issue go to stdout and `bench/results/broker-latest.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.compare import rmqpy_load, start_echo, start_rmqpy

RESULTS = Path(__file__).resolve().parent / "results" / "broker-latest.json"
QUEUES = ",".join(str(q) for q in range(8))
FROM_START = ",".join(f"{q}:0" for q in range(8))
TARGETS = {"single": 150_000, "batch32": 400_000, "consume": 400_000}


def summary(runs: list[dict[str, Any]], by: str = "msgs_per_s") -> dict[str, Any]:
    """The median run by `by` (its rate and latencies), and the range of rates."""
    rates = [r["msgs_per_s"] for r in runs]
    mid = sorted(runs, key=lambda r: r[by])[len(runs) // 2]
    return {
        "msgs_per_s": int(statistics.median(rates)),
        "min": min(rates),
        "max": max(rates),
        "p50_ms": mid["p50_ms"],
        "p99_ms": mid["p99_ms"],
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_bench", description=__doc__)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rmqpy-broker-bench-"))
    broker = start_rmqpy(workdir, "ASYNC_FLUSH")
    load = partial(rmqpy_load, broker, args.duration)
    send = ("producer", "--topic", "BenchT", "--queues", QUEUES)
    pull = ("consumer", "--topic", "BenchT", "--queues", FROM_START, "--pull", "32")
    cases: dict[str, dict[str, Any]] = {}
    try:
        for name, load_args in (("single", send), ("batch32", (*send, "--batch", "32")),
                                ("consume", pull)):  # fmt: skip
            cases[name] = summary([load(*load_args) for _ in range(args.rounds)])
        half_rate = str(cases["single"]["msgs_per_s"] / 2)
        paced = ("producer", "--topic", "LatT", "--queues", QUEUES, "--rate", half_rate)
        # The floor under that latency on this machine, in the same run: a bare echo server
        # answering frames of the same size at the same rate. The two alternate, round by
        # round, so both see the same drift of this machine; each reports its median run
        # by p99 (one run's p99 moved 2x between runs minutes apart).
        echo = start_echo(workdir)
        paced_runs: list[dict[str, Any]] = []
        echo_runs: list[dict[str, Any]] = []
        try:
            for _ in range(args.rounds):
                paced_runs.append(load(*paced))
                echo_runs.append(rmqpy_load(echo, args.duration, "echo", "--rate", half_rate))
        finally:
            echo.stop()
        cases["latency_at_half_rate"] = summary(paced_runs, by="p99_ms")
        cases["echo_at_half_rate"] = summary(echo_runs, by="p99_ms")
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "flush": "ASYNC_FLUSH",
        "body_bytes": 1024,
        "cases": cases,
        "targets": TARGETS,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    head = ("case", "msgs/s", "range", "p50 ms", "p99 ms", "target", "ratio")
    print(f"{head[0]:<24}{head[1]:>10}{head[2]:>18}" + "".join(f"{h:>9}" for h in head[3:]))
    for name, case in cases.items():
        target = TARGETS.get(name)
        ratio = f"{case['msgs_per_s'] / target:.2f}" if target else "-"
        print(
            f"{name:<24}{case['msgs_per_s']:>10,}{case['min']:>9,}-{case['max']:<8,}"
            f"{case['p50_ms']:>9}{case['p99_ms']:>9}{target or '-':>9}{ratio:>9}"
        )
    print(
        "(p99 target at half rate: < 1 ms; echo_at_half_rate is a bare echo server at the"
        f" same rate, the floor on this machine) written to {RESULTS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
