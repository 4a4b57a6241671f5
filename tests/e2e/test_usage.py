"""End to end (issue 8, the response side): the usage each response reports reaches the request's
log line, read the way each provider means it, through the official SDKs (``anthropic``,
``openai`` chat and responses, ``google-genai``), streaming and not.

The log fields (absent = the provider did not report it, never 0):

- ``uncached_input_tokens`` = total prompt - cache read - cache write
- ``cache_read_tokens``, ``cache_write_tokens``
- ``cache_write_5m_tokens`` / ``cache_write_1h_tokens`` (Anthropic's TTL split only)
- ``output_tokens`` (reasoning included, as billed; Gemini: candidates + thoughts)
- ``reasoning_seen``: reasoning carriers seen in the response (each thinking / redacted_thinking
  block, a reasoning_content stream counts 1, each Responses reasoning item, each
  thoughtSignature)

The mock upstream (mock_upstream.py) issues the figures in its ``*_USAGE`` constants; the
expected log values below are written out by hand and checked against those constants first.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import anthropic
import openai
import pytest
from google.genai import types as gtypes

from conftest import RequestLog, launch_proxy
from helpers import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, raw_request
from mock_upstream import (
    ANTHROPIC_REDACTED,
    ANTHROPIC_SIGNATURE,
    ANTHROPIC_USAGE,
    DEEPSEEK_USAGE,
    DEFAULT_REPLY,
    GEMINI_SIGNATURE,
    GEMINI_USAGE,
    OPENAI_USAGE,
    OPENAI_USAGE_CACHE_WRITE,
    REASONING_CARRIERS,
    REASONING_TOKENS,
    RESPONSES_ENCRYPTED,
    RESPONSES_USAGE,
    RESPONSES_USAGE_CACHE_WRITE,
    MockUpstream,
)

if TYPE_CHECKING:
    from conftest import Capture, Proxy

CLAUDE = "claude-e2e-test-model"
GPT = "gpt-4.1"
GEMINI = "gemini-2.5-flash"
REWRITES_HEADER = "x-cachekeeper-rewrites"
HELLO = [{"role": "user", "content": "Say hello."}]



# =============================================================================================
# What the log line must say
# =============================================================================================


@dataclass(frozen=True)
class Usage:
    """The usage fields one request's log line carries; None = absent."""

    uncached: int | None
    read: int | None
    write: int | None
    write_5m: int | None
    write_1h: int | None
    output: int | None


FIELDS = (
    ("uncached", "uncached_input_tokens"),
    ("read", "cache_read_tokens"),
    ("write", "cache_write_tokens"),
    ("write_5m", "cache_write_5m_tokens"),
    ("write_1h", "cache_write_1h_tokens"),
    ("output", "output_tokens"),
)
USAGE_FIELDS = tuple(name for _, name in FIELDS)

# Anthropic: input_tokens (12) already excludes the cache; writes 248 = 148 (5m) + 100 (1h).
ANTHROPIC = Usage(uncached=12, read=5120, write=248, write_5m=148, write_1h=100, output=7)
# OpenAI Chat / Responses: 2006 prompt tokens include the 1920 read from the cache.
OPENAI = Usage(uncached=86, read=1920, write=None, write_5m=None, write_1h=None, output=7)
# ... and, on newer models, the 64 written to it.
OPENAI_CACHE_WRITE = Usage(uncached=22, read=1920, write=64, write_5m=None, write_1h=None, output=7)
# DeepSeek: hit = read, miss = uncached, no write figure.
DEEPSEEK = Usage(uncached=214, read=1792, write=None, write_5m=None, write_1h=None, output=7)
# Gemini: 2006 prompt tokens include 1920 cached; output = 7 candidates + 5 thoughts.
GEMINI_EXPECTED = Usage(uncached=86, read=1920, write=None, write_5m=None, write_1h=None, output=12)
NOT_REPORTED = Usage(None, None, None, None, None, None)


