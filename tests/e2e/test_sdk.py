"""End to end: the official anthropic and openai SDKs talk to a mock provider through cachekeeper.

Each test checks both sides: what the SDK parsed (text, usage, headers) and what the mock upstream
received (path, query, headers, body bytes).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
import openai
import pytest

from helpers import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    LARGE,
    SCREENSHOT_TOOL_ANTHROPIC,
    SCREENSHOT_TOOL_OPENAI,
    SMALL,
    anthropic_carrier_index,
    anthropic_session,
    assert_retired_text,
    count_anthropic_images,
    count_openai_images,
    fake_png_b64,
    openai_carrier_index,
    openai_session,
    openai_user_turn_carrier_index,
    openai_user_turn_session,
    top_level_array_items,
)
from mock_upstream import ANTHROPIC_USAGE, DEFAULT_REPLY, MODEL_IDS, OPENAI_USAGE, MockUpstream

if TYPE_CHECKING:
    from conftest import Capture, Proxy

CLAUDE = "claude-e2e-test-model"  # not a real model: keeps the SDK from warning about deprecations
GPT = "gpt-4.1"
REWRITES_HEADER = "x-cachekeeper-rewrites"
FIRST_STEP = 11  # 21 images > the ceiling of 20: retired down to the low-water mark (half of 20: 10 left); batches of 8 before the low-water mark


def _rewrites(headers: Any) -> dict[str, str]:
    """Parse ``x-cachekeeper-rewrites: images_seen=21; images_retired=8; ...`` into a dict."""
    value = headers.get(REWRITES_HEADER)
    assert value is not None, f"response lacks {REWRITES_HEADER}: {dict(headers)}"
    out: dict[str, str] = {}
    for part in value.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _assert_event_stream_headers(headers: Any) -> None:
    assert headers.get("content-type", "").startswith("text/event-stream")
    assert headers.get("x-accel-buffering") == "no", "event streams must tell a fronting nginx not to buffer"
    assert REWRITES_HEADER in headers


def _assert_forwarded_identical(upstream: MockUpstream, sent: Capture, path_suffix: str) -> None:
    got = upstream.last("POST", path_suffix)
    want = sent.last().body
    assert got.body == want, (
        f"the body that reached the upstream differs from what the SDK sent "
        f"({len(got.body)} vs {len(want)} bytes); nothing needed rewriting"
    )


def _assert_credentials_untouched(rec: Any, sent: Capture) -> None:
    """Every credential header the SDK sent reached the upstream with the same value."""
    sent_headers = {k.lower(): v for k, v in sent.last().headers.items()}
    creds = [h for h in ("x-api-key", "authorization") if h in sent_headers]
    assert creds, "the SDK sent no credential header"
    for h in creds:
        assert rec.header_all(h) == [sent_headers[h]], f"{h} did not reach the upstream untouched"


def _assert_upstream_host(upstream: MockUpstream, rec: Any) -> None:
    assert rec.header("host") == f"127.0.0.1:{upstream.port}", f"host header not set for the upstream: {rec.header('host')!r}"


# =============================================================================================
# Plumbing
# =============================================================================================


def test_healthz(proxy: Proxy) -> None:
    r = httpx2.get(f"{proxy.base_url}/healthz", timeout=5)
    assert r.status_code == 200


def test_unknown_route_is_a_cachekeeper_404(proxy: Proxy, upstream: MockUpstream) -> None:
    r = httpx2.post(f"{proxy.base_url}/nowhere/v1/chat/completions", json={"model": GPT, "messages": []}, timeout=10)
    assert r.status_code == 404, r.text
    body = r.json()
    message = body["error"]["message"]  # OpenAI / Anthropic shapes both nest it under "error"
    assert message.startswith("cachekeeper:"), message
    assert "/anthropic" in message and "/openai" in message, f"404 should list the prefixes: {message}"
    assert upstream.requests == [], "an unknown route must not reach any upstream"


# =============================================================================================
# Anthropic Messages through the SDK
# =============================================================================================

HELLO_ANTHROPIC = [{"role": "user", "content": "Say hello."}]


def test_anthropic_create(anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture) -> None:
    raw = anthropic_client.messages.with_raw_response.create(model=CLAUDE, max_tokens=64, messages=HELLO_ANTHROPIC)
    msg = raw.parse()
    assert msg.content[0].type == "text"
    assert msg.content[0].text == DEFAULT_REPLY
    assert msg.usage.input_tokens == ANTHROPIC_USAGE["input_tokens"]
    assert msg.usage.cache_read_input_tokens == ANTHROPIC_USAGE["cache_read_input_tokens"]
    assert msg.usage.output_tokens == ANTHROPIC_USAGE["output_tokens"]
    assert REWRITES_HEADER in raw.headers, dict(raw.headers)

    rec = upstream.last("POST", "/v1/messages")
    assert rec.path == "/v1/messages"
    assert rec.header("x-api-key") == ANTHROPIC_KEY
    assert rec.header("authorization") == f"Bearer {ANTHROPIC_KEY}"
    _assert_credentials_untouched(rec, sent)
    assert rec.header("anthropic-version") == sent.last().headers["anthropic-version"]
    _assert_upstream_host(upstream, rec)
    _assert_forwarded_identical(upstream, sent, "/v1/messages")


def test_anthropic_messages_stream(anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture) -> None:
    with anthropic_client.messages.stream(model=CLAUDE, max_tokens=64, messages=HELLO_ANTHROPIC) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
        headers = stream.response.headers
    assert "".join(pieces) == DEFAULT_REPLY
    assert len(pieces) > 1, "the mock streams several deltas"
    assert final.content[0].text == DEFAULT_REPLY
    assert final.stop_reason == "end_turn"
    assert final.usage.cache_read_input_tokens == ANTHROPIC_USAGE["cache_read_input_tokens"]
    assert final.usage.output_tokens == ANTHROPIC_USAGE["output_tokens"]
    _assert_event_stream_headers(headers)

    rec = upstream.last("POST", "/v1/messages")
    assert upstream.wait_completed(rec), "the mock did not finish writing the stream"
    _assert_credentials_untouched(rec, sent)
    _assert_forwarded_identical(upstream, sent, "/v1/messages")
    assert json.loads(rec.body)["stream"] is True


def test_anthropic_create_stream_true(anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture) -> None:
    stream = anthropic_client.messages.create(model=CLAUDE, max_tokens=64, messages=HELLO_ANTHROPIC, stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    for k in ("content_block_start", "content_block_delta", "content_block_stop", "message_delta"):
        assert k in kinds, kinds
    start = events[0]
    assert start.message.usage.cache_read_input_tokens == ANTHROPIC_USAGE["cache_read_input_tokens"]
    assert start.message.usage.input_tokens == ANTHROPIC_USAGE["input_tokens"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == DEFAULT_REPLY
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.output_tokens == ANTHROPIC_USAGE["output_tokens"]
    _assert_event_stream_headers(stream.response.headers)
    _assert_forwarded_identical(upstream, sent, "/v1/messages")


def test_anthropic_stream_is_not_buffered(anthropic_client: anthropic.Anthropic, upstream: MockUpstream) -> None:
    """The mock holds the stream after its first event until the client has seen that event."""
    gate = upstream.gate("anthropic-first-event")
    got_first = threading.Event()
    with anthropic_client.messages.stream(
        model=CLAUDE, max_tokens=64, messages=HELLO_ANTHROPIC, extra_headers={"x-mock-gate": "anthropic-first-event"}
    ) as stream:
        for event in stream:
            if not got_first.is_set():
                assert event.type == "message_start"
                assert not gate.is_set()
                got_first.set()
                gate.set()  # only now may the upstream send the rest
        final = stream.get_final_message()
    assert final.content[0].text == DEFAULT_REPLY
    rec = upstream.last("POST", "/v1/messages")
    assert rec.gate_released is True, "the client saw the first event only after the upstream gave up waiting: buffered"


def test_anthropic_query_and_headers_pass_through(anthropic_client: anthropic.Anthropic, upstream: MockUpstream) -> None:
    anthropic_client.messages.create(
        model=CLAUDE,
        max_tokens=16,
        messages=HELLO_ANTHROPIC,
        extra_query={"beta": "true"},
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31", "x-cachekeeper-debug": "1", "x-agent-session": "abc"},
    )
    rec = upstream.last("POST", "/v1/messages")
    assert rec.path == "/v1/messages"
    assert rec.query == "beta=true"
    assert rec.header("anthropic-beta") == "prompt-caching-2024-07-31"
    assert rec.header("x-agent-session") == "abc"
    assert rec.header("x-cachekeeper-debug") is None, "x-cachekeeper-* request headers must not leave the proxy"


def test_anthropic_upstream_error_passes_through(anthropic_client: anthropic.Anthropic, upstream: MockUpstream) -> None:
    with pytest.raises(anthropic.BadRequestError) as exc:
        anthropic_client.messages.create(
            model=CLAUDE, max_tokens=16, messages=HELLO_ANTHROPIC, extra_headers={"x-mock-status": "400"}
        )
    assert exc.value.status_code == 400
    assert exc.value.body["error"]["message"] == "mock upstream: forced status 400"


def test_anthropic_models_list(anthropic_client: anthropic.Anthropic, upstream: MockUpstream) -> None:
    models = list(anthropic_client.models.list())
    assert [m.id for m in models] == MODEL_IDS
    rec = upstream.last("GET", "/v1/models")
    assert rec.header("x-api-key") == ANTHROPIC_KEY


def test_anthropic_count_tokens(anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture) -> None:
    r = anthropic_client.messages.count_tokens(model=CLAUDE, messages=HELLO_ANTHROPIC)
    assert r.input_tokens > 0
    _assert_forwarded_identical(upstream, sent, "/v1/messages/count_tokens")


# =============================================================================================
# OpenAI Chat Completions through the SDK
# =============================================================================================

HELLO_OPENAI = [{"role": "user", "content": "Say hello."}]


def test_openai_create(openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture) -> None:
    raw = openai_client.chat.completions.with_raw_response.create(model=GPT, messages=HELLO_OPENAI)
    completion = raw.parse()
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == OPENAI_USAGE["prompt_tokens"]
    assert completion.usage.prompt_tokens_details.cached_tokens == OPENAI_USAGE["prompt_tokens_details"]["cached_tokens"]
    assert REWRITES_HEADER in raw.headers, dict(raw.headers)

    rec = upstream.last("POST", "/chat/completions")
    assert rec.path == "/v1/chat/completions"
    assert rec.header("authorization") == f"Bearer {OPENAI_KEY}"
    _assert_upstream_host(upstream, rec)
    _assert_forwarded_identical(upstream, sent, "/chat/completions")


def test_openai_stream_include_usage(openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture) -> None:
    stream = openai_client.chat.completions.create(
        model=GPT, messages=HELLO_OPENAI, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == DEFAULT_REPLY
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, "include_usage chunk must come last"
    assert last.usage.completion_tokens == OPENAI_USAGE["completion_tokens"]
    assert last.usage.prompt_tokens_details.cached_tokens == OPENAI_USAGE["prompt_tokens_details"]["cached_tokens"]
    _assert_event_stream_headers(stream.response.headers)

    rec = upstream.last("POST", "/chat/completions")
    assert upstream.wait_completed(rec), "the mock did not finish writing the stream"
    assert rec.header("authorization") == f"Bearer {OPENAI_KEY}"
    _assert_credentials_untouched(rec, sent)
    _assert_forwarded_identical(upstream, sent, "/chat/completions")


def test_openai_stream_is_not_buffered(openai_client: openai.OpenAI, upstream: MockUpstream) -> None:
    gate = upstream.gate("openai-first-chunk")
    seen = 0
    stream = openai_client.chat.completions.create(
        model=GPT, messages=HELLO_OPENAI, stream=True, extra_headers={"x-mock-gate": "openai-first-chunk"}
    )
    text = ""
    for chunk in stream:
        seen += 1
        if seen == 1:
            assert chunk.choices[0].delta.role == "assistant"
            assert not gate.is_set()
            gate.set()
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert text == DEFAULT_REPLY
    rec = upstream.last("POST", "/chat/completions")
    assert rec.gate_released is True, "the client saw the first chunk only after the upstream gave up waiting: buffered"


def test_openai_upstream_error_passes_through(openai_client: openai.OpenAI, upstream: MockUpstream) -> None:
    with pytest.raises(openai.RateLimitError) as exc:
        openai_client.chat.completions.create(model=GPT, messages=HELLO_OPENAI, extra_headers={"x-mock-status": "429"})
    assert exc.value.status_code == 429
    assert "forced status 429" in str(exc.value)


def test_openai_models_list(openai_client: openai.OpenAI, upstream: MockUpstream) -> None:
    models = list(openai_client.models.list())
    assert [m.id for m in models] == MODEL_IDS
    rec = upstream.last("GET", "/v1/models")
    assert rec.header("authorization") == f"Bearer {OPENAI_KEY}"
    assert rec.body == b""


# =============================================================================================
# OpenAI Responses (Codex's wire format) and Gemini: forwarded untouched, streamed
# =============================================================================================


def test_openai_responses_create(openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture) -> None:
    raw = openai_client.responses.with_raw_response.create(model=GPT, input="Say hello.")
    r = raw.parse()
    assert r.output_text == DEFAULT_REPLY
    assert r.usage is not None and r.usage.input_tokens_details.cached_tokens == 1920
    assert REWRITES_HEADER in raw.headers
    rec = upstream.last("POST", "/responses")
    assert rec.path == "/v1/responses"
    _assert_credentials_untouched(rec, sent)
    _assert_forwarded_identical(upstream, sent, "/responses")


def test_openai_responses_stream(openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture) -> None:
    with openai_client.responses.stream(model=GPT, input=[{"role": "user", "content": "Say hello."}]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == DEFAULT_REPLY
    assert final.output_text == DEFAULT_REPLY
    assert final.usage is not None and final.usage.output_tokens == 7
    _assert_forwarded_identical(upstream, sent, "/responses")


def test_gemini_stream_generate_content(proxy: Proxy, upstream: MockUpstream) -> None:
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}).encode()
    url = f"{proxy.gemini_base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    headers = {"x-goog-api-key": "AIza-e2e-test-key", "content-type": "application/json"}
    with httpx2.stream("POST", url, content=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200
        _assert_event_stream_headers(r.headers)
        events = [json.loads(line[len("data: ") :]) for line in r.iter_lines() if line.startswith("data: ")]
    text = "".join(p["text"] for e in events for p in e["candidates"][0]["content"]["parts"])
    assert text == DEFAULT_REPLY
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    rec = upstream.last("POST", ":streamGenerateContent")
    assert rec.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert rec.query == "alt=sse"
    assert rec.header("x-goog-api-key") == "AIza-e2e-test-key"
    assert rec.body == body


def test_gemini_key_query_is_forwarded_but_not_logged(proxy: Proxy, upstream: MockUpstream) -> None:
    secret = "AIza-e2e-secret-in-query-42"
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}).encode()
    url = f"{proxy.gemini_base_url}/v1beta/models/gemini-2.5-flash:generateContent?key={secret}"
    r = httpx2.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200
    assert r.json()["candidates"][0]["content"]["parts"][0]["text"] == DEFAULT_REPLY
    rec = upstream.last("POST", ":generateContent")
    assert rec.query_params.get("key") == [secret]
    assert rec.body == body
    time.sleep(0.2)  # the log line is written when the response body ends
    logs = proxy.stderr_path.read_text(errors="replace") + proxy.stdout_path.read_text(errors="replace")
    assert secret not in logs, "the Gemini key= query parameter leaked into the proxy's logs"
    assert ANTHROPIC_KEY not in logs and OPENAI_KEY not in logs, "a credential leaked into the proxy's logs"


# =============================================================================================
# Batch image eviction through the SDKs
# =============================================================================================


def _anthropic_send(client: anthropic.Anthropic, messages: list[dict[str, Any]], stream: bool) -> dict[str, str]:
    """Send ``messages``; return the response headers. The reply must be the mock's."""
    kwargs: dict[str, Any] = dict(model=CLAUDE, max_tokens=64, messages=messages, tools=[SCREENSHOT_TOOL_ANTHROPIC])
    if stream:
        with client.messages.stream(**kwargs) as s:
            final = s.get_final_message()
            headers = dict(s.response.headers)
    else:
        raw = client.messages.with_raw_response.create(**kwargs)
        final = raw.parse()
        headers = dict(raw.headers)
    assert final.content[0].text == DEFAULT_REPLY
    return headers


