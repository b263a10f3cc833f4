"""Which compiled twins are in use. rmqpy's hot paths have a pure-Python reference and a
compiled twin (Cython, built by `pip install` where a C compiler is found); the twin is
used when it imports, unless `RMQPY_PURE_PYTHON=1`. `missing` names those that did not
import, for the broker's one warning line at start.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON = os.environ.get("RMQPY_PURE_PYTHON", "") not in ("", "0")
TWINS = (
    "rmqpy.remoting._frame",
    "rmqpy.remoting.headers._parse",
    "rmqpy.store._message",
    "rmqpy.store._index",
    "rmqpy.store._commitlog",
    "rmqpy.store._consume_queue",
    "rmqpy.store._staged",
    "rmqpy.store._hot_read",
    "rmqpy.bench._load",
    "rmqpy.bench._floor",
    "rmqpy.broker.processors._send",
    "rmqpy.broker.processors._pull",
    "rmqpy.broker._metrics",
    "rmqpy.broker._context",
    "rmqpy.broker._long_polling",
    "rmqpy.client._message",
)  # what setup.py builds, but for the Spark sources' decoder (it needs pyarrow, an extra)
missing: dict[str, str] = {}  # module name: why it did not import


def twin(name: str) -> ModuleType | None:
    """The compiled module `name`, or None (forced pure Python, or not built)."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing[name] = str(exc)
        return None


def describe() -> str:
    """What runs, in a few words (for the log at start); tries every twin."""
    if PURE_PYTHON:
        return "pure Python (RMQPY_PURE_PYTHON=1)"
    for name in TWINS:
        twin(name)
    if missing:
        return "pure Python (compiled core not built: " + ", ".join(sorted(missing)) + ")"
    return "compiled core"