def assert_logged(line: dict[str, Any], want: Usage, reasoning: int | None = 0) -> None:
    """``line`` carries exactly ``want`` (absent where None) and ``reasoning`` carriers
    (``None``: not checked; 0 also accepts the field being absent)."""
    got = {name: line.get(name, "<absent>") for name in USAGE_FIELDS}
    expected = {name: ("<absent>" if getattr(want, attr) is None else getattr(want, attr)) for attr, name in FIELDS}
    assert got == expected, f"usage in the log line {got} != what the mock issued {expected}\nline: {line}"
    if reasoning is None:
        return
    seen = line.get("reasoning_seen", 0 if reasoning == 0 else "<absent>")
    assert seen == reasoning, f"reasoning_seen {seen!r}, the response carried {reasoning}\nline: {line}"


def assert_no_usage(line: dict[str, Any]) -> None:
    present = {name: line[name] for name in USAGE_FIELDS if name in line}
    assert not present, f"usage fields logged for a response that reported none: {present}\nline: {line}"
    assert line.get("reasoning_seen", 0) == 0, line


def knobs(**kw: Any) -> dict[str, str]:
    """Mock knob headers: ``knobs(usage="none", reasoning=1)`` -> ``x-mock-usage``, ``x-mock-reasoning``."""
    return {f"x-mock-{k.replace('_', '-')}": str(v) for k, v in kw.items() if v is not None}


def test_expected_figures_follow_from_what_the_mock_issues() -> None:
    """The hand-written expectations agree with the mock's usage constants (no proxy)."""
    a = ANTHROPIC_USAGE
    assert ANTHROPIC.uncached == a["input_tokens"]
    assert ANTHROPIC.read == a["cache_read_input_tokens"]
    assert ANTHROPIC.write == a["cache_creation_input_tokens"] == ANTHROPIC.write_5m + ANTHROPIC.write_1h  # type: ignore[operator]
    assert (ANTHROPIC.write_5m, ANTHROPIC.write_1h) == (
        a["cache_creation"]["ephemeral_5m_input_tokens"],
        a["cache_creation"]["ephemeral_1h_input_tokens"],
    )
    assert ANTHROPIC.output == a["output_tokens"]
    o = OPENAI_USAGE
    assert OPENAI.uncached == o["prompt_tokens"] - o["prompt_tokens_details"]["cached_tokens"]
    assert OPENAI.read == o["prompt_tokens_details"]["cached_tokens"] and OPENAI.output == o["completion_tokens"]
    w = OPENAI_USAGE_CACHE_WRITE["prompt_tokens_details"]
    assert OPENAI_CACHE_WRITE.uncached == OPENAI_USAGE_CACHE_WRITE["prompt_tokens"] - w["cached_tokens"] - w["cache_write_tokens"]
    assert OPENAI_CACHE_WRITE.write == w["cache_write_tokens"]
    d = DEEPSEEK_USAGE
    assert (DEEPSEEK.read, DEEPSEEK.uncached) == (d["prompt_cache_hit_tokens"], d["prompt_cache_miss_tokens"])
    assert d["prompt_cache_hit_tokens"] + d["prompt_cache_miss_tokens"] == d["prompt_tokens"]
    r = RESPONSES_USAGE
    assert OPENAI.uncached == r["input_tokens"] - r["input_tokens_details"]["cached_tokens"]
    rw = RESPONSES_USAGE_CACHE_WRITE["input_tokens_details"]
    assert OPENAI_CACHE_WRITE.uncached == RESPONSES_USAGE_CACHE_WRITE["input_tokens"] - rw["cached_tokens"] - rw["cache_write_tokens"]
    g = GEMINI_USAGE
    assert GEMINI_EXPECTED.uncached == g["promptTokenCount"] - g["cachedContentTokenCount"]
    assert GEMINI_EXPECTED.output == g["candidatesTokenCount"] + g["thoughtsTokenCount"]
    assert g["totalTokenCount"] == g["promptTokenCount"] + g["candidatesTokenCount"] + g["thoughtsTokenCount"]


# =============================================================================================
# One turn per dialect through its official SDK; each returns what the SDK parsed
# =============================================================================================


