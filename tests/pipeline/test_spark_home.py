"""Spark's Python processes import the installed PySpark, not the zip bundled beside it
(which Python compiles from source in every process Spark starts): checked in a real worker
of the session `pipeline.local_spark` made, and the home it runs from on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from rmqpy.pipeline.spark_home import home_without_zip


def _worker_pyspark(_row: object) -> str:
    import pyspark  # noqa: PLC0415 - imported in the worker

    return str(pyspark.__file__)


def test_python_workers_import_the_installed_pyspark(spark: SparkSession) -> None:
    [found] = spark.sparkContext.parallelize([0], 1).map(_worker_pyspark).collect()
    assert ".zip" not in found
    assert Path(found).resolve() == Path(pyspark.__file__).resolve()
    assert not (Path(os.environ["SPARK_HOME"]) / "python").exists()


def _installed(root: Path) -> Path:
    """A pip-installed PySpark's layout: the package, its scripts, jars and bundled zip."""
    home = root / "site-packages" / "pyspark"
    for name in ("bin", "jars", "python/lib"):
        (home / name).mkdir(parents=True)
    (home / "__init__.py").write_text("")
    (home / "python" / "lib" / "pyspark.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    return home


def test_the_home_links_scripts_and_jars_and_is_made_once(tmp_path: Path) -> None:
    installed = _installed(tmp_path)
    home = home_without_zip(installed, tmp_path / "cache")
    assert home is not None
    assert sorted(p.name for p in home.iterdir()) == ["bin", "jars"]
    assert (home / "jars").resolve() == (installed / "jars").resolve()
    made = (home / "bin").lstat().st_mtime_ns
    assert home_without_zip(installed, tmp_path / "cache") == home
    assert (home / "bin").lstat().st_mtime_ns == made
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [home.name]


def test_a_home_left_by_a_moved_install_is_made_again(tmp_path: Path) -> None:
    installed = _installed(tmp_path)
    home = home_without_zip(installed, tmp_path / "cache")
    assert home is not None
    (home / "jars").unlink()
    (home / "jars").symlink_to(tmp_path)
    assert home_without_zip(installed, tmp_path / "cache") == home
    assert (home / "jars").resolve() == (installed / "jars").resolve()


def test_a_spark_distribution_is_left_as_it_is(tmp_path: Path) -> None:
    installed = _installed(tmp_path)
    (installed / "python" / "lib" / "pyspark.zip").unlink()
    assert home_without_zip(installed, tmp_path / "cache") is None


def test_no_home_where_the_cache_cannot_be_written(tmp_path: Path) -> None:
    installed = _installed(tmp_path)
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert home_without_zip(installed, blocked / "cache") is None
