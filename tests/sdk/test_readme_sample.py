"""The README's Python sample, run as a user would run it: saved to a file and started with
the venv's Python, against a broker (its name server address put in place of `make run`'s)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.daemon import BrokerProcess

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_sample() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_readme_python_sample_runs_as_written(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    try:
        code = readme_sample()
        assert 'NAMESRV = "127.0.0.1:9876"' in code
        script = tmp_path / "example.py"
        script.write_text(code.replace("127.0.0.1:9876", broker.namesrv))
        run = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
            check=False, cwd=tmp_path,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        out = run.stdout
        assert "billing got" in out and "b'hello'" in out  # TagA passes the filter
        assert "audit read b'hello'" in out  # a new group with FIRST reads what was sent
        assert "committed" in out and "lag" in out
    finally:
        assert broker.stop() == 0
