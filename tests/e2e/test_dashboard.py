"""End to end (issue 10): the dashboard at ``/_cachekeeper/`` in a real browser.

A scripted session goes through the proxy with the official ``anthropic`` SDK against the mock:
five turns of one conversation, the fourth of which edits an earlier user message (a prefix
collapse the client caused), plus one request whose model is ``<script>alert(1)</script>``.
Then Debian's ``chromium``, driven headless by ``selenium`` through Debian's
``chromium-driver`` at ``/usr/bin/chromedriver`` (nothing downloads a driver or a browser),
loads the dashboard, finds the session, opens it and checks the chart: one bar group per turn,
the collapse marker labelled with its cause; the script-named model shows as literal text and
no alert fires. A screenshot goes to ``tests/e2e/artifacts/dashboard.png``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import anthropic
import pytest

from conftest import Proxy, launch_proxy
from helpers import ANTHROPIC_KEY, REPO_ROOT
from mock_upstream import MockUpstream

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = REPO_ROOT / "tests" / "e2e" / "artifacts"
MODEL = "claude-e2e-dashboard-model"
SCRIPT_MODEL = "<script>alert(1)</script>"
SYSTEM = "You are a careful assistant for the dashboard test. Answer briefly."
USER_TURNS = [
    "Plan a three-day trip to Lisbon.",
    "Day one: which museums?",
    "Day two: where to eat?",
    "Day three: a day trip?",
    "Summarise the plan.",
]
EDITED_TURN = 4  # this turn's request rewrites the second user message
TOKEN = "dash-e2e-token-7f3a"
# The mock answers as Anthropic: the route says so, for the provider table's cache multipliers
# (a local upstream is otherwise the `local` row, "not priced"); `[[pricing]]` prices
# claude-* in money, so the script-named model is priced in equivalents only.
ROUTES = """
[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "{upstream}"
provider = "anthropic"

[[pricing]]
model = "claude-*"
input_per_mtok = 3.0
output_per_mtok = 15.0
cache_read_per_mtok = 0.3
cache_write_5m_per_mtok = 3.75
cache_write_1h_per_mtok = 6.0
"""
WAIT_S = 15


def _anthropic(base_url: str, headers: dict[str, str] | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=base_url,
        api_key=ANTHROPIC_KEY,
        default_headers={"x-api-key": ANTHROPIC_KEY, **(headers or {})},
        max_retries=0,
        timeout=30.0,
    )


def _run_session(client: anthropic.Anthropic) -> None:
    """Five turns of one conversation; turn 4's client edits messages[2] (the second user
    message); then one request with a script-named model."""
    messages: list[dict[str, Any]] = []
    for n, text in enumerate(USER_TURNS, start=1):
        messages.append({"role": "user", "content": text})
        if n == EDITED_TURN:
            messages[2] = {"role": "user", "content": USER_TURNS[1] + " (edited: only free ones)"}
        reply = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages)
        messages.append({"role": "assistant", "content": reply.content[0].text})
    client.messages.create(
        model=SCRIPT_MODEL, max_tokens=16, messages=[{"role": "user", "content": "What is your name?"}]
    )


def _get_json(url: str, headers: dict[str, str] | None = None) -> Any:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Cache-Control"] == "no-store"
        return json.load(r)


def _main_session(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [s for s in sessions if s["model"] == MODEL]
    assert len(mine) == 1, f"want one session of {MODEL}: {json.dumps(sessions, indent=1)}"
    return mine[0]


def _wait_sessions(url: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The API's session list once both sessions have all their turns (the turn record is
    stored when the response body has ended)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        sessions = _get_json(url, headers)
        turns = {s["model"]: s["turns"] for s in sessions}
        if turns.get(MODEL) == len(USER_TURNS) and turns.get(SCRIPT_MODEL) == 1:
            return sessions
        if time.monotonic() > deadline:
            pytest.fail(f"sessions never complete: {json.dumps(sessions, indent=1)}", pytrace=False)
        time.sleep(0.1)


@pytest.fixture(scope="module")
def dash_proxy(mock_upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """A proxy of its own, so the dashboard shows only this test's sessions."""
    tmp = tmp_path_factory.mktemp("dashboard")
    with launch_proxy(tmp, ROUTES.format(upstream=mock_upstream.url)) as p:
        yield p


