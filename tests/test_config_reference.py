"""The configuration reference is written from the settings' own declarations: the Markdown
in docs/ cannot drift from the code, and `rmqpy config` prints a broker.conf that loads back
to the same settings."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from rmqpy.config.broker_config import COMPONENTS, load_settings
from rmqpy.config.reference import broker_conf, markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_docs_configuration_md_is_generated_from_the_settings() -> None:
    assert DOCS.read_text(encoding="utf-8") == markdown(), (
        "docs/configuration.md is stale: run `rmqpy config --markdown > docs/configuration.md`"
    )


def test_every_setting_has_help_and_appears_in_the_reference() -> None:
    text = markdown()
    for cls in COMPONENTS:
        for f in fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help text"
            assert f"`RMQPY_{f.name.upper()}`" in text


def test_the_defaults_conf_loads_back_to_the_defaults() -> None:
    defaults, _ = load_settings("", environ={})
    loaded, unknown = load_settings(broker_conf(), environ={})
    assert unknown == {}
    assert loaded == defaults


def test_the_effective_conf_loads_back_to_the_same_settings() -> None:
    flags = {"listenPort": "20911", "flushDiskType": "SYNC_FLUSH", "brokerIP1": "10.0.0.7"}
    settings, _ = load_settings("", environ={}, overrides=flags)
    assert load_settings(broker_conf(settings), environ={})[0] == settings


def test_rmqpy_config_prints_them(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=from-file\nmetricsPort=0\n")

    def rmqpy_config(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "rmqpy.cli", "config", *args],
            capture_output=True,
            check=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
        )
        return proc.stdout.decode()

    assert rmqpy_config("--defaults") == broker_conf()
    assert rmqpy_config("--markdown") == markdown()
    effective = rmqpy_config("-c", str(conf), "--listenPort", "1")
    assert "\nbrokerName=from-file\n" in effective
    assert "\nmetricsPort=0\n" in effective
    assert "\nlistenPort=1\n" in effective
