"""What every `rmqpy` client command shares: its parser class, its output, and the Admin,
credentials and TLS its common options make."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn, TextIO

from rmqpy.client.admin import Admin
from rmqpy.client.errors import ClientError
from rmqpy.remoting.signature import Credentials
from rmqpy.remoting.tls import client_context


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """One line per usage error; a command's options may come between its arguments
    (`rmqpy send Orders --tags TagA "hello"`), which plain argparse refuses when an
    argument is optional."""

    _parsing = False

    def parse_known_args(  # type: ignore[override]  # same call, intermixed where it can be
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._subparsers is not None or self._parsing:  # a command group, or the inner pass
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False

    def error(self, message: str) -> NoReturn:
        """One line on stderr and exit 2 (argparse prints the whole usage first)."""
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (local time without a zone)."""
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a timestamp: {text!r}") from None


def credentials_of(args: argparse.Namespace) -> Credentials | None:
    """The ACL account of --access-key/--secret-key (or their environment variables)."""
    if not args.access_key and not args.secret_key:
        return None
    if not (args.access_key and args.secret_key):
        raise UsageError("rmqpy: --access-key and --secret-key go together")
    return Credentials(args.access_key, args.secret_key, os.environ.get("RMQPY_SECURITY_TOKEN"))


def tls_of(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context of --tls/--tls-ca (or their environment variables)."""
    if not args.tls:
        if args.tls_ca:
            raise UsageError("rmqpy: --tls-ca goes with --tls")
        return None
    try:
        return client_context(args.tls_ca)
    except (OSError, ssl.SSLError) as exc:
        raise ClientError(f"cannot use --tls-ca {args.tls_ca}: {exc}") from None


def admin_of(args: argparse.Namespace) -> Admin:
    return Admin(
        args.namesrv,
        serialize=args.serialize,
        credentials=credentials_of(args),
        tls=tls_of(args),
        timeout_s=args.timeout,
    )


# --- output ------------------------------------------------------------------------------------
class Out:
    def __init__(self, as_json: bool, stream: TextIO = sys.stdout) -> None:
        self.as_json = as_json
        self.stream = stream
        self.records = 0  # what was done so far: messages sent, printed, found

    def line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def record(self, value: Any, text: str) -> None:
        self.line(json.dumps(value, ensure_ascii=False) if self.as_json else text)
        self.records += 1

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        if self.as_json:
            self.line(json.dumps(rows, ensure_ascii=False))
            return
        cells = [
            ["-" if r.get(c, "") is None else str(r.get(c, "")) for c in columns] for r in rows
        ]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
        self.line("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
        for row in cells:
            self.line("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
