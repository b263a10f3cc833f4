"""Builds the compiled core (Cython) when a C compiler is there; without one the install
goes on and rmqpy runs its pure-Python reference, saying so once at start."""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from Cython.Build import cythonize
except ImportError:  # a build without Cython: pure Python
    cythonize = None

EXTENSIONS = [
    Extension("rmqpy.remoting._frame", ["rmqpy/remoting/_frame.pyx"]),
    Extension("rmqpy.remoting.headers._parse", ["rmqpy/remoting/headers/_parse.pyx"]),
    Extension("rmqpy.store._message", ["rmqpy/store/_message.pyx"]),
    Extension("rmqpy.store._index", ["rmqpy/store/_index.pyx"]),
    Extension("rmqpy.store._commitlog", ["rmqpy/store/_commitlog.pyx"]),
    Extension("rmqpy.store._consume_queue", ["rmqpy/store/_consume_queue.pyx"]),
    Extension("rmqpy.store._staged", ["rmqpy/store/_staged.pyx"]),
    Extension("rmqpy.store._hot_read", ["rmqpy/store/_hot_read.pyx"]),
    Extension("rmqpy.bench._load", ["rmqpy/bench/_load.pyx"]),
    Extension("rmqpy.bench._floor", ["rmqpy/bench/_floor.pyx"]),
    Extension("rmqpy.broker.processors._send", ["rmqpy/broker/processors/_send.pyx"]),
    Extension("rmqpy.broker.processors._pull", ["rmqpy/broker/processors/_pull.pyx"]),
    Extension("rmqpy.broker._metrics", ["rmqpy/broker/_metrics.pyx"]),
    Extension("rmqpy.broker._context", ["rmqpy/broker/_context.pyx"]),
    Extension("rmqpy.broker._long_polling", ["rmqpy/broker/_long_polling.pyx"]),
    Extension("rmqpy.client._message", ["rmqpy/client/_message.pyx"]),
    Extension("rmqpy.pipeline._arrow_records", ["rmqpy/pipeline/_arrow_records.pyx"]),
    Extension("rmqpy.pipeline._commitlog_scan", ["rmqpy/pipeline/_commitlog_scan.pyx"]),
]


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers
            print(
                f"rmqpy: compiled core not built ({exc}); the pure-Python path runs",
                file=sys.stderr,
            )

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(
                f"rmqpy: {ext.name} not built ({exc}); the pure-Python path runs", file=sys.stderr
            )


def extensions() -> list[Extension]:
    if cythonize is None:
        return []
    return cythonize(EXTENSIONS, compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
