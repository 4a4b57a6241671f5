"""End to end (issue 10, cache accounting): sessions, turns and prefix collapses, driven through
cachekeeper by the official ``anthropic`` SDK and by Claude Code's own recorded request bodies,
read back from the request log line (``session``, ``turn``, ``collapse_at``, ``collapse_cause``,
``collapse_write_tokens``).

- a client that edits message 3 stays in its session, and that turn is one collapse at
  ``messages[3]`` attributed to ``client_history``, costing the turn's cache-write tokens;
- an eviction batch (images past the block ceiling) is one collapse attributed to ``eviction``,
  at the oldest retired image's message; the turns between batches are none;
- Claude Code's billing line, which changes on every request it sends to Anthropic's own API
  (``cch=``), is one session with no collapse on an ``anthropic`` route, and a collapse at
  ``system`` on every turn (``client_system``) on a third-party Anthropic-wire route, where its
  churn is real;
- ``x-cachekeeper-session`` names the session and never reaches the upstream;
- usage -> session -> ``cachekeeper report --json`` -> ``/metrics`` agree with the mock's own sums
  on a scripted session, streamed and not (a stream's usage, sent in ``message_start`` and again
  in ``message_delta``, is never counted twice), and the report names the collapse and its cost.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
from prometheus_client.parser import text_string_to_metric_families

from conftest import RequestLog, _binary, launch_proxy
from helpers import ANTHROPIC_KEY, SMALL, anthropic_session, raw_request
from mock_upstream import ANTHROPIC_USAGE, MockUpstream

CLAUDE = "claude-e2e-test-model"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "claude_code"
WRITE_TOKENS = ANTHROPIC_USAGE["cache_creation_input_tokens"]


def _routes(mock: MockUpstream, images: str = "") -> str:
    return f"""
