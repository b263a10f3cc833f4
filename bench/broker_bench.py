"""`make bench-broker`: the broker alone over loopback, with the load in separate processes.

Starts `python -m rmqpy.broker` (ASYNC_FLUSH, a fresh store under the system temp dir), then runs
`bench.load` processes, one case after the other, 1 KiB bodies:

* (a) one message per request, 64 in flight, alternating round by round with a bare echo
  server (`bench.echo`: no decode, no store) answering frames of the same size from the same
  load generator, 64 in flight: the ceiling of a request/answer loop on this machine in this
  run, the "bare uvloop server" the single-send target is sized by;
* (b) batches of 32 (SEND_BATCH_MESSAGE), 64 in flight;
* consume: long-polling pulls of 32 from every queue of what (a) and (b) stored;
* latency at half of (a)'s rate: p50/p99 with each send paced on its own, and the same for a
  bare echo server (`bench.echo`) at that rate: the floor of this machine in this run.

Each case runs `--rounds` times: the load cases report the median rate and the range, the
latency cases (broker and echo alternating) the run with the median p99. The table and the
the broker's targets go to stdout and `bench/results/broker-latest.json`.
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

from rmqpy.bench.compare import rmqpy_load, start_echo, start_rmqpy

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
    parser = argparse.ArgumentParser(prog="python -m rmqpy.bench.broker_bench", description=__doc__)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rmqpy-broker-bench-"))
    broker = start_rmqpy(workdir, "ASYNC_FLUSH")
    load = partial(rmqpy_load, broker, args.duration)
    send = ("producer", "--topic", "BenchT", "--queues", QUEUES)
    pull = ("consumer", "--topic", "BenchT", "--queues", FROM_START, "--pull", "32")
    cases: dict[str, dict[str, Any]] = {}
    echo = start_echo(workdir)
    echo_load = partial(rmqpy_load, echo, args.duration, "echo")
    try:
        # Broker and echo alternate, round by round, so both see the same drift of this
        # machine (its speed moves twofold within minutes).
        single_runs: list[dict[str, Any]] = []
        echo_closed_runs: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            single_runs.append(load(*send))
            echo_closed_runs.append(echo_load())
        cases["single"] = summary(single_runs)
        cases["echo_64_in_flight"] = summary(echo_closed_runs)
        for name, load_args in (("batch32", (*send, "--batch", "32")), ("consume", pull)):
            cases[name] = summary([load(*load_args) for _ in range(args.rounds)])
        half_rate = str(cases["single"]["msgs_per_s"] / 2)
        paced = ("producer", "--topic", "LatT", "--queues", QUEUES, "--rate", half_rate)
        # The floor under that latency: the echo server answering at the same rate, each
        # reporting its median run by p99 (one run's p99 moved 2x between runs minutes apart).
        paced_runs: list[dict[str, Any]] = []
        echo_runs: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            paced_runs.append(load(*paced))
            echo_runs.append(echo_load("--rate", half_rate))
        cases["latency_at_half_rate"] = summary(paced_runs, by="p99_ms")
        cases["echo_at_half_rate"] = summary(echo_runs, by="p99_ms")
    finally:
        echo.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    echo_ceiling = cases["echo_64_in_flight"]["msgs_per_s"]
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
        "single_to_echo": cases["single"]["msgs_per_s"] / echo_ceiling,
        "single_target_to_echo": TARGETS["single"] / echo_ceiling,
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
        f"single / echo at 64 in flight: {report['single_to_echo']:.2f}"
        f" (the single target is {report['single_target_to_echo']:.2f}x of the echo server)"
    )
    print(
        "(p99 target at half rate: < 1 ms; echo_at_half_rate is a bare echo server at the"
        f" same rate, the floor on this machine) written to {RESULTS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
