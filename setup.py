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
    Extension("remoting._frame", ["remoting/_frame.pyx"]),
    Extension("remoting.headers._parse", ["remoting/headers/_parse.pyx"]),
    Extension("store._message", ["store/_message.pyx"]),
    Extension("store._index", ["store/_index.pyx"]),
    Extension("store._commitlog", ["store/_commitlog.pyx"]),
    Extension("store._consume_queue", ["store/_consume_queue.pyx"]),
    Extension("store._staged", ["store/_staged.pyx"]),
    Extension("store._hot_read", ["store/_hot_read.pyx"]),
    Extension("bench._load", ["bench/_load.pyx"]),
    Extension("broker.processors._send", ["broker/processors/_send.pyx"]),
    Extension("broker._metrics", ["broker/_metrics.pyx"]),
    Extension("broker._context", ["broker/_context.pyx"]),
    Extension("client._message", ["client/_message.pyx"]),
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