@pytest.fixture(scope="module")
def token_proxy(mock_upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """A proxy with ``[server] client_token`` set."""
    tmp = tmp_path_factory.mktemp("dashboard-token")
    with launch_proxy(tmp, ROUTES.format(upstream=mock_upstream.url), server_toml=f'client_token = "{TOKEN}"') as p:
        yield p


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium via Debian's chromedriver; alerts recorded, console kept."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(
                f"{path} is missing: install Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver; scripts/test.sh does it as root)",
                pytrace=False,
            )
    # Selenium Manager must never fetch a driver or browser: the paths are given, and should
    # it run anyway it stays offline.
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="cachekeeper-chromium-")
    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    # Any alert() the page might run is recorded instead of blocking.
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": "window.__alerts = []; window.alert = (m) => { window.__alerts.push(String(m)); };"},
    )
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, css: str, count: int | None = None) -> list[Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> list[Any] | bool:
        els = d.find_elements(By.CSS_SELECTOR, css)
        if count is None:
            return els or False
        return els if len(els) == count else False

    return WebDriverWait(driver, WAIT_S).until(found, f"waiting for {css} (x{count})")


def _open_and_check(driver: Any, page_url: str, session: str) -> None:
    """Load the page, open `session`, and check the table, the chart and the escaping."""
    from selenium.webdriver.common.by import By

    driver.get(page_url)
    rows = _wait(driver, "#sessions tbody tr.session", 2)
    models = [r.find_element(By.CSS_SELECTOR, "td.model").text for r in rows]
    assert SCRIPT_MODEL in models, models
    assert MODEL in models, models
    # The script-named model is text: no element was made of it, and no alert ran.
    assert driver.execute_script("return document.scripts.length") == 1
    assert driver.execute_script("return window.__alerts") == []
    assert driver.find_elements(By.CSS_SELECTOR, "td.model script") == []

    row = next(r for r in rows if r.get_attribute("data-session") == session)
    assert row.find_element(By.CSS_SELECTOR, "td.turns").text == str(len(USER_TURNS))
    assert row.find_element(By.CSS_SELECTOR, "td.collapses").text == "1"
    # Priced in money by [[pricing]]; the other model only in billed-input equivalents.
    assert row.find_element(By.CSS_SELECTOR, "td.saving").text.endswith(" USD")
    other = next(r for r in rows if r.get_attribute("data-session") != session)
    assert other.find_element(By.CSS_SELECTOR, "td.saving").text.endswith("input-token eq.")
    row.click()

    groups = _wait(driver, "svg#chart g.turn", len(USER_TURNS))
    assert [g.get_attribute("data-turn") for g in groups] == [str(n) for n in range(1, len(USER_TURNS) + 1)]
    for g in groups:
        bars = g.find_elements(By.CSS_SELECTOR, "rect.bar")
        assert {b.get_attribute("class") for b in bars} == {"bar uncached", "bar read", "bar write"}, g
    markers = driver.find_elements(By.CSS_SELECTOR, "svg#chart .collapse-marker")
    assert len(markers) == 1, [m.text for m in markers]
    assert markers[0].get_attribute("data-turn") == str(EDITED_TURN)
    label = markers[0].find_element(By.CSS_SELECTOR, "text.collapse-label").text
    assert label == "client_history @ messages[2]", label
    turn_rows = driver.find_elements(By.CSS_SELECTOR, "#turns tbody tr.turn-row")
    assert len(turn_rows) == len(USER_TURNS)
    assert "client_history" in turn_rows[EDITED_TURN - 1].text
    assert driver.find_element(By.ID, "detail-id").text == session

    assert driver.execute_script("return window.__alerts") == []
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == [], errors


def _screenshot(driver: Any, name: str) -> Path:
    """The whole page, 1400 px wide."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.execute_script("window.scrollTo(0, 0)")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    metrics = {"width": 1400, "height": int(height), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path


def test_dashboard_shows_sessions_chart_and_collapse(dash_proxy: Proxy, browser: Any) -> None:
    client = _anthropic(dash_proxy.anthropic_base_url)
    log = dash_proxy.request_log()
    _run_session(client)
    client.close()
    lines = log.wait("/v1/messages", len(USER_TURNS) + 1)
    mine = [l for l in lines if l.get("model") == MODEL]
    assert [l.get("turn") for l in mine] == list(range(1, len(USER_TURNS) + 1)), mine
    assert len({l.get("session") for l in mine}) == 1, mine
    edited = mine[EDITED_TURN - 1]
    assert (edited.get("collapse_at"), edited.get("collapse_cause")) == ("messages[2]", "client_history"), edited

    sessions = _wait_sessions(f"{dash_proxy.base_url}/_cachekeeper/api/sessions")
    main = _main_session(sessions)
    assert main["session"] == mine[0]["session"]
    assert main["collapses"] == 1
    assert main["by_cause"][0]["cause"] == "client_history"

    _open_and_check(browser, f"{dash_proxy.base_url}/_cachekeeper/", main["session"])
    path = _screenshot(browser, "dashboard.png")
    assert path.stat().st_size > 10_000

    # The bare path redirects below itself, so the page's relative URLs resolve.
    browser.get(f"{dash_proxy.base_url}/_cachekeeper")
    assert browser.current_url == f"{dash_proxy.base_url}/_cachekeeper/"
    _wait(browser, "#sessions tbody tr.session", 2)


def test_dashboard_under_the_token_segment(token_proxy: Proxy, browser: Any) -> None:
    client = _anthropic(token_proxy.anthropic_base_url, {"x-cachekeeper-token": TOKEN})
    _run_session(client)
    client.close()
    # Without the token: refused.
    with pytest.raises(urllib.error.HTTPError) as e:
        _get_json(f"{token_proxy.base_url}/_cachekeeper/api/sessions")
    assert e.value.code in (401, 403)
    base = f"{token_proxy.base_url}/t/{TOKEN}/_cachekeeper/"
    sessions = _wait_sessions(f"{base}api/sessions")
    _open_and_check(browser, base, _main_session(sessions)["session"])
    _screenshot(browser, "dashboard-token.png")