def anthropic_turn(client: anthropic.Anthropic, stream: bool, headers: dict[str, str]) -> Any:
    kwargs: dict[str, Any] = dict(model=CLAUDE, max_tokens=64, messages=HELLO, extra_headers=headers)
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()
    return client.messages.create(**kwargs)


def chat_turn(client: openai.OpenAI, stream: bool, headers: dict[str, str], include_usage: bool = True) -> tuple[str, Any, str]:
    """(text, usage or None, reasoning_content)."""
    if not stream:
        c = client.chat.completions.create(model=GPT, messages=HELLO, extra_headers=headers)
        msg = c.choices[0].message
        return msg.content or "", c.usage, (msg.model_extra or {}).get("reasoning_content") or ""
    kwargs: dict[str, Any] = {}
    if include_usage:
        kwargs["stream_options"] = {"include_usage": True}
    chunks = list(client.chat.completions.create(model=GPT, messages=HELLO, stream=True, extra_headers=headers, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices)
    usage = chunks[-1].usage if chunks and not chunks[-1].choices else None
    for c in chunks[:-1]:
        assert c.usage is None, "only the last chunk may carry usage"
    return text, usage, reasoning


def responses_turn(client: openai.OpenAI, stream: bool, headers: dict[str, str]) -> Any:
    if stream:
        with client.responses.stream(model=GPT, input="Say hello.", extra_headers=headers) as s:
            for _ in s:
                pass
            return s.get_final_response()
    return client.responses.create(model=GPT, input="Say hello.", extra_headers=headers)


def gemini_turn(client: Any, stream: bool, headers: dict[str, str]) -> tuple[list[Any], Any]:
    """(every part of the reply, in order; the last usage_metadata)."""
    config = gtypes.GenerateContentConfig(http_options=gtypes.HttpOptions(headers=headers))
    if stream:
        chunks = list(client.models.generate_content_stream(model=GEMINI, contents="Say hello.", config=config))
    else:
        chunks = [client.models.generate_content(model=GEMINI, contents="Say hello.", config=config)]
    parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]
    return parts, chunks[-1].usage_metadata


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
REASONING = pytest.mark.parametrize("reasoning", [False, True], ids=["plain", "reasoning"])


# =============================================================================================
# The usage each dialect reports, in the log line
# =============================================================================================


@STREAM
@REASONING
def test_anthropic_usage_is_logged(
    anthropic_client: anthropic.Anthropic, upstream: MockUpstream, request_log: RequestLog, stream: bool, reasoning: bool
) -> None:
    msg = anthropic_turn(anthropic_client, stream, knobs(reasoning=1 if reasoning else None))
    # what the SDK parsed: the mock is realistic
    assert msg.usage.cache_creation_input_tokens == 248
    assert msg.usage.cache_creation.ephemeral_5m_input_tokens == 148
    assert msg.usage.cache_creation.ephemeral_1h_input_tokens == 100
    assert msg.usage.output_tokens == 7, "the last message_delta's cumulative figure"
    assert msg.content[-1].text == DEFAULT_REPLY
    if reasoning:
        assert [b.type for b in msg.content] == ["thinking", "redacted_thinking", "text"]
        assert msg.content[0].signature == ANTHROPIC_SIGNATURE
        assert msg.content[1].data == ANTHROPIC_REDACTED
    line = request_log.one("/anthropic/v1/messages")
    assert_logged(line, ANTHROPIC, REASONING_CARRIERS["anthropic"] if reasoning else 0)


@STREAM
@REASONING
def test_openai_chat_usage_is_logged(
    openai_client: openai.OpenAI, upstream: MockUpstream, request_log: RequestLog, stream: bool, reasoning: bool
) -> None:
    text, usage, reasoning_text = chat_turn(openai_client, stream, knobs(reasoning=1 if reasoning else None))
    assert text == DEFAULT_REPLY
    assert usage is not None and usage.prompt_tokens_details.cached_tokens == 1920
    if reasoning:
        assert reasoning_text == "The user wants a greeting; answer briefly."
        assert usage.completion_tokens_details.reasoning_tokens == REASONING_TOKENS
    line = request_log.one("/openai/v1/chat/completions")
    # output_tokens is completion_tokens: the reasoning tokens are already inside it
    assert_logged(line, OPENAI, REASONING_CARRIERS["openai"] if reasoning else 0)


