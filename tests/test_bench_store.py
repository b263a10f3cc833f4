"""`make bench-store` runs end to end and prints the store's table: a small
run (a few thousand messages, one run per case) of the same command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmqpy.bench import store_bench


def test_bench_store_prints_every_case_and_writes_its_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "store.json"
    argv = ["--messages", "4000", "--repeat", "1", "--sync-seconds", "0.3", "--raw-mib", "8",
            "--page-seconds", "0.2"]  # fmt: skip
    assert store_bench.main([*argv, "--dir", str(tmp_path), "--json", str(out)]) == 0

    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    cases = result["cases"]
    for name in (
        "append only, 1 msg/call",
        "append + dispatch, batches of 32",
        "batches of 32 / bare append, warm",
        "batches of 32 / bare append, new file",
        "batches of 32 / new page-cache pages",
        "SYNC_FLUSH, 8 threads",
        "reads, 32 msgs/pull (hot)",
    ):
        assert cases[name]["msgs_per_s"] > 0 and cases[name]["ratio"] > 0
        assert f"| {name} |" in printed
    peers = {store_bench.WARM_PEER, store_bench.FILE_PEER, store_bench.PAGE_PEER}
    assert set(result["peers_msgs_per_s"]) == peers
    assert result["sync_flush"]["fsyncs_per_s"] > 0
    assert "raw sequential write" in printed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("rmqpy-bench-")]