[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "{mock.url}"
provider = "anthropic"
{images}

[[routes]]
name = "deepseek"
prefix = "/deepseek"
upstream = "{mock.url}"
provider = "deepseek"
dialect = "anthropic"

[[routes]]
name = "deepseek-raw"
prefix = "/deepseek-raw"
upstream = "{mock.url}"
provider = "deepseek"
dialect = "anthropic"
stabilize = []
"""


def _client(base_url: str, session: str | None = None) -> anthropic.Anthropic:
    headers = {"x-cachekeeper-session": session} if session else None
    return anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=base_url, max_retries=0, default_headers=headers)


def _turns(log: RequestLog, n: int) -> list[dict[str, Any]]:
    lines = log.wait("/v1/messages", n)
    assert len(lines) == n, f"want {n} request lines, got {len(lines)}: {lines}"
    return lines


def _collapses(lines: list[dict[str, Any]]) -> list[tuple[int, str, str, Any]]:
    return [
        (l["turn"], l["collapse_at"], l["collapse_cause"], l.get("collapse_write_tokens"))
        for l in lines
        if l.get("collapse_at") is not None
    ]


def test_a_client_edit_of_message_3_is_one_collapse_in_the_same_session(tmp_path: Path) -> None:
    with MockUpstream() as mock, launch_proxy(tmp_path, _routes(mock)) as proxy:
        log = RequestLog(proxy.stderr_path)
        log.mark()
        client = _client(proxy.base_url + "/anthropic")
        history: list[dict[str, Any]] = [{"role": "user", "content": "Plan the trip."}]
        for step in range(4):
            reply = client.messages.create(model=CLAUDE, max_tokens=64, system="You plan trips.", messages=history)
            history.append({"role": "assistant", "content": reply.content[0].text})
            history.append({"role": "user", "content": f"Next step {step}."})
        # The client edits message 3 (a user turn) and goes on.
        history[3] = {"role": "user", "content": "Next step 0, but by train."}
        for _ in range(2):
            reply = client.messages.create(model=CLAUDE, max_tokens=64, system="You plan trips.", messages=history)
            history.append({"role": "assistant", "content": reply.content[0].text})
            history.append({"role": "user", "content": "Go on."})
        lines = _turns(log, 6)
    sessions = {l["session"] for l in lines}
    assert len(sessions) == 1, sessions
    assert [l["turn"] for l in lines] == [1, 2, 3, 4, 5, 6]
    assert _collapses(lines) == [(5, "messages[3]", "client_history", WRITE_TOKENS)]


def test_an_eviction_batch_is_one_collapse_attributed_to_eviction(tmp_path: Path) -> None:
    # A low-water mark of ceiling - 1 keeps steps of evict_batch (2), so nine turns give two
    # batches (the default, half the ceiling, would retire 4 at turn 7 and nothing more).
    images = (
        "[routes.images]\nmax_blocks = 6\nmax_blocks_small = 6\nevict_batch = 2\nevict_floor = 1\n"
        "evict_low_water = 5"
    )
    with MockUpstream() as mock, launch_proxy(tmp_path, _routes(mock, images)) as proxy:
        log = RequestLog(proxy.stderr_path)
        log.mark()
        client = _client(proxy.base_url + "/anthropic")
        full = anthropic_session(9, SMALL)
        # Turn k sends the opening user turn and k screenshot rounds.
        for k in range(1, 10):
            client.messages.create(model=CLAUDE, max_tokens=64, messages=full[: 1 + 2 * k])
        lines = _turns(log, 9)
        retired = [l["images_retired"] for l in lines]
    assert len({l["session"] for l in lines}) == 1
    # 7 images: the 2 oldest retired (carrier 0 is messages[2]); 9 images: 4 retired.
    assert retired == [0, 0, 0, 0, 0, 0, 2, 2, 4], retired
    assert _collapses(lines) == [
        (7, "messages[2]", "eviction", WRITE_TOKENS),
        (9, "messages[6]", "eviction", WRITE_TOKENS),
    ]


def _claude_code_bodies() -> list[bytes]:
    """Claude Code 2.1.197's three requests of one tool loop as sent to Anthropic's own API: the
    billing line's ``cch=`` differs on each."""
    bodies = [(FIXTURES / f"firstparty-3-tools-turn{i}.json").read_bytes() for i in (1, 2, 3)]
    lines = [json.loads(b)["system"][0]["text"] for b in bodies]
    assert len(set(lines)) == 3 and all("cch=" in l for l in lines), lines
    return bodies


def test_claude_codes_billing_line_is_one_session_and_churns_only_off_anthropic(tmp_path: Path) -> None:
    with MockUpstream() as mock, launch_proxy(tmp_path, _routes(mock)) as proxy:
        log = RequestLog(proxy.stderr_path)
        by_route = {}
        forwarded = {}
        for route in ("anthropic", "deepseek", "deepseek-raw"):
            log.mark()
            mock.clear()
            for body in _claude_code_bodies():
                r = raw_request(
                    proxy.base_url,
                    "POST",
                    f"/{route}/v1/messages?beta=true",
                    body,
                    {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"},
                )
                assert r.status == 200, r
            by_route[route] = _turns(log, 3)
            forwarded[route] = [q.json()["system"][0]["text"] for q in mock.matching("POST", "/v1/messages")]
    for route, lines in by_route.items():
        assert len({l["session"] for l in lines}) == 1, (route, lines)
        assert [l["turn"] for l in lines] == [1, 2, 3], route
    assert _collapses(by_route["anthropic"]) == []
    # deepseek's default stabiliser removes the line (docs/caching.md#prefix-stabilisers): the
    # forwarded system prompt is stable and nothing collapses; with `stabilize = []` it churns.
    assert [l["stabilized"] for l in by_route["deepseek"]] == [1, 1, 1]
    assert not any("x-anthropic-billing-header" in t for t in forwarded["deepseek"]), forwarded
    assert all("x-anthropic-billing-header" in t for t in forwarded["anthropic"] + forwarded["deepseek-raw"])
    assert _collapses(by_route["deepseek"]) == []
    assert _collapses(by_route["deepseek-raw"]) == [
        # The collapse names the block that changed: the billing line, system[0].
        (2, "system[0]", "client_system", WRITE_TOKENS),
        (3, "system[0]", "client_system", WRITE_TOKENS),
    ]


def test_the_session_header_names_the_session_and_is_not_forwarded(tmp_path: Path) -> None:
    with MockUpstream() as mock, launch_proxy(tmp_path, _routes(mock)) as proxy:
        log = RequestLog(proxy.stderr_path)
        log.mark()
        a = _client(proxy.base_url + "/anthropic", session="trip-planner-7")
        b = _client(proxy.base_url + "/anthropic")
        msgs = [{"role": "user", "content": "Hello."}]
        a.messages.create(model=CLAUDE, max_tokens=16, messages=msgs)
        # A different first message under the same name: still that session, turn 2.
        a.messages.create(model=CLAUDE, max_tokens=16, messages=[{"role": "user", "content": "Other."}])
        b.messages.create(model=CLAUDE, max_tokens=16, messages=copy.deepcopy(msgs))
        lines = _turns(log, 3)
        seen = [r.header("x-cachekeeper-session") for r in mock.matching("POST", "/v1/messages")]
    assert [(l["session"], l["turn"]) for l in lines[:2]] == [("trip-planner-7", 1), ("trip-planner-7", 2)]
    assert lines[2]["session"] != "trip-planner-7" and len(lines[2]["session"]) == 16
    assert seen == [None, None, None]


def test_count_tokens_is_no_turn(tmp_path: Path) -> None:
    with MockUpstream() as mock, launch_proxy(tmp_path, _routes(mock)) as proxy:
        log = RequestLog(proxy.stderr_path)
        log.mark()
        client = _client(proxy.base_url + "/anthropic")
        client.messages.count_tokens(model=CLAUDE, messages=[{"role": "user", "content": "Hello."}])
        line = log.one("/count_tokens")
    assert line.get("session") is None and line.get("turn") is None


def _metric(text: str, name: str, labels: dict[str, str]) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def test_usage_session_report_and_metrics_agree_with_the_mock(tmp_path: Path) -> None:
    turns = 6
    with MockUpstream() as mock, launch_proxy(tmp_path, _routes(mock)) as proxy:
        log = RequestLog(proxy.stderr_path)
        log.mark()
        client = _client(proxy.base_url + "/anthropic", session="agree-1")
        history: list[dict[str, Any]] = [{"role": "user", "content": "Count with me."}]
        for t in range(turns):
            if t == 4:
                history[1] = {"role": "assistant", "content": "One (edited)."}
            if t % 2:
                with client.messages.stream(model=CLAUDE, max_tokens=32, messages=history) as stream:
                    text = stream.get_final_text()
            else:
                text = client.messages.create(model=CLAUDE, max_tokens=32, messages=history).content[0].text
            history.append({"role": "assistant", "content": text})
            history.append({"role": "user", "content": f"And {t + 2}?"})
        lines = _turns(log, turns)
        with urllib.request.urlopen(f"{proxy.base_url}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        # The report reads the state file; the proxy writes it behind the requests.
        report: dict[str, Any] = {}
        for _ in range(50):
            out = subprocess.run(
                [str(_binary()), "report", "--config", str(proxy.config_path), "--session", "agree-1", "--json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert out.returncode == 0, out.stderr
            report = json.loads(out.stdout)
            if len(report.get("turns", [])) == turns:
                break
            time.sleep(0.1)
    want = {
        "uncached_input_tokens": ANTHROPIC_USAGE["input_tokens"] * turns,
        "cache_read_tokens": ANTHROPIC_USAGE["cache_read_input_tokens"] * turns,
        "cache_write_tokens": ANTHROPIC_USAGE["cache_creation_input_tokens"] * turns,
        "output_tokens": ANTHROPIC_USAGE["output_tokens"] * turns,
    }
    # The log lines, one per turn, sum to the mock's figures.
    for field, total in want.items():
        assert sum(l[field] for l in lines) == total, field
    summary = report["summary"]
    assert summary["turns"] == turns, report
    for field, total in want.items():
        assert summary[field] == total, (field, summary)
    assert summary["collapses"] == 1
    assert summary["collapse_write_tokens"] == WRITE_TOKENS
    assert [t["turn"] for t in report["turns"]] == list(range(1, turns + 1))
    assert [t["streamed"] for t in report["turns"]] == [t % 2 == 1 for t in range(turns)]
    assert [(t["turn"], t["collapse"]["at"], t["collapse"]["cause"]) for t in report["turns"] if t.get("collapse")] == [
        (5, "messages[1]", "client_history")
    ]
    labels = {"route": "anthropic", "model": CLAUDE}
    assert _metric(metrics, "cachekeeper_cache_read_tokens_total", labels) == want["cache_read_tokens"]
    assert _metric(metrics, "cachekeeper_cache_write_tokens_total", labels) == want["cache_write_tokens"]
    assert _metric(metrics, "cachekeeper_uncached_input_tokens_total", labels) == want["uncached_input_tokens"]
    assert _metric(metrics, "cachekeeper_output_tokens_total", labels) == want["output_tokens"]
    assert "agree-1" not in metrics
