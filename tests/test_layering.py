"""The project's dependency rules, over imports (everything is imported as `rmqpy.<package>`):
store/ is free of asyncio and sockets; store/ and remoting/ never import each other nor
broker/; the SDK (client/) imports no broker, no command and no console, and of the store only
the record codec it needs for pull bodies; the web console works through the SDK alone; only
the `rmqpy` command (cli/) hands `rmqpy broker` to the broker."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "store": {"asyncio", "uvloop", "socket", "broker", "remoting", "client", "cli", "console",
              "pyspark"},
    "remoting": {"store", "broker", "client", "cli", "console"},
    "client": {"broker", "cli", "console", "pyspark"},
    "console": {"broker", "store", "cli", "pyspark"},
    "broker": {"client", "cli", "console", "pyspark", "pyarrow"},
    "config": {"broker", "store", "client", "cli", "console", "pyspark"},
    "pipeline": {"broker", "cli", "console"},
}  # fmt: skip
# The store modules that make up the record codec (no files, no threads): all the SDK takes
SDK_STORE_MODULES = {"layout", "message", "message_id", "java_hash"}


def imported_modules(path: Path) -> set[str]:
    """Top-level names imported: a project package by its name under `rmqpy.`."""
    return {name.split(".")[0] for name in imported_names(path)}


def imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name.removeprefix("rmqpy.") for name in names}


def test_the_sdk_takes_only_the_record_codec_from_the_store() -> None:
    taken = {
        name.split(".")[1]
        for path in (ROOT / "client").rglob("*.py")
        for name in imported_names(path)
        if name.startswith("store.")
    }
    assert taken <= SDK_STORE_MODULES
    for module in SDK_STORE_MODULES:  # and the codec itself stays free of files and threads
        used = imported_modules(ROOT / "store" / f"{module}.py")
        assert not used & {"threading", "os", "asyncio", "socket"}, module
        store_deps = {n.split(".")[1] for n in imported_names(ROOT / "store" / f"{module}.py")
                      if n.startswith("store.")}  # fmt: skip
        assert store_deps <= SDK_STORE_MODULES, (module, store_deps)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layering(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
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