@STREAM
@REASONING
def test_openai_responses_usage_is_logged(
    openai_client: openai.OpenAI, upstream: MockUpstream, request_log: RequestLog, stream: bool, reasoning: bool
) -> None:
    r = responses_turn(openai_client, stream, knobs(reasoning=1 if reasoning else None))
    assert r.output_text == DEFAULT_REPLY
    assert r.usage is not None and r.usage.input_tokens_details.cached_tokens == 1920
    if reasoning:
        assert r.output[0].type == "reasoning" and r.output[0].encrypted_content == RESPONSES_ENCRYPTED
        assert r.usage.output_tokens_details.reasoning_tokens == REASONING_TOKENS
    line = request_log.one("/openai/v1/responses")
    assert_logged(line, OPENAI, REASONING_CARRIERS["responses"] if reasoning else 0)


@STREAM
@REASONING
def test_gemini_usage_is_logged(
    genai_client: Any, upstream: MockUpstream, request_log: RequestLog, stream: bool, reasoning: bool
) -> None:
    parts, meta = gemini_turn(genai_client, stream, knobs(reasoning=1 if reasoning else None))
    assert meta.prompt_token_count == 2006 and meta.cached_content_token_count == 1920
    assert meta.candidates_token_count == 7 and meta.thoughts_token_count == 5
    if reasoning:
        calls = [p.function_call for p in parts if p.function_call]
        assert [c.args["city"] for c in calls] == ["Paris", "Lyon"]
        assert parts[0].thought_signature == base64.b64decode(GEMINI_SIGNATURE)
        assert parts[1].thought_signature is None, "only the first call of a parallel batch is signed"
    else:
        assert "".join(p.text or "" for p in parts) == DEFAULT_REPLY
    method = "streamGenerateContent" if stream else "generateContent"
    line = request_log.one(f"/gemini/v1beta/models/{GEMINI}:{method}")
    assert_logged(line, GEMINI_EXPECTED, REASONING_CARRIERS["gemini"] if reasoning else 0)


@STREAM
@pytest.mark.parametrize("variant", ["deepseek", "cache-write"])
def test_openai_chat_usage_variants_are_logged(
    openai_client: openai.OpenAI, upstream: MockUpstream, request_log: RequestLog, stream: bool, variant: str
) -> None:
    """DeepSeek: read = prompt_cache_hit_tokens, uncached = prompt_cache_miss_tokens, write
    absent. Newer OpenAI models: prompt_tokens_details.cache_write_tokens is the write."""
    text, usage, _ = chat_turn(openai_client, stream, knobs(usage=variant))
    assert text == DEFAULT_REPLY and usage is not None
    if variant == "deepseek":
        assert usage.model_extra["prompt_cache_hit_tokens"] == 1792
        assert usage.prompt_tokens_details is None
    line = request_log.one("/openai/v1/chat/completions")
    assert_logged(line, DEEPSEEK if variant == "deepseek" else OPENAI_CACHE_WRITE)


@STREAM
def test_openai_responses_cache_write_is_logged(
    openai_client: openai.OpenAI, upstream: MockUpstream, request_log: RequestLog, stream: bool
) -> None:
    r = responses_turn(openai_client, stream, knobs(usage="cache-write"))
    assert r.output_text == DEFAULT_REPLY
    line = request_log.one("/openai/v1/responses")
    assert_logged(line, OPENAI_CACHE_WRITE)


# =============================================================================================
# Not reported -> absent
# =============================================================================================


def test_openai_stream_without_include_usage_logs_no_usage(
    openai_client: openai.OpenAI, upstream: MockUpstream, request_log: RequestLog
) -> None:
    text, usage, _ = chat_turn(openai_client, True, {}, include_usage=False)
    assert text == DEFAULT_REPLY and usage is None, "without include_usage the stream has no usage chunk"
    assert_no_usage(request_log.one("/openai/v1/chat/completions"))


