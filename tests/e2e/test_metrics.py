"""End to end (issue 10): ``GET /metrics`` after scripted requests through the official SDKs,
parsed with the Prometheus project's own text-format parser
(``prometheus_client.parser.text_string_to_metric_families``).

A fresh proxy with a ``client_token`` (so the counters start at zero and the token forms are
exercised from real clients: the Anthropic and Gemini SDKs get a ``/t/<token>/`` base URL, the
OpenAI SDK sends ``x-cachekeeper-token``; ``/metrics`` is read with ``Authorization: Bearer``).
Every request names the session ``sess-secret-123``. Checked:

- the token counters by route and model equal the sums of the mock's ``*_USAGE`` figures, one
  response at a time, streamed and not (a stream's usage, reported on several events, is
  counted once);
- a stream that reported no usage counts as ``usage_not_reported``, never as zeros;
- no label value holds the session id, an API key or the client token;
- the overhead histograms have one observation per request sent upstream.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gtypes
from prometheus_client.parser import text_string_to_metric_families

from conftest import Proxy, launch_proxy
from helpers import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY
from mock_upstream import ANTHROPIC_USAGE, GEMINI_USAGE, OPENAI_USAGE, MockUpstream

TOKEN = "e2e-client-token-4242"
SESSION = "sess-secret-123"
CLAUDE = "claude-e2e-test-model"
GPT = "gpt-4.1"
GEMINI = "gemini-2.5-flash"
HELLO = [{"role": "user", "content": "Say hello."}]
HEADERS = {"x-cachekeeper-session": SESSION}


@pytest.fixture(scope="module")
def metered(mock_upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("metrics")
    routes = "\n".join(
        f'[[routes]]\nname = "{name}"\nprefix = "/{name}"\nupstream = "{mock_upstream.url}"\n'
        for name in ("anthropic", "openai", "gemini")
    )
    with launch_proxy(tmp, routes, f'client_token = "{TOKEN}"') as p:
        yield p


def scrape(proxy: Proxy, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(f"{proxy.base_url}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(got: Samples, name: str, **labels: str) -> float | None:
    return got.get((name, frozenset(labels.items())))


def total(got: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(
        v for (n, ls), v in got.items() if n == name and set(labels.items()) <= ls
    )


# The expected per-response figures, from the mock's constants (as docs/usage.md reads them).
ANTHROPIC_ONE = {
    "uncached_input": ANTHROPIC_USAGE["input_tokens"],
    "cache_read": ANTHROPIC_USAGE["cache_read_input_tokens"],
    "cache_write": ANTHROPIC_USAGE["cache_creation_input_tokens"],
    "output": ANTHROPIC_USAGE["output_tokens"],
}
OPENAI_ONE = {
    "uncached_input": OPENAI_USAGE["prompt_tokens"] - OPENAI_USAGE["prompt_tokens_details"]["cached_tokens"],
    "cache_read": OPENAI_USAGE["prompt_tokens_details"]["cached_tokens"],
    "output": OPENAI_USAGE["completion_tokens"],
}
GEMINI_ONE = {
    "uncached_input": GEMINI_USAGE["promptTokenCount"] - GEMINI_USAGE["cachedContentTokenCount"],
    "cache_read": GEMINI_USAGE["cachedContentTokenCount"],
    "output": GEMINI_USAGE["candidatesTokenCount"] + GEMINI_USAGE["thoughtsTokenCount"],
}


def test_constants_read_as_written_by_hand() -> None:
    assert ANTHROPIC_ONE == {"uncached_input": 12, "cache_read": 5120, "cache_write": 248, "output": 7}
    assert OPENAI_ONE == {"uncached_input": 86, "cache_read": 1920, "output": 7}
    assert GEMINI_ONE == {"uncached_input": 86, "cache_read": 1920, "output": 12}


def run_session(proxy: Proxy) -> dict[str, int]:
    """The scripted requests; returns how many went to each route."""
    sent: dict[str, int] = defaultdict(int)
    claude = anthropic.Anthropic(
        base_url=f"{proxy.base_url}/t/{TOKEN}/anthropic", api_key=ANTHROPIC_KEY, max_retries=0, timeout=30.0
    )
    for stream in (False, True, False):
        kwargs: dict[str, Any] = dict(model=CLAUDE, max_tokens=64, messages=HELLO, extra_headers=HEADERS)
        if stream:
            with claude.messages.stream(**kwargs) as s:
                s.get_final_message()
        else:
            claude.messages.create(**kwargs)
        sent["anthropic"] += 1
    claude.close()

    gpt = openai.OpenAI(
        base_url=f"{proxy.base_url}/openai/v1",
        api_key=OPENAI_KEY,
        max_retries=0,
        timeout=30.0,
        default_headers={"x-cachekeeper-token": TOKEN},
    )
    gpt.chat.completions.create(model=GPT, messages=HELLO, extra_headers=HEADERS)
    list(
        gpt.chat.completions.create(
            model=GPT, messages=HELLO, stream=True, stream_options={"include_usage": True}, extra_headers=HEADERS
        )
    )
    # No include_usage: the stream reports no usage at all.
    list(gpt.chat.completions.create(model=GPT, messages=HELLO, stream=True, extra_headers=HEADERS))
    sent["openai"] += 3
    gpt.close()

    gem = genai.Client(
        api_key=GEMINI_KEY,
        http_options=gtypes.HttpOptions(base_url=f"{proxy.base_url}/t/{TOKEN}/gemini", api_version="v1beta"),
    )
    config = gtypes.GenerateContentConfig(http_options=gtypes.HttpOptions(headers=HEADERS))
    gem.models.generate_content(model=GEMINI, contents="Say hello.", config=config)
    # Gemini reports usageMetadata on every chunk: counted once, from the last.
    list(gem.models.generate_content_stream(model=GEMINI, contents="Say hello.", config=config))
    sent["gemini"] += 2
    return dict(sent)


def wait_counted(proxy: Proxy, want: int) -> Samples:
    """The metrics once every request is counted (a line is written just after the body ends)."""
    import time

    deadline = time.monotonic() + 10
    while True:
        status, text = scrape(proxy, {"authorization": f"Bearer {TOKEN}"})
        assert status == 200, text
        got = samples(text)
        if total(got, "cachekeeper_requests_total") >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_metrics_agree_with_the_mock_and_hold_no_secrets(metered: Proxy, mock_upstream: MockUpstream) -> None:
    assert scrape(metered, {})[0] == 401
    assert scrape(metered, {"authorization": "Bearer wrong"})[0] == 401
    mock_upstream.clear()
    sent = run_session(metered)
    n = sum(sent.values())
    got = wait_counted(metered, n)

    # Every request reached the mock without the token in its path.
    assert len(mock_upstream.requests) == n
    for r in mock_upstream.requests:
        assert TOKEN not in r.path and "/t/" not in r.path, r.path

    for route, count in sent.items():
        assert total(got, "cachekeeper_requests_total", route=route, status_class="2xx", outcome="complete") == count

    def tokens(kind: str, route: str, model: str) -> float | None:
        return value(got, f"cachekeeper_{kind}_tokens_total", route=route, model=model)

    for kind, per in ANTHROPIC_ONE.items():
        assert tokens(kind, "anthropic", CLAUDE) == 3 * per, kind
    # Two OpenAI responses reported usage (the third had none); no cache-write figure at all.
    for kind, per in OPENAI_ONE.items():
        assert tokens(kind, "openai", GPT) == 2 * per, kind
    assert tokens("cache_write", "openai", GPT) is None, "not reported is not 0"
    for kind, per in GEMINI_ONE.items():
        assert tokens(kind, "gemini", GEMINI) == 2 * per, kind
    assert value(got, "cachekeeper_usage_not_reported_total", route="openai") == 1
    assert value(got, "cachekeeper_usage_not_reported_total", route="anthropic") is None

    # One overhead observation per request sent upstream, each side.
    for route, count in sent.items():
        assert value(got, "cachekeeper_request_overhead_seconds_count", route=route) == count
        assert value(got, "cachekeeper_response_overhead_seconds_count", route=route) == count

    secrets = [SESSION, TOKEN, ANTHROPIC_KEY, OPENAI_KEY, GEMINI_KEY]
    for (name, labels), _ in got.items():
        for k, v in labels:
            for secret in secrets:
                assert secret not in v, f"{name} label {k}={v!r} holds a secret"
    _, text = scrape(metered, {"x-cachekeeper-token": TOKEN})
    for secret in secrets:
        assert secret not in text
    # The session id, the keys and the token never reach the log either.
    log = Path(metered.stderr_path).read_text()
    for secret in [TOKEN, ANTHROPIC_KEY, OPENAI_KEY, GEMINI_KEY]:
        assert secret not in log


def test_every_response_carries_the_overhead_header(metered: Proxy) -> None:
    for path, headers, want in [
        ("/healthz", {}, 200),
        ("/metrics", {}, 401),
        (f"/t/{TOKEN}/metrics", {}, 200),
        ("/nope", {"x-cachekeeper-token": TOKEN}, 404),
    ]:
        req = urllib.request.Request(f"{metered.base_url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, h = r.status, r.headers
        except urllib.error.HTTPError as e:
            status, h = e.code, e.headers
        assert status == want, path
        ms = h["x-cachekeeper-overhead-ms"]
        assert ms is not None and float(ms) >= 0 and len(ms.split(".")[1]) == 3, (path, ms)