def _openai_send(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> dict[str, str]:
    kwargs: dict[str, Any] = dict(model=GPT, messages=messages, tools=[SCREENSHOT_TOOL_OPENAI])
    if stream:
        s = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
        text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
        headers = dict(s.response.headers)
    else:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        text = raw.parse().choices[0].message.content
        headers = dict(raw.headers)
    assert text == DEFAULT_REPLY
    return headers


def _assert_untouched_except(sent_body: bytes, got_body: bytes, changed: set[int]) -> None:
    """Every message not in ``changed`` reached the upstream byte-for-byte; so did the other keys."""
    sent_items = top_level_array_items(sent_body, "messages")
    got_items = top_level_array_items(got_body, "messages")
    assert len(got_items) == len(sent_items), "messages were added or dropped"
    for idx, (s, g) in enumerate(zip(sent_items, got_items)):
        if idx not in changed:
            assert g == s, f"messages[{idx}] was not retired but its bytes changed"
    sent_rest = {k: v for k, v in json.loads(sent_body).items() if k != "messages"}
    got_rest = {k: v for k, v in json.loads(got_body).items() if k != "messages"}
    assert got_rest == sent_rest, "top-level fields other than messages changed"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_anthropic_eviction_retires_oldest_batch(
    anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture, stream: bool
) -> None:
    n = 21
    messages = anthropic_session(n, LARGE)
    headers = _anthropic_send(anthropic_client, messages, stream)
    counts = _rewrites(headers)
    assert counts.get("images_seen") == str(n), counts
    assert counts.get("images_retired") == str(FIRST_STEP), counts
    assert counts.get("carriers_retired") == str(FIRST_STEP), counts

    rec = upstream.last("POST", "/v1/messages")
    got = json.loads(rec.body)["messages"]
    orig = json.loads(sent.last().body)["messages"]
    retired_idx = {anthropic_carrier_index(i) for i in range(FIRST_STEP)}
    retired_texts = set()
    for i in range(n):
        idx = anthropic_carrier_index(i)
        g, o = got[idx]["content"][0], orig[idx]["content"][0]
        if i < FIRST_STEP:
            assert g["type"] == "tool_result" and g["tool_use_id"] == o["tool_use_id"], g
            assert len(g["content"]) == len(o["content"]) == 2
            assert g["content"][0] == o["content"][0], "the tool result's own text must be kept"
            repl = g["content"][1]
            assert repl["type"] == "text", f"carrier {i} (oldest {FIRST_STEP} are retired) still holds {repl['type']}"
            assert_retired_text(repl["text"])
            retired_texts.add(repl["text"])
        else:
            assert g == o, f"carrier {i} is among the newest {n - FIRST_STEP} and must be untouched"
    assert len(retired_texts) == 1, "every retired image gets the same fixed sentence"
    assert count_anthropic_images(got) == n - FIRST_STEP
    _assert_untouched_except(sent.last().body, rec.body, retired_idx)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_eviction_retires_oldest_batch(
    openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture, stream: bool
) -> None:
    n = 21
    messages = openai_session(n, LARGE)
    headers = _openai_send(openai_client, messages, stream)
    counts = _rewrites(headers)
    assert counts.get("images_seen") == str(n), counts
    assert counts.get("images_retired") == str(FIRST_STEP), counts
    assert counts.get("carriers_retired") == str(FIRST_STEP), counts

    rec = upstream.last("POST", "/chat/completions")
    got = json.loads(rec.body)["messages"]
    orig = json.loads(sent.last().body)["messages"]
    retired_idx = {openai_carrier_index(i) for i in range(FIRST_STEP)}
    for i in range(n):
        idx = openai_carrier_index(i)
        g, o = got[idx], orig[idx]
        if i < FIRST_STEP:
            assert g["role"] == "tool" and g["tool_call_id"] == o["tool_call_id"], g
            assert len(g["content"]) == 2
            assert g["content"][0] == o["content"][0], "the tool message's own text must be kept"
            repl = g["content"][1]
            assert repl["type"] == "text", f"tool message {i} (oldest {FIRST_STEP} are retired) still holds {repl['type']}"
            assert_retired_text(repl["text"])
        else:
            assert g == o, f"tool message {i} is among the newest {n - FIRST_STEP} and must be untouched"
    assert count_openai_images(got) == n - FIRST_STEP
    _assert_untouched_except(sent.last().body, rec.body, retired_idx)


def test_openai_eviction_of_screenshots_in_user_turns(
    openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture
) -> None:
    """Agents put screenshots in the user message after the (text-only) tool message, because
    OpenAI rejects images in tool messages; those user messages are carriers too."""
    n = 21
    headers = _openai_send(openai_client, openai_user_turn_session(n, LARGE), stream=True)
    assert _rewrites(headers).get("images_retired") == str(FIRST_STEP), headers.get(REWRITES_HEADER)
    rec = upstream.last("POST", "/chat/completions")
    got = json.loads(rec.body)["messages"]
    orig = json.loads(sent.last().body)["messages"]
    for i in range(n):
        idx = openai_user_turn_carrier_index(i)
        g, o = got[idx], orig[idx]
        if i < FIRST_STEP:
            assert g["role"] == "user" and g["content"][0] == o["content"][0]
            assert g["content"][1]["type"] == "text", f"user-turn screenshot {i} should be retired"
            assert_retired_text(g["content"][1]["text"])
        else:
            assert g == o, f"user-turn screenshot {i} is among the newest {n - FIRST_STEP} and must be untouched"
    _assert_untouched_except(sent.last().body, rec.body, {openai_user_turn_carrier_index(i) for i in range(FIRST_STEP)})


def test_anthropic_user_upload_is_reserved(
    anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture
) -> None:
    """One upload wider than 2000 px + 20 small screenshots: 21 images, one large, so the
    ceiling is 20 and 11 screenshots go (down to the low-water mark, 10 left); the upload itself is never rewritten."""
    messages = anthropic_session(20, SMALL)
    upload = {"type": "base64", "media_type": "image/png", "data": fake_png_b64(2001, 1000, 999)}
    messages[0] = {
        "role": "user",
        "content": [{"type": "text", "text": "Here is the design mock-up."}, {"type": "image", "source": upload}],
    }
    headers = _anthropic_send(anthropic_client, messages, stream=False)
    assert _rewrites(headers).get("images_retired") == str(FIRST_STEP), headers.get(REWRITES_HEADER)
    rec = upstream.last("POST", "/v1/messages")
    got = json.loads(rec.body)["messages"]
    assert got[0] == json.loads(sent.last().body)["messages"][0], "the user's upload must be untouched"
    assert count_anthropic_images(got) == 21 - FIRST_STEP
    retired = {anthropic_carrier_index(i) for i in range(FIRST_STEP)}
    for i in range(FIRST_STEP):
        assert got[anthropic_carrier_index(i)]["content"][0]["content"][1]["type"] == "text"
    _assert_untouched_except(sent.last().body, rec.body, retired)


def test_anthropic_eviction_prefix_is_stable_across_turns(
    anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture
) -> None:
    """Turn 21 retires a batch; turns 21 (again) and 22 send the same bytes for the shared history.

    That is the whole point: the provider's prefix cache moves once per batch, not once per image.
    """
    session = anthropic_session(22, LARGE)
    turn21 = session[: anthropic_carrier_index(20) + 1]
    _anthropic_send(anthropic_client, copy.deepcopy(turn21), stream=False)
    first = upstream.last("POST", "/v1/messages").body
    _anthropic_send(anthropic_client, copy.deepcopy(turn21), stream=False)
    again = upstream.last("POST", "/v1/messages").body
    assert again == first, "the same request must be rewritten to the same bytes"

    _anthropic_send(anthropic_client, copy.deepcopy(session), stream=False)
    turn22 = upstream.last("POST", "/v1/messages").body
    items21 = top_level_array_items(first, "messages")
    items22 = top_level_array_items(turn22, "messages")
    assert len(items22) == len(items21) + 2
    for idx, item in enumerate(items21):
        assert items22[idx] == item, f"messages[{idx}] changed between turn 21 and 22: the cached prefix would break"
    assert count_anthropic_images(json.loads(turn22)["messages"]) == 22 - FIRST_STEP


@pytest.mark.parametrize("n,size", [(21, SMALL), (20, LARGE)], ids=["21-small", "20-large"])
def test_anthropic_no_eviction_below_ceiling(
    anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture, n: int, size: tuple[int, int]
) -> None:
    headers = _anthropic_send(anthropic_client, anthropic_session(n, size), stream=False)
    counts = _rewrites(headers)
    assert counts.get("images_seen") == str(n) and counts.get("images_retired") == "0", counts
    _assert_forwarded_identical(upstream, sent, "/v1/messages")


@pytest.mark.parametrize("n,size", [(21, SMALL), (20, LARGE)], ids=["21-small", "20-large"])
def test_openai_no_eviction_below_ceiling(
    openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture, n: int, size: tuple[int, int]
) -> None:
    headers = _openai_send(openai_client, openai_session(n, size), stream=True)
    counts = _rewrites(headers)
    assert counts.get("images_seen") == str(n) and counts.get("images_retired") == "0", counts
    _assert_forwarded_identical(upstream, sent, "/chat/completions")


def test_rewrites_header_tells_eviction_apart(anthropic_client: anthropic.Anthropic, upstream: MockUpstream) -> None:
    """The header reports what the passes did, so a rewrite and a pass-through must differ."""
    quiet = _anthropic_send(anthropic_client, anthropic_session(21, SMALL), stream=False)[REWRITES_HEADER]
    busy = _anthropic_send(anthropic_client, anthropic_session(21, LARGE), stream=False)[REWRITES_HEADER]
    assert quiet != busy, f"{REWRITES_HEADER} is {quiet!r} with and without a retired batch"
