"""Typed configuration: frozen dataclasses loaded from broker.conf, env vars and CLI flags."""