GEN = {
    # dialect: (path, streaming path, body, streaming body)
    "anthropic": (
        "/anthropic/v1/messages",
        "/anthropic/v1/messages",
        {"model": CLAUDE, "max_tokens": 64, "messages": HELLO},
        {"model": CLAUDE, "max_tokens": 64, "messages": HELLO, "stream": True},
    ),
    "openai": (
        "/openai/v1/chat/completions",
        "/openai/v1/chat/completions",
        {"model": GPT, "messages": HELLO},
        {"model": GPT, "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}},
    ),
    "responses": (
        "/openai/v1/responses",
        "/openai/v1/responses",
        {"model": GPT, "input": "Say hello."},
        {"model": GPT, "input": "Say hello.", "stream": True},
    ),
    "gemini": (
        f"/gemini/v1beta/models/{GEMINI}:generateContent",
        f"/gemini/v1beta/models/{GEMINI}:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]},
        {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]},
    ),
}
AUTH = {
    "anthropic": {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"},
    "openai": {"authorization": f"Bearer {OPENAI_KEY}"},
    "responses": {"authorization": f"Bearer {OPENAI_KEY}"},
    "gemini": {"x-goog-api-key": GEMINI_KEY},
}
EXPECTED = {"anthropic": ANTHROPIC, "openai": OPENAI, "responses": OPENAI, "gemini": GEMINI_EXPECTED}
DIALECTS = pytest.mark.parametrize("dialect", list(GEN))


def raw_turn(proxy: Proxy, dialect: str, stream: bool, headers: dict[str, str] | None = None) -> Any:
    """One generation request with a raw HTTP client; returns (RawResponse, the log path)."""
    path, spath, body, sbody = GEN[dialect]
    p, b = (spath, sbody) if stream else (path, body)
    h = dict(AUTH[dialect])
    h.update(headers or {})
    return raw_request(proxy.base_url, "POST", p, json.dumps(b).encode(), h), p.split("?", 1)[0]


@STREAM
@DIALECTS
def test_no_usage_reported_logs_no_usage(
    proxy: Proxy, upstream: MockUpstream, request_log: RequestLog, dialect: str, stream: bool
) -> None:
    r, path = raw_turn(proxy, dialect, stream, knobs(usage="none"))
    assert r.status == 200 and r.complete
    assert r.body == bytes(upstream.last("POST").response_body)
    assert_no_usage(request_log.one(path))


def test_count_tokens_is_not_usage(
    anthropic_client: anthropic.Anthropic, genai_client: Any, upstream: MockUpstream, request_log: RequestLog
) -> None:
    """count_tokens answers `{"input_tokens": N}` and countTokens `{"totalTokens": N}`: a count,
    not a generation's usage."""
    assert anthropic_client.messages.count_tokens(model=CLAUDE, messages=HELLO).input_tokens > 0
    assert genai_client.models.count_tokens(model=GEMINI, contents="Say hello.").total_tokens > 0
    assert_no_usage(request_log.one("/anthropic/v1/messages/count_tokens"))
    assert_no_usage(request_log.one(f"/gemini/v1beta/models/{GEMINI}:countTokens"))


# =============================================================================================
# Encoded and oddly shaped responses still give the usage
# =============================================================================================


@STREAM
@DIALECTS
def test_gzip_encoded_response_still_gives_the_usage(
    anthropic_client: anthropic.Anthropic,
    openai_client: openai.OpenAI,
    genai_client: Any,
    upstream: MockUpstream,
    request_log: RequestLog,
    dialect: str,
    stream: bool,
) -> None:
    """The SDKs ask for gzip (httpx's default accept-encoding); the mock answers gzip-encoded;
    the SDK decodes it and the proxy's observer decodes its copy."""
    h = knobs(gzip=1, reasoning=1)
    if dialect == "anthropic":
        msg = anthropic_turn(anthropic_client, stream, h)
        assert msg.content[-1].text == DEFAULT_REPLY and msg.usage.cache_read_input_tokens == 5120
        path = "/anthropic/v1/messages"
    elif dialect == "openai":
        text, usage, _ = chat_turn(openai_client, stream, h)
        assert text == DEFAULT_REPLY and usage is not None
        path = "/openai/v1/chat/completions"
    elif dialect == "responses":
        assert responses_turn(openai_client, stream, h).output_text == DEFAULT_REPLY
        path = "/openai/v1/responses"
    else:
        parts, meta = gemini_turn(genai_client, stream, h)
        assert meta.thoughts_token_count == 5 and parts[0].thought_signature
        path = f"/gemini/v1beta/models/{GEMINI}:{'streamGenerateContent' if stream else 'generateContent'}"
    rec = upstream.last("POST")
    assert rec.response_header("content-encoding") == "gzip", "the mock did not gzip: the SDK sent no accept-encoding gzip?"
    assert_logged(request_log.one(path), EXPECTED[dialect], REASONING_CARRIERS[dialect])


SHAPES = {
    "comments_and_pings": knobs(sse_extras=1),
    "crlf": knobs(crlf=1),
    "split_7_bytes": knobs(split=7),
    "gzip_split_5_bytes": knobs(gzip=1, split=5),
    "crlf_comments_split_3": knobs(crlf=1, sse_extras=1, split=3),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@DIALECTS
def test_stream_shapes_still_give_the_usage(
    proxy: Proxy, upstream: MockUpstream, request_log: RequestLog, dialect: str, shape: str
) -> None:
    """Comment lines, ping events, CRLF line ends, events split across chunks at any byte, a
    gzip stream cut into 5-byte chunks: the client gets the mock's bytes, the log the usage."""
    h = dict(SHAPES[shape])
    h["x-mock-reasoning"] = "1"
    if "x-mock-gzip" in h:
        h["accept-encoding"] = "gzip"
    r, path = raw_turn(proxy, dialect, True, h)
    rec = upstream.last("POST")
    assert r.status == 200 and r.complete
    assert r.body == bytes(rec.response_body), "the client's bytes differ from the mock's"
    assert_logged(request_log.one(path), EXPECTED[dialect], REASONING_CARRIERS[dialect])


# =============================================================================================
# Garbage responses: passed through unchanged, no usage, the proxy keeps serving
# =============================================================================================

GARBAGE = [
    ("not_json", False),
    ("not_sse", True),
    ("invalid_utf8", False),
    ("invalid_utf8", True),
    ("big_json", False),
]


@pytest.mark.parametrize("kind,stream", GARBAGE, ids=[f"{k}-{'sse' if s else 'json'}" for k, s in GARBAGE])
@DIALECTS
def test_garbage_response_passes_through_without_usage(
    proxy: Proxy, upstream: MockUpstream, request_log: RequestLog, dialect: str, kind: str, stream: bool
) -> None:
    r, path = raw_turn(proxy, dialect, stream, knobs(garbage=kind))
    rec = upstream.last("POST")
    assert r.status == 200 and r.complete
    assert len(r.body) == len(rec.response_body)
    assert r.body == bytes(rec.response_body), "the client did not get the garbage unchanged"
    if kind == "big_json":
        assert len(r.body) > 50_000_000
    assert_no_usage(request_log.one(path))
    # the proxy still answers the next request
    request_log.mark()
    ok, path = raw_turn(proxy, dialect, stream)
    assert ok.status == 200 and ok.complete
    assert ok.body == bytes(upstream.last("POST").response_body)
    request_log.one(path)
    proxy.assert_alive()


# =============================================================================================
# usage_in_streams = true on an OpenAI Chat route
# =============================================================================================


@pytest.fixture(scope="module")
def usage_proxy(mock_upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp: Path = tmp_path_factory.mktemp("cachekeeper-usage-in-streams")
    routes = f"""[[routes]]
name = "openai-usage"
prefix = "/openai"
upstream = "{mock_upstream.url}"
usage_in_streams = true
"""
    with launch_proxy(tmp, routes) as p:
        yield p


@pytest.fixture
def usage_openai(usage_proxy: Proxy, sent: Capture) -> Iterator[openai.OpenAI]:
    http = openai.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
    client = openai.OpenAI(
        base_url=usage_proxy.openai_base_url, api_key=OPENAI_KEY, max_retries=0, timeout=30.0, http_client=http
    )
    yield client
    client.close()


def _names_usage_in_streams(value: str | None) -> bool:
    """Whether ``x-cachekeeper-rewrites`` says the usage_in_streams rewrite was done."""
    for part in (value or "").split(";"):
        part = part.strip()
        if part == "usage_in_streams":
            return True
        if part.startswith("usage_in_streams="):
            return part.split("=", 1)[1].strip() not in ("0", "false", "")
    return False


def _without_stream_options(body: bytes) -> dict[str, Any]:
    obj = json.loads(body)
    obj.pop("stream_options", None)
    return obj


@pytest.mark.parametrize(
    "stream_options",
    [None, {"include_obfuscation": False}],
    ids=["no_stream_options", "stream_options_without_include_usage"],
)
def test_usage_in_streams_adds_include_usage(
    usage_proxy: Proxy,
    usage_openai: openai.OpenAI,
    mock_upstream: MockUpstream,
    sent: Capture,
    stream_options: dict[str, Any] | None,
) -> None:
    mock_upstream.clear()
    log = usage_proxy.request_log()
    extra: dict[str, Any] = {} if stream_options is None else {"stream_options": stream_options}
    stream = usage_openai.chat.completions.create(model=GPT, messages=HELLO, stream=True, **extra)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEFAULT_REPLY
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, "the client gets the usage chunk, empty choices"
    assert last.usage.prompt_tokens_details.cached_tokens == 1920
    assert _names_usage_in_streams(stream.response.headers.get(REWRITES_HEADER)), stream.response.headers.get(REWRITES_HEADER)

    rec = mock_upstream.last("POST", "/chat/completions")
    got = json.loads(rec.body)
    want_options = dict(stream_options or {}, include_usage=True)
    assert got["stream_options"] == want_options
    if stream_options is None:
        assert b'"stream_options":{"include_usage":true}' in rec.body, rec.body
    assert _without_stream_options(rec.body) == _without_stream_options(sent.last().body), "only stream_options may change"
    assert_logged(log.one("/openai/v1/chat/completions"), OPENAI)


@pytest.mark.parametrize("include_usage", [True, False], ids=["include_usage_true", "include_usage_false"])
def test_usage_in_streams_leaves_include_usage_requests_byte_identical(
    usage_proxy: Proxy, usage_openai: openai.OpenAI, mock_upstream: MockUpstream, sent: Capture, include_usage: bool
) -> None:
    """A request that says include_usage (true, or false: the client's choice) goes upstream
    byte-identical."""
    mock_upstream.clear()
    log = usage_proxy.request_log()
    stream = usage_openai.chat.completions.create(
        model=GPT, messages=HELLO, stream=True, stream_options={"include_usage": include_usage}
    )
    chunks = list(stream)
    assert (chunks[-1].choices == [] and chunks[-1].usage is not None) == include_usage
    assert not _names_usage_in_streams(stream.response.headers.get(REWRITES_HEADER))
    assert mock_upstream.last("POST", "/chat/completions").body == sent.last().body
    line = log.one("/openai/v1/chat/completions")
    if include_usage:
        assert_logged(line, OPENAI)
    else:
        assert_no_usage(line)


def test_usage_in_streams_leaves_non_streaming_and_responses_untouched(
    usage_proxy: Proxy, usage_openai: openai.OpenAI, mock_upstream: MockUpstream, sent: Capture
) -> None:
    """Only OpenAI Chat requests with `stream: true` are rewritten."""
    mock_upstream.clear()
    raw = usage_openai.chat.completions.with_raw_response.create(model=GPT, messages=HELLO)
    assert raw.parse().usage is not None
    assert not _names_usage_in_streams(raw.headers.get(REWRITES_HEADER))
    assert mock_upstream.last("POST", "/chat/completions").body == sent.last().body

    stream = usage_openai.responses.create(model=GPT, input="Say hello.", stream=True)
    events = list(stream)
    assert events[-1].type == "response.completed" and events[-1].response.usage is not None
    assert not _names_usage_in_streams(stream.response.headers.get(REWRITES_HEADER))
    assert mock_upstream.last("POST", "/responses").body == sent.last().body
