"""The README's command-line sample, line by line as a user types it: each line run by bash in a
directory whose `data/store` is the broker's store, with `rmqpy` on PATH and RMQPY_NAMESRV
pointing at that broker. A `--follow` line is stopped with Ctrl-C (SIGINT) after a moment and
must say so (exit 130); every other line must succeed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.daemon import BrokerProcess

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_shell_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## From the command line") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_command_line_sample_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    broker = BrokerProcess(tmp_path / "data" / "store").start()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RMQPY_NAMESRV": broker.namesrv,
    }
    (tmp_path / "invoice.pdf").write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 8)
    lines = readme_shell_lines()
    assert len(lines) >= 10 and any("--follow" in line for line in lines)
    try:
        for line in lines:
            if "--follow" in line:
                proc = subprocess.Popen(
                    ["bash", "-c", line], cwd=tmp_path, env=env, start_new_session=True,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                )  # fmt: skip
                time.sleep(3)
                os.killpg(proc.pid, signal.SIGINT)
                out, err = proc.communicate(timeout=30)
                assert proc.returncode == 130, f"{line}\n{err.decode()}"
                assert b"interrupted" in err and out.strip(), line
                continue
            run = subprocess.run(
                ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, timeout=120,
                check=False,
            )  # fmt: skip
            assert run.returncode == 0, f"{line}\n{run.stderr.decode()[-2000:]}"
            assert run.stdout.strip(), f"{line} printed nothing"
    finally:
        assert broker.stop() == 0
