"""The web console in a real browser (Debian's chromium, headless, driven by Playwright), against
a real broker process and a real `rmqpy console` process: what an operator does in it."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.console.conftest import rmqpy
from tests.integration.daemon import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
# Screenshots land here (RMQPY_ARTIFACTS, or .artifacts/ in the checkout)
ARTIFACTS = Path(os.environ.get("RMQPY_ARTIFACTS", ROOT / ".artifacts"))


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("chromium is not installed (`make test` installs it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("dialog", lambda dialog: dialog.accept())  # "Move the offsets?" -> yes
        yield page
        browser.close()


def test_an_operator_creates_a_topic_sends_finds_messages_and_watches_a_group_catch_up(
    console: str, broker: BrokerProcess, page: Page
) -> None:
    page.goto(console)
    expect(page.get_by_test_id("brokers")).to_contain_text("broker-a")

    # a topic, made in the console
    page.goto(console + "#/topics")
    page.fill("#new-topic", "WebOrders")
    page.fill("#new-topic-queues", "2")
    page.click("#create-topic")
    expect(page.get_by_test_id("topics")).to_contain_text("WebOrders")

    # three messages sent from its page, then counted
    page.get_by_role("link", name="WebOrders").click()
    for i in (1, 2, 3):
        page.fill("#send-body", f"hello {i}")
        page.fill("#send-keys", f"web-{i}")
        page.click("#send")
        expect(page.locator("#send-result")).to_contain_text("sent")
    expect(page.get_by_test_id("topic-messages")).to_have_text("3 messages")

    # looked up by key, then by the id found there
    page.goto(console + "#/messages")
    page.select_option("#lookup-by", "key")
    page.fill("#lookup-topic", "WebOrders")
    page.fill("#lookup-value", "web-2")
    page.click("#lookup")
    expect(page.get_by_test_id("message-body")).to_have_text("hello 2")
    msg_id = page.get_by_test_id("message-id").inner_text()
    assert re.fullmatch(r"[0-9A-F]{32}", msg_id)
    page.select_option("#lookup-by", "id")
    page.fill("#lookup-value", msg_id)
    page.click("#lookup")
    expect(page.get_by_test_id("message-body")).to_have_text("hello 2")
    expect(page.get_by_test_id("message")).to_contain_text("web-2")

    # a group set to the start from its page: its lag shows, and falls as it consumes
    rmqpy("group", "create", "WebBilling", namesrv=broker.namesrv)
    page.goto(console + "#/group/WebBilling")
    page.select_option("#reset-topic", "WebOrders")
    page.select_option("select[name=where]", "0")
    page.get_by_role("button", name="Reset offsets").click()
    expect(page.get_by_test_id("group-lag")).to_have_text("lag 3", timeout=10_000)
    page.wait_for_timeout(3000)  # samples of the lag before it falls, for the chart
    consumed = rmqpy("consume", "WebOrders", "--group", "WebBilling", "--max", "3",
                     namesrv=broker.namesrv)  # fmt: skip
    assert sorted(consumed.split()) == ["1", "2", "3", "hello", "hello", "hello"]
    expect(page.get_by_test_id("group-lag")).to_have_text("lag 0", timeout=15_000)
    page.wait_for_timeout(3000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-group.png"), full_page=True)
    page.goto(console)
    page.wait_for_timeout(2500)
    page.screenshot(path=str(ARTIFACTS / "console-cluster.png"), full_page=True)
