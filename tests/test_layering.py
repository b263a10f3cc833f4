"""The project's dependency rules: store/ is free of asyncio and sockets, store/ and
remoting/ never import each other nor broker/, client/ never imports broker/ (only the
`rmqpy` command hands `rmqpy broker` to it), and the web console works through the SDK alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "store": {"asyncio", "uvloop", "socket", "broker", "remoting", "pyspark"},
    "remoting": {"store", "broker"},
    "client": {"broker", "pyspark"},
    "console": {"broker", "store", "pyspark"},
    "broker": {"pyspark", "pyarrow"},
    "config": {"pyspark"},
    "pipeline": {"broker"},
}
EXEMPT = {"client/cli.py"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layering(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
        if str(path.relative_to(ROOT)) not in EXEMPT
    }
    assert {k: v for k, v in offenders.items() if v} == {}


CODEC_MODULES = ["wire", "codes", "errors", "command", "header_codec", "frame", "signature"]


def test_the_remoting_codec_does_no_io() -> None:
    paths = [ROOT / "remoting" / f"{name}.py" for name in CODEC_MODULES]
    paths += list((ROOT / "remoting" / "headers").rglob("*.py"))
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            imported_modules(path) & {"asyncio", "uvloop", "socket"}
        )
        for path in paths
    }
    assert {k: v for k, v in offenders.items() if v} == {}
