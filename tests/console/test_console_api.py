"""The console's JSON API over real HTTP, as a script (or the page) calls it: answers, bad
input, and the refusal of a write that is not JSON (what a cross-site form would send)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.console.conftest import rmqpy
from tests.integration.daemon import BrokerProcess


def call(url: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            kind = response.headers.get_content_type()
            return response.status, json.loads(raw) if kind == "application/json" else raw
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_what_the_page_asks_is_answered_and_bad_requests_say_why(
    console: str, broker: BrokerProcess
) -> None:
    assert call(console + "api/topics", {"topic": "ApiT", "queues": 2})[0] == 200
    status, sent = call(console + "api/topics/ApiT/messages", {"body": "é-bytes", "keys": "api-1"})
    assert status == 200 and sent["status"] == "SEND_OK"
    status, found = call(console + f"api/messages?topic=ApiT&id={sent['msgId']}")
    assert status == 200 and found[0]["body"] == "é-bytes" and found[0]["bodySize"] == 8
    where = f"topic=ApiT&broker=broker-a&queue={sent['queueId']}&offset={sent['queueOffset']}"
    assert call(console + f"api/messages/body?{where}") == (200, "é-bytes".encode())
    status, at_time = call(console + "api/messages?topic=ApiT&time=0")
    assert status == 200 and [m["body"] for m in at_time] == ["é-bytes"]

    # a form post (not JSON) changes nothing
    form = call(console + "api/topics", b"topic=Evil&queues=1", "application/x-www-form-urlencoded")
    assert form[0] == 400 and "JSON" in form[1]["error"]
    assert "Evil" not in rmqpy("topic", "list", namesrv=broker.namesrv)
    assert call(console + "api/topics", {"topic": "bad name!"})[0] == 400
    assert call(console + "api/topics", {"topic": "T", "queues": "many"}) == (
        400, {"error": "queues must be a whole number, not 'many'"},
    )  # fmt: skip
    assert call(console + "api/groups/NoSuchGroup")[0] == 404
    assert call(console + "api/topics/NoSuchTopic")[0] == 404
    assert call(console + "api/messages?topic=ApiT&key=nothing-has-this") == (200, [])
    assert call(console + "api/messages")[0] == 400
    status, dlq = call(console + "api/groups/NoSuchGroup/dlq")
    assert (status, dlq) == (200, {"total": 0, "messages": []})
    assert call(console + "api/groups/G/dlq/resend", {"msgIds": []})[0] == 400
