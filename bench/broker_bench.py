"""`make bench`: the broker over loopback, with the load in separate processes.

Starts `python -m broker` (ASYNC_FLUSH, a fresh store under the system temp dir), then runs
`bench.load` processes, one case after the other, 1 KiB bodies:

* (a) one message per request, 64 in flight;
* (b) batches of 32 (SEND_BATCH_MESSAGE), 64 in flight;
* consume: long-polling pulls of 32 from every queue of what (a) and (b) stored;
* latency at half of (a)'s rate: p50/p99 with the sends paced.

Each load case runs `--rounds` times (median and range). The table and the targets from the
broker issue go to stdout and `bench/results/broker-latest.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.processes import free_port, wait_for_port

RESULTS = Path(__file__).resolve().parent / "results" / "broker-latest.json"
QUEUES = ",".join(str(q) for q in range(8))
FROM_START = ",".join(f"{q}:0" for q in range(8))
TARGETS = {"single": 150_000, "batch32": 400_000, "consume": 400_000}


def start_broker(root: Path, port: int) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "broker",
        "--storePathRootDir",
        str(root),
        "--listenPort",
        str(port),
        "--namesrvListenPort",
        "0",
        "--fastListenPort",
        "0",
        "--brokerIP1",
        "127.0.0.1",
        "--mappedFileSizeCommitLog",
        str(256 * 1024 * 1024),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, proc)
    return proc


def load(port: int, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.load", *args, "--addr", f"127.0.0.1:{port}"],
        capture_output=True,
        check=True,
        timeout=300,
    )
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    result.pop("latency", None)
    return result


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["msgs_per_s"] for r in runs]
    mid = sorted(runs, key=lambda r: r["msgs_per_s"])[len(runs) // 2]
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
    port = free_port()
    broker = start_broker(workdir / "store", port)
    dur = str(args.duration)
    cases: dict[str, dict[str, Any]] = {}
    try:
        cases["single"] = summary(
            [
                load(port, "producer", "--topic", "BenchT", "--queues", QUEUES, "--duration", dur)
                for _ in range(args.rounds)
            ]
        )
        cases["batch32"] = summary(
            [
                load(
                    port,
                    "producer",
                    "--topic",
                    "BenchT",
                    "--queues",
                    QUEUES,
                    "--batch",
                    "32",
                    "--duration",
                    dur,
                )
                for _ in range(args.rounds)
            ]
        )
        cases["consume"] = summary(
            [
                load(
                    port,
                    "consumer",
                    "--topic",
                    "BenchT",
                    "--queues",
                    FROM_START,
                    "--pull",
                    "32",
                    "--duration",
                    dur,
                )
                for _ in range(args.rounds)
            ]
        )
        half_rate = cases["single"]["msgs_per_s"] / 2
        cases["latency_at_half_rate"] = summary(
            [
                load(
                    port,
                    "producer",
                    "--topic",
                    "LatT",
                    "--queues",
                    QUEUES,
                    "--rate",
                    str(half_rate),
                    "--duration",
                    dur,
                )
            ]
        )
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)
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
    print(f"(p99 target at half rate: < 1 ms) written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
