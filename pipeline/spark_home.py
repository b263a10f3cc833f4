"""A SPARK_HOME for pip-installed PySpark whose Python processes start without compiling
PySpark.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the path of every Python process it
starts: the workers' daemon, each streaming query's driver-side source, each planning step of
a Python data source read. A pip-installed PySpark ships that zip beside the installed
package, and Python cannot cache bytecode for modules it imports from a zip, so each of those
processes compiles PySpark's modules from source: 0.8-1.0 s of CPU before it does anything,
against 0.25 s importing the installed package. `home_without_zip` makes a directory that
mirrors the installed SPARK_HOME (its `bin` and `jars`) without `python/lib`, so that those
processes import the same PySpark from the installed package, as the driver does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

# What spark-submit and the JVM read from SPARK_HOME in local mode.
MIRRORED = ("bin", "jars", "conf")


def _bundled_zip(home: Path) -> Path:
    return home / "python" / "lib" / "pyspark.zip"


def home_without_zip(installed: Path, cache: Path) -> Path | None:
    """A directory under `cache` linking to `installed`'s `bin`, `jars` (and `conf`) and
    nothing else; made once, atomically, and reused while its links point at `installed`.
    None when `installed` is not a pip-installed PySpark (no bundled zip beside its package)
    or the directory cannot be made."""
    if not _bundled_zip(installed).is_file() or not (installed / "__init__.py").is_file():
        return None
    tag = hashlib.sha256(str(installed.resolve()).encode()).hexdigest()[:16]
    home = cache / f"spark-home-{tag}"
    wanted = {name: installed / name for name in MIRRORED if (installed / name).exists()}
    if _mirrors(home, wanted):
        return home
    try:
        cache.mkdir(parents=True, exist_ok=True)
        made = Path(tempfile.mkdtemp(prefix=".spark-home-", dir=cache))
        for name, target in wanted.items():
            (made / name).symlink_to(target.resolve())
        try:
            made.rename(home)  # atomic: another process made it meanwhile, or an old one is there
        except OSError:
            if not _mirrors(home, wanted):
                shutil.rmtree(home, ignore_errors=True)
                made.rename(home)
        finally:
            shutil.rmtree(made, ignore_errors=True)
    except OSError:
        return None
    return home if _mirrors(home, wanted) else None


def _mirrors(home: Path, wanted: dict[str, Path]) -> bool:
    try:
        return all(os.readlink(home / name) == str(t.resolve()) for name, t in wanted.items())
    except OSError:
        return False


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rmqpy"
