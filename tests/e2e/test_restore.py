"""End to end (issue 9, carrier restore): agents that drop reasoning carriers, driven by the
official SDKs, against upstreams that are strict about them (tests/e2e/strict_mock.py).

Each driver below is a multi-turn tool loop written the way real agents write it, and drops the
carrier the way they do:

- ``openai`` Chat (DeepSeek-style, and Gemini's OpenAI-compatible endpoint): the assistant
  message is rebuilt from the typed fields ``content`` + ``tool_calls`` (id, type, function),
  which have no ``reasoning_content`` and no ``extra_content``;
- ``anthropic``: only the ``text`` and ``tool_use`` blocks are kept;
- ``google-genai``: the model parts are rebuilt as ``FunctionCall(id, name, args)`` without
  ``thought_signature``;
- ``openai`` Responses (``store=False``): only the ``function_call`` item is sent back, no
  ``reasoning`` item.

Against the mock directly the second request gets the provider's real 400. Through cachekeeper
the loop completes, and the mock received every carrier exactly as it issued it (the strings
the SDK parsed from the response: reasoning text with non-ASCII, escapes and U+2028, signature
bytes, encrypted_content), also from a restarted proxy (the carriers then come from the
encrypted state file), never for another API key (a Gemini 3 call then gets the documented
placeholder signature), and never in clear in the state file; ``cachekeeper state`` lists them
(no content) and ``--purge`` forgets them. A turn sent with its carriers goes upstream
byte-identical. A restored carrier the model refuses is retried once without it and not
restored again for that model; an Anthropic signature that no longer verifies is retried once
without the request's signed blocks.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gtypes

import strict_mock as sm
from conftest import Capture, Proxy, launch_proxy
from helpers import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, top_level_array_items
from mock_upstream import MockUpstream

DEEPSEEK_MODEL = "deepseek-chat"
CLAUDE = "claude-sonnet-4-6"
GEMINI = "gemini-3-pro-preview"
GPT = "gpt-5.1"
REWRITES_HEADER = "x-cachekeeper-rewrites"
OTHER_OPENAI_KEY = "sk-e2e-second-key-1122334455"
OTHER_ANTHROPIC_KEY = "sk-ant-e2e-second-key-5544332211"
ROUNDS = sm.DEFAULT_ROUNDS  # tool rounds per loop; the loop makes ROUNDS + 1 requests
QUESTION = "What is the weather in Paris, Zürich and Lyon? Use the tool."
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
STREAM = pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])

# The names the proxy reports restores under (x-cachekeeper-rewrites and the log line):
# `reasoning_restored` = assistant turns restored; `restored_<kind>` = carriers, per kind.
RESTORED_TURNS = "reasoning_restored"
# the carriers restored per echoed tool round, per kind
KINDS = {
    "deepseek": {"restored_reasoning_content": 1},
    "anthropic": {"restored_thinking": 1, "restored_redacted_thinking": 1},
    "gemini": {"restored_thought_signature": 1},
    "gemini-openai": {"restored_thought_signature": 1},
    "responses": {"restored_reasoning_item": 1},
}
# where each dialect's conversation lives in the request body
HISTORY = {"deepseek": "messages", "anthropic": "messages", "gemini": "contents", "gemini-openai": "messages", "responses": "input"}


def knobs(mode: str) -> dict[str, str]:
    return {"x-mock-strict": mode, "x-mock-strict-rounds": str(ROUNDS)}


# =============================================================================================
# Clients (a capture hook keeps exactly what each SDK sent)
# =============================================================================================


def openai_client(base_url: str, sent: Capture, key: str = OPENAI_KEY) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30.0, http_client=http)


def anthropic_client(base_url: str, sent: Capture, key: str = ANTHROPIC_KEY) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
    return anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=30.0, http_client=http)


def genai_client(base_url: str, sent: Capture, key: str = GEMINI_KEY) -> genai.Client:
    http = httpx2.Client(event_hooks={"request": [sent.hook]}, timeout=30.0)
    return genai.Client(
        api_key=key, http_options=gtypes.HttpOptions(base_url=base_url, api_version="v1beta", httpx_client=http)
    )


# =============================================================================================
# The agents' tool loops (each drops the carrier); every turn records what the SDK parsed
# =============================================================================================


@dataclass
class Turn:
    rewrites: str | None  # the response's x-cachekeeper-rewrites (None: no proxy / not sent)
    carriers: list[Any]  # the carriers of this response, as the SDK parsed them
    keys: list[str]  # the tool call / item ids they belong to (the mock's Received.key)


@dataclass
class Loop:
    turns: list[Turn] = field(default_factory=list)
    text: str | None = None  # the final answer (None: the loop did not finish)

    def carriers(self) -> list[tuple[str, Any]]:
        """(key, carrier) of every tool round, in order."""
        return [(k, c) for t in self.turns for k, c in zip(t.keys, t.carriers)]


# A loop's k-th request goes to the client ``At(k)`` gives (a base URL and key per request:
# a proxy restart or another API key between two requests of one conversation).
At = Callable[[int], Any]


def chat_loop(
    at: At, model: str, stream: bool, headers: dict[str, str], loop: Loop, carrier: str, pad: str | None = None
) -> Loop:
    """OpenAI Chat tool loop; ``carrier`` is what to read from each response ("reasoning_content",
    or "thought_signature" for Gemini's extra_content) — and what the rebuilt message leaves out.
    ``pad``: the ``reasoning_content`` the agent puts on its rebuilt tool-call messages instead
    (Hermes pads DeepSeek turns with " ")."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for k in range(ROUNDS + 2):
        raw = at(k).chat.completions.with_raw_response.create(
            model=model, messages=messages, tools=tools, stream=stream, extra_headers=headers  # type: ignore[arg-type]
        )
        content, calls, reasoning, sigs = "", [], "", {}
        if stream:
            for ch in raw.parse():
                if not ch.choices:
                    continue
                d = ch.choices[0].delta
                content += d.content or ""
                reasoning += (d.model_extra or {}).get("reasoning_content") or ""
                for tc in d.tool_calls or []:
                    while len(calls) <= tc.index:
                        calls.append({"id": "", "name": "", "arguments": ""})
                    c = calls[tc.index]
                    c["id"] = tc.id or c["id"]
                    if tc.function is not None:
                        c["name"] = tc.function.name or c["name"]
                        c["arguments"] += tc.function.arguments or ""
                    extra = (tc.model_extra or {}).get("extra_content")
                    if extra:
                        sigs[tc.index] = extra["google"]["thought_signature"]
        else:
            msg = raw.parse().choices[0].message
            content = msg.content or ""
            reasoning = (msg.model_extra or {}).get("reasoning_content") or ""
            for i, tc in enumerate(msg.tool_calls or []):
                calls.append({"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments})
                extra = (tc.model_extra or {}).get("extra_content")
                if extra:
                    sigs[i] = extra["google"]["thought_signature"]
        if carrier == "reasoning_content":
            turn = Turn(raw.headers.get(REWRITES_HEADER), [reasoning] if calls else [], [calls[0]["id"]] if calls else [])
        else:
            turn = Turn(raw.headers.get(REWRITES_HEADER), list(sigs.values()), [calls[i]["id"] for i in sigs])
        loop.turns.append(turn)
        if not calls:
            loop.text = content
            return loop
        # the agent's rebuild from the typed fields: no reasoning_content, no extra_content
        rebuilt: dict[str, Any] = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls
            ],
        }
        if pad is not None:
            rebuilt["reasoning_content"] = pad
        messages.append(rebuilt)
        for c in calls:
            city = json.loads(c["arguments"])["city"]
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": f"Sunny in {city}, 21 °C."})
    raise AssertionError("the mock never stopped asking for tools")


def anthropic_loop(at: At, stream: bool, headers: dict[str, str], loop: Loop) -> Loop:
    tools = [{"name": "get_weather", "description": "Weather for a city.", "input_schema": WEATHER_SCHEMA}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for k in range(ROUNDS + 2):
        client = at(k)
        kwargs: dict[str, Any] = dict(
            model=CLAUDE,
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
            tools=tools,
            messages=messages,
            extra_headers=headers,
        )
        if stream:
            with client.messages.stream(**kwargs) as s:
                msg = s.get_final_message()
                rewrites = s.response.headers.get(REWRITES_HEADER)
        else:
            raw = client.messages.with_raw_response.create(**kwargs)
            msg, rewrites = raw.parse(), raw.headers.get(REWRITES_HEADER)
        uses = [b for b in msg.content if b.type == "tool_use"]
        carriers = [
            ("thinking", b.thinking, b.signature) if b.type == "thinking" else ("redacted_thinking", b.data, None)
            for b in msg.content
            if b.type in ("thinking", "redacted_thinking")
        ]
        loop.turns.append(Turn(rewrites, [carriers] if uses else [], [uses[0].id] if uses else []))
        if msg.stop_reason != "tool_use":
            loop.text = "".join(b.text for b in msg.content if b.type == "text")
            return loop
        # the agent keeps what it understands: text and tool_use
        kept: list[dict[str, Any]] = []
        for b in msg.content:
            if b.type == "text":
                kept.append({"type": "text", "text": b.text})
            elif b.type == "tool_use":
                kept.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        messages.append({"role": "assistant", "content": kept})
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": b.id, "content": f"Sunny in {b.input['city']}."} for b in uses],
            }
        )
    raise AssertionError("the mock never stopped asking for tools")


def gemini_loop(at: At, stream: bool, headers: dict[str, str], loop: Loop) -> Loop:
    config = gtypes.GenerateContentConfig(
        tools=[gtypes.Tool(function_declarations=[gtypes.FunctionDeclaration(name="get_weather", parameters_json_schema=WEATHER_SCHEMA)])],
        automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True),
        http_options=gtypes.HttpOptions(headers=headers),
    )
    contents: list[gtypes.Content] = [gtypes.Content(role="user", parts=[gtypes.Part(text=QUESTION)])]
    for k in range(ROUNDS + 2):
        client = at(k)
        if stream:
            chunks = list(client.models.generate_content_stream(model=GEMINI, contents=contents, config=config))
        else:
            chunks = [client.models.generate_content(model=GEMINI, contents=contents, config=config)]
        parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]
        rewrites = None
        http = chunks[-1].sdk_http_response
        if http is not None and http.headers:
            rewrites = {k.lower(): v for k, v in http.headers.items()}.get(REWRITES_HEADER)
        calls = [p for p in parts if p.function_call]
        signed = [p for p in calls if p.thought_signature]
        loop.turns.append(
            Turn(rewrites, [base64.b64encode(p.thought_signature).decode() for p in signed], [p.function_call.id for p in signed])
        )
        if not calls:
            loop.text = "".join(p.text or "" for p in parts)
            return loop
        # the agent's rebuild: FunctionCall(id, name, args); the signature is lost
        contents.append(
            gtypes.Content(
                role="model",
                parts=[
                    gtypes.Part(function_call=gtypes.FunctionCall(id=p.function_call.id, name=p.function_call.name, args=p.function_call.args))
                    for p in calls
                ],
            )
        )
        contents.append(
            gtypes.Content(
                role="user",
                parts=[
                    gtypes.Part(
                        function_response=gtypes.FunctionResponse(
                            id=p.function_call.id, name=p.function_call.name, response={"forecast": "sunny"}
                        )
                    )
                    for p in calls
                ],
            )
        )
    raise AssertionError("the mock never stopped asking for tools")


def responses_loop(at: At, stream: bool, headers: dict[str, str], loop: Loop) -> Loop:
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA, "strict": False}]
    items: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for k in range(ROUNDS + 2):
        client = at(k)
        kwargs: dict[str, Any] = dict(
            model=GPT, input=items, tools=tools, store=False, include=["reasoning.encrypted_content"], extra_headers=headers
        )
        if stream:
            with client.responses.stream(**kwargs) as s:
                for _ev in s:
                    pass
                r = s.get_final_response()
                rewrites = s._response.headers.get(REWRITES_HEADER)  # the SDK keeps the HTTP response private here
        else:
            raw = client.responses.with_raw_response.create(**kwargs)
            r, rewrites = raw.parse(), raw.headers.get(REWRITES_HEADER)
        calls = [o for o in r.output if o.type == "function_call"]
        reasoning = [o for o in r.output if o.type == "reasoning"]
        loop.turns.append(
            Turn(rewrites, [o.encrypted_content for o in reasoning] if calls else [], [o.id for o in reasoning] if calls else [])
        )
        if not calls:
            loop.text = r.output_text
            return loop
        # the agent re-sends only the function_call (no reasoning item), then its output
        for c in calls:
            items.append({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 21 °C."})
    raise AssertionError("the mock never stopped asking for tools")


# =============================================================================================
# Where each dialect lives, directly on the mock and through a proxy
# =============================================================================================


@dataclass(frozen=True)
class Dialect:
    mode: str  # x-mock-strict
    path: str  # the generation path's suffix (mock side)
    kind: str  # the Received.kind the mock records

    def client(self, base: str, sent: Capture, key: str | None = None) -> Any:
        """This dialect's SDK client for ``base`` (the mock's URL, or a proxy route's)."""
        if self.mode == "deepseek":
            return openai_client(f"{base}/v1", sent, key or OPENAI_KEY)
        if self.mode == "gemini-openai":
            return openai_client(f"{base}/v1beta/openai", sent, key or GEMINI_KEY)
        if self.mode == "anthropic":
            return anthropic_client(base, sent, key or ANTHROPIC_KEY)
        if self.mode == "gemini":
            return genai_client(base, sent, key or GEMINI_KEY)
        return openai_client(f"{base}/v1", sent, key or OPENAI_KEY)

    def run(self, at: str | At, sent: Capture, stream: bool, loop: Loop) -> Loop:
        """Run the loop: every request to base URL ``at``, or to the client ``at(k)`` gives."""
        if isinstance(at, str):
            client = self.client(at, sent)
            at = lambda _k: client  # noqa: E731
        h = knobs(self.mode)
        if self.mode == "deepseek":
            return chat_loop(at, DEEPSEEK_MODEL, stream, h, loop, "reasoning_content")
        if self.mode == "gemini-openai":
            return chat_loop(at, GEMINI, stream, h, loop, "thought_signature")
        if self.mode == "anthropic":
            return anthropic_loop(at, stream, h, loop)
        if self.mode == "gemini":
            return gemini_loop(at, stream, h, loop)
        return responses_loop(at, stream, h, loop)


DIALECTS = {
    "deepseek": Dialect("deepseek", "/chat/completions", "reasoning_content"),
    "anthropic": Dialect("anthropic", "/v1/messages", "thinking"),
    "gemini": Dialect("gemini", "Content", "thought_signature"),
    "gemini-openai": Dialect("gemini-openai", "/chat/completions", "thought_signature"),
    "responses": Dialect("responses", "/responses", "reasoning"),
}
# route prefix per mode on the restore proxy (a route per provider, as a user would set it up)
ROUTE = {"deepseek": "/deepseek", "anthropic": "/anthropic", "gemini": "/gemini", "gemini-openai": "/gemini", "responses": "/openai"}
ALL = pytest.mark.parametrize("mode", list(DIALECTS))


def routes_toml(mock: MockUpstream) -> str:
    rows = [("deepseek", "deepseek"), ("anthropic", "anthropic"), ("gemini", "gemini"), ("openai", "openai")]
    return "\n".join(
        f'[[routes]]\nname = "{name}"\nprefix = "/{name}"\nupstream = "{mock.url}"\nprovider = "{provider}"\n' for name, provider in rows
    )


def expected_error(mode: str, loop: Loop) -> str:
    """The 400 the mock answers to the loop's second request (the first tool round echoed bare)."""
    key = loop.turns[0].keys[0]
    if mode == "deepseek":
        return sm.DEEPSEEK_MISSING.format(index=1)
    if mode == "anthropic":
        return sm.ANTHROPIC_EXPECTED_THINKING.format(index=1, found="text")
    if mode in ("gemini", "gemini-openai"):
        return sm.GEMINI_MISSING.format(name="get_weather", position=1)
    return sm.RESPONSES_WITHOUT_REASONING.format(fc_id=key.replace("rs_", "fc_"), rs_id=key)


def error_message(exc: BaseException) -> str:
    """The provider's message from an SDK error, whatever the SDK and body shape."""
    if isinstance(exc, genai_errors.APIError):
        return str(exc.message)
    body = getattr(exc, "body", None)
    if isinstance(body, list) and body:  # Gemini's OpenAI endpoint wraps the error in an array
        body = body[0]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
    return str(exc)


def status_of(exc: BaseException) -> int | None:
    if isinstance(exc, genai_errors.APIError):
        return exc.code
    return getattr(exc, "status_code", None)


SDK_ERRORS = (openai.APIStatusError, anthropic.APIStatusError, genai_errors.APIError)


def assert_sent_without_carriers(sent: Capture, loop: Loop) -> None:
    """What the SDKs sent never held a carrier of an earlier turn (the agent dropped them)."""
    for k, c in loop.carriers():
        values = [c] if isinstance(c, str) else [v for item in c for v in item[1:] if v]
        for req in sent.requests:
            for v in values:
                assert json.dumps(v)[1:-1].encode() not in req.body and v.encode() not in req.body, (
                    f"the SDK itself sent the carrier of {k}: the driver did not drop it"
                )


def assert_mock_got_carriers(mock: MockUpstream, d: Dialect, loop: Loop) -> None:
    """The loop's last request delivered every earlier tool round's carrier, exactly as the SDK
    parsed it from the response (and as the mock issued it)."""
    last = mock.last("POST", d.path)
    assert last.strict_error is None, f"the mock refused the last request: {last.strict_error}"
    got = [(r.key, r.value) for r in last.carriers if r.kind == d.kind]
    if d.mode == "anthropic":
        # one Received per block: regroup by tool_use id into the SDK's per-turn list
        by_key: dict[str, list[Any]] = {}
        for r in last.carriers:
            if r.value is None:
                by_key.setdefault(r.key, [])
                continue
            v = ("thinking", *r.value) if r.kind == "thinking" else ("redacted_thinking", r.value, None)
            by_key.setdefault(r.key, []).append(v)
        got = list(by_key.items())
    want = loop.carriers()
    assert got == want, f"the carriers the mock received differ from those it issued\n got: {got}\nwant: {want}"
    # the opaque values (signatures, redacted data, encrypted_content) arrived as the very bytes issued
    opaque = [c for _k, c in want] if d.mode in ("gemini", "gemini-openai", "responses") else []
    if d.mode == "anthropic":
        opaque = [v for _k, c in want for kind, text, sig in c for v in ((sig,) if kind == "thinking" else (text,))]
    for v in opaque:
        assert v.encode("ascii") in last.body, f"{v!r} did not reach the mock byte for byte"
    for k, c in want:
        issued = mock.strict.get(d.mode, k)
        assert [tuple(x) for x in issued] == c if d.mode == "anthropic" else issued == c, (k, issued, c)


# =============================================================================================
# The mocks are strict: without the proxy the agent's second request is refused
# =============================================================================================


@pytest.fixture
def mock(mock_upstream: MockUpstream) -> Iterator[MockUpstream]:
    mock_upstream.clear()
    yield mock_upstream


@STREAM
@ALL
def test_dropped_carrier_is_refused_without_the_proxy(mock: MockUpstream, sent: Capture, mode: str, stream: bool) -> None:
    d = DIALECTS[mode]
    loop = Loop()
    with pytest.raises(SDK_ERRORS) as info:
        d.run(mock.url, sent, stream, loop)
    assert len(loop.turns) == 1, "the first request succeeds, the second (echoing the tool round) is refused"
    assert status_of(info.value) == 400
    want = expected_error(mode, loop)
    assert error_message(info.value) == want
    rec = mock.last("POST", d.path)
    assert rec.strict_error == want and rec.response_status == 400
    assert [r.value for r in rec.carriers if r.kind == d.kind] == [None], "the mock saw the turn without its carrier"
    assert_sent_without_carriers(sent, loop)
    # the first answer carried the carrier, and the SDK parsed it whole
    (key, carrier), = loop.carriers()
    if mode == "anthropic":
        assert carrier == [tuple(x) for x in mock.strict.get(mode, key)]
        assert sm.TRICKY in carrier[0][1], "the thinking text came back with its escapes and U+2028"
    else:
        assert carrier == mock.strict.get(mode, key)
    if mode == "deepseek":
        assert sm.TRICKY in carrier


def test_the_strict_mocks_accept_the_carriers_they_issued(mock: MockUpstream, sent: Capture) -> None:
    """The other half of the mocks' check: a client that keeps the carriers (raw HTTP, the
    assistant turn echoed exactly) gets through every round."""
    c = openai_client(f"{mock.url}/v1", sent)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for _ in range(ROUNDS):
        msg = c.chat.completions.create(model=DEEPSEEK_MODEL, messages=messages, tools=tools, extra_headers=knobs("deepseek")).choices[0].message  # type: ignore[arg-type]
        messages.append(msg.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "Sunny."})
    final = c.chat.completions.create(model=DEEPSEEK_MODEL, messages=messages, tools=tools, extra_headers=knobs("deepseek"))  # type: ignore[arg-type]
    assert final.choices[0].message.tool_calls is None and final.choices[0].message.content
    assert mock.last("POST").strict_error is None
    # a changed carrier is refused, with the mock's own wording
    messages[1]["reasoning_content"] += " (edited)"
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model=DEEPSEEK_MODEL, messages=messages, tools=tools, extra_headers=knobs("deepseek"))  # type: ignore[arg-type]
    assert error_message(info.value) == sm.DEEPSEEK_DIFFERS.format(index=1, call_id=messages[1]["tool_calls"][0]["id"])


# =============================================================================================
# Through cachekeeper: restored, exactly
# =============================================================================================


@pytest.fixture(scope="module")
def restore_proxy(mock_upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("cachekeeper-restore")
    with launch_proxy(tmp, routes_toml(mock_upstream)) as p:
        yield p


def rewrites(value: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (value or "").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = int(v.strip())
            except ValueError:
                pass
    return out


def assert_restore_reported(loop: Loop, log_lines: list[dict[str, Any]], mode: str) -> None:
    """Request k restored the k tool rounds before it (every echoed turn, not only the latest:
    the restored prefix is then the same on every later request); the response header and the
    log line say so, per kind."""
    assert len(log_lines) == len(loop.turns), log_lines
    for k, (turn, line) in enumerate(zip(loop.turns, log_lines)):
        want = {name: n * k for name, n in KINDS[mode].items() if k}
        logged = {name: v for name, v in line.items() if name.startswith("restored_") and v}
        assert line.get(RESTORED_TURNS, 0) == k, f"request {k}: log line {line}"
        assert logged == want, f"request {k}: log line {line}"
        if turn.rewrites is None:  # genai exposes no headers of a stream
            continue
        header = {name: v for name, v in rewrites(turn.rewrites).items() if v}
        assert header.get(RESTORED_TURNS, 0) == k, f"request {k}: {REWRITES_HEADER}: {turn.rewrites}"
        assert {n: v for n, v in header.items() if n.startswith("restored_")} == want, turn.rewrites


def assert_prefix_stable(mock: MockUpstream, d: Dialect, n: int) -> None:
    """The conversation the mock received in each of the last ``n`` requests starts with the one
    it received in the request before, byte for byte (restores are deterministic, so the
    provider's prompt cache holds)."""
    bodies = [r.body for r in mock.matching("POST", d.path)][-n:]
    key = HISTORY[d.mode]
    for k in range(1, len(bodies)):
        before, now = top_level_array_items(bodies[k - 1], key), top_level_array_items(bodies[k], key)
        assert now[: len(before)] == before, f"request {k}: the restored history changed since request {k - 1}"


@STREAM
@ALL
def test_dropped_carrier_is_restored_through_the_proxy(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture, mode: str, stream: bool
) -> None:
    d = DIALECTS[mode]
    log = restore_proxy.request_log()
    loop = d.run(restore_proxy.base_url + ROUTE[mode], sent, stream, Loop())
    assert loop.text, "the loop did not finish"
    assert len(loop.turns) == ROUNDS + 1
    assert_sent_without_carriers(sent, loop)
    assert_mock_got_carriers(mock, d, loop)
    assert_prefix_stable(mock, d, len(loop.turns))
    assert_restore_reported(loop, log.wait(None, len(loop.turns)), mode)


# =============================================================================================
# Across a restart: the carriers come from the encrypted state file
# =============================================================================================


class Proxies:
    """Proxies started and stopped between the requests of one loop, all on one state file."""

    def __init__(self, tmp: Path, mock: MockUpstream) -> None:
        self.tmp, self.mock = tmp, mock
        self.stack = contextlib.ExitStack()
        self.current: Proxy | None = None
        self.started = 0

    def restart(self) -> Proxy:
        self.stack.close()
        self.stack = contextlib.ExitStack()
        self.current = self.stack.enter_context(launch_proxy(self.tmp, routes_toml(self.mock)))
        self.started += 1
        return self.current

    def close(self) -> None:
        self.stack.close()


def state_files(tmp: Path) -> dict[str, bytes]:
    """The state SQLite file and its journals, as bytes."""
    out = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        f = tmp / f"cachekeeper.db{suffix}"
        if f.exists():
            out[f.name] = f.read_bytes()
    return out


def carrier_strings(loop: Loop) -> list[str]:
    """Every carrier string of the loop (texts, signatures, encrypted contents)."""
    out: list[str] = []
    for _k, c in loop.carriers():
        out += [c] if isinstance(c, str) else [v for item in c for v in item[1:] if v]
    return out


def assert_nothing_in_clear(files: dict[str, bytes], loop: Loop) -> None:
    assert files, "no state file was written"
    needles: list[bytes] = []
    for v in carrier_strings(loop):
        needles += [v.encode(), json.dumps(v)[1:-1].encode(), json.dumps(v, ensure_ascii=False)[1:-1].encode()]
        # any 16-character stretch of the text (a partial or re-encoded copy), in UTF-8
        needles += [v[i : i + 16].encode() for i in range(0, max(1, len(v) - 16), 8)]
    needles.append(sm.TRICKY[:12].encode())
    for name, data in files.items():
        for n in needles:
            assert n not in data, f"{name} holds carrier text in clear: {n!r}"


@STREAM
@pytest.mark.parametrize("mode", ["deepseek", "anthropic"])
def test_restored_after_a_restart_from_the_state_file(
    mock: MockUpstream, tmp_path: Path, sent: Capture, mode: str, stream: bool
) -> None:
    """Request k of the loop goes to a proxy started just before it (the one before stopped):
    request k's restore can only come from what the state file kept."""
    d = DIALECTS[mode]
    proxies = Proxies(tmp_path, mock)
    try:
        loop = d.run(lambda _k: d.client(proxies.restart().base_url + ROUTE[mode], sent), sent, stream, Loop())
    finally:
        proxies.close()
    assert proxies.started == ROUNDS + 1
    assert loop.text, "the loop did not finish"
    assert_sent_without_carriers(sent, loop)
    assert_mock_got_carriers(mock, d, loop)
    assert_prefix_stable(mock, d, len(loop.turns))
    assert_nothing_in_clear(state_files(tmp_path), loop)


# =============================================================================================
# Another API key gets nothing; the state file holds nothing in clear
# =============================================================================================


@pytest.mark.parametrize("mode", ["deepseek", "anthropic"])
def test_another_key_replaying_the_conversation_gets_nothing_restored(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture, mode: str
) -> None:
    """Key A's first request is answered with a tool round (captured under A's scope); the
    second request, echoing that round without its carrier with the same tool-call ids, is sent
    with key B: nothing is restored, the mock refuses it, the 400 reaches the client. The same
    bytes sent with key A go through."""
    d = DIALECTS[mode]
    base = restore_proxy.base_url + ROUTE[mode]
    other = OTHER_OPENAI_KEY if mode == "deepseek" else OTHER_ANTHROPIC_KEY
    clients = [d.client(base, sent), d.client(base, sent, other)]
    loop = Loop()
    with pytest.raises(SDK_ERRORS) as info:
        d.run(lambda k: clients[min(k, 1)], sent, False, loop)
    assert len(loop.turns) == 1 and status_of(info.value) == 400
    rec = mock.last("POST", d.path)
    (key, carrier), = loop.carriers()
    delivered = [r.value for r in rec.carriers if r.kind == d.kind]
    assert carrier not in delivered and (carrier,) not in delivered
    assert rec.strict_error is not None
    assert error_message(info.value) == rec.strict_error, "the mock's 400 reached the client as it was"
    # the same request with key A: restored, accepted
    replay = sent.requests[-1]
    mock.strict.received.clear()
    first = OPENAI_KEY if mode == "deepseek" else ANTHROPIC_KEY
    headers = {k: v.replace(other, first) for k, v in replay.headers.items() if k.lower() not in ("content-length", "host")}
    assert headers != {k: v for k, v in replay.headers.items() if k.lower() not in ("content-length", "host")}
    with httpx2.Client(timeout=30.0) as http:
        r = http.post(replay.url, content=replay.body, headers=headers)
    assert r.status_code == 200, r.text
    assert mock.last("POST", d.path).strict_error is None


@ALL
def test_state_file_holds_no_carrier_in_clear(restore_proxy: Proxy, mock: MockUpstream, sent: Capture, mode: str) -> None:
    d = DIALECTS[mode]
    loop = d.run(restore_proxy.base_url + ROUTE[mode], sent, True, Loop())
    assert loop.text
    assert_nothing_in_clear(state_files(restore_proxy.config_path.parent), loop)


# =============================================================================================
# A turn sent with its carriers is left alone
# =============================================================================================


def test_turns_sent_with_their_carriers_go_upstream_byte_identical(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture
) -> None:
    """An agent that keeps its carriers (the assistant message echoed whole, as the SDK parsed
    it): every request reaches the mock exactly as the SDK sent it, and the mock accepts it."""
    c = openai_client(f"{restore_proxy.base_url}/deepseek/v1", sent)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for _ in range(ROUNDS + 1):
        msg = c.chat.completions.create(model=DEEPSEEK_MODEL, messages=messages, tools=tools, extra_headers=knobs("deepseek")).choices[0].message  # type: ignore[arg-type]
        rec = mock.last("POST", "/chat/completions")
        assert rec.strict_error is None, rec.strict_error
        assert rec.body == sent.last().body, "a request with nothing to restore was changed"
        if not msg.tool_calls:
            break
        messages.append(msg.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "Sunny."})
    assert msg.content and not msg.tool_calls
    assert len([r for r in mock.last("POST").carriers if r.value]) == ROUNDS


@STREAM
def test_anthropic_turns_sent_with_their_thinking_go_upstream_byte_identical(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture, stream: bool
) -> None:
    """An Anthropic agent that echoes every block as the SDK parsed it (thinking included)."""
    c = anthropic_client(f"{restore_proxy.base_url}/anthropic", sent)
    tools = [{"name": "get_weather", "description": "Weather for a city.", "input_schema": WEATHER_SCHEMA}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for _ in range(ROUNDS + 1):
        kwargs: dict[str, Any] = dict(
            model=CLAUDE, max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048}, tools=tools, messages=messages, extra_headers=knobs("anthropic")
        )
        if stream:
            with c.messages.stream(**kwargs) as s:
                msg = s.get_final_message()
        else:
            msg = c.messages.create(**kwargs)
        rec = mock.last("POST", "/v1/messages")
        assert rec.strict_error is None, rec.strict_error
        assert rec.body == sent.last().body, "a request with nothing to restore was changed"
        if msg.stop_reason != "tool_use":
            break
        blocks = [b.model_dump(exclude_none=True) for b in msg.content]
        for b in blocks:
            b.pop("citations", None)
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in msg.content if b.type == "tool_use"]
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "Sunny."} for b in uses]})
    assert msg.stop_reason == "end_turn"
    got = [r.value for r in mock.last("POST").carriers if r.kind == "thinking"]
    assert len(got) == ROUNDS and all(sm.TRICKY in t for t, _sig in got)


# =============================================================================================
# `cachekeeper state`: what the store holds (never content), and --purge
# =============================================================================================


def state_command(config: Path, *args: str) -> str:
    from conftest import _binary

    p = subprocess.run([str(_binary()), "state", "--config", str(config), *args], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr.decode("utf-8", "replace")
    return p.stdout.decode("utf-8", "replace")


def test_state_command_lists_carriers_and_purge_forgets_them(mock: MockUpstream, tmp_path: Path, sent: Capture) -> None:
    d = DIALECTS["deepseek"]
    with launch_proxy(tmp_path, routes_toml(mock)) as p:
        loop = d.run(p.base_url + ROUTE["deepseek"], sent, False, Loop())
    assert loop.text
    config = tmp_path / "proxy.toml"
    listing = state_command(config)
    host = mock.url.removeprefix("http://")
    rows = [line.split() for line in listing.splitlines()]
    row = next((r for r in rows if r[:3] == ["carrier", host, DEEPSEEK_MODEL]), None)
    assert row is not None, listing
    # one captured turn per response (the ROUNDS tool rounds and the final answer), plus the
    # store's own per-(scope, host, model) index record
    records = int(row[3])
    assert records >= ROUNDS + 1, listing
    for v in carrier_strings(loop):
        assert v not in listing and v[:16] not in listing
    purged = state_command(config, "--purge")
    assert str(records) in purged, purged
    assert not [r for r in (line.split() for line in state_command(config).splitlines()) if r[:1] == ["carrier"]]
    # the conversation's last request again, on a proxy over the purged store: nothing to restore
    last = sent.requests[-1]
    with launch_proxy(tmp_path, routes_toml(mock)) as p, httpx2.Client(timeout=30.0) as http:
        url = p.base_url + "/deepseek" + last.url.split("/deepseek", 1)[1]
        headers = {k: v for k, v in last.headers.items() if k.lower() not in ("content-length", "host")}
        r = http.post(url, content=last.body, headers=headers)
    assert r.status_code == 400
    assert mock.last("POST", d.path).strict_error is not None


# =============================================================================================
# Gemini 3: a function call with no known signature (another provider's) gets the placeholder
# =============================================================================================


def foreign_gemini_request(client: Any, mode: str, model: str) -> Any:
    """One request whose history holds a tool round another provider produced (no signature
    anywhere): Gemini native through google-genai, or the OpenAI-compatible endpoint."""
    if mode == "gemini":
        config = gtypes.GenerateContentConfig(
            tools=[gtypes.Tool(function_declarations=[gtypes.FunctionDeclaration(name="get_weather", parameters_json_schema=WEATHER_SCHEMA)])],
            automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True),
            http_options=gtypes.HttpOptions(headers=knobs(mode)),
        )
        call = gtypes.FunctionCall(id="call_from_elsewhere_1", name="get_weather", args={"city": "Paris"})
        contents = [
            gtypes.Content(role="user", parts=[gtypes.Part(text=QUESTION)]),
            gtypes.Content(role="model", parts=[gtypes.Part(function_call=call)]),
            gtypes.Content(
                role="user",
                parts=[gtypes.Part(function_response=gtypes.FunctionResponse(id=call.id, name=call.name, response={"forecast": "sunny"}))],
            ),
        ]
        return client.models.generate_content(model=model, contents=contents, config=config)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
    messages = [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_from_elsewhere_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_from_elsewhere_1", "content": "Sunny."},
    ]
    return client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=tools, extra_headers=knobs(mode))


@pytest.mark.parametrize("mode", ["gemini", "gemini-openai"])
def test_gemini_3_call_without_a_known_signature_gets_the_placeholder(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture, mode: str
) -> None:
    d = DIALECTS[mode]
    # straight at the mock: Gemini 3 refuses the unsigned call
    with pytest.raises(SDK_ERRORS) as info:
        foreign_gemini_request(d.client(mock.url, sent), mode, GEMINI)
    assert error_message(info.value) == sm.GEMINI_MISSING.format(name="get_weather", position=1)
    # through the proxy: the documented placeholder on that call, accepted
    log = restore_proxy.request_log()
    foreign_gemini_request(d.client(restore_proxy.base_url + ROUTE[mode], sent), mode, GEMINI)
    rec = mock.last("POST", d.path)
    assert rec.strict_error is None
    assert [r.value for r in rec.carriers] == ["skip_thought_signature_validator"]
    line = log.one(None)
    assert line.get("restored_placeholder_signature") == 1, line
    # for a Gemini 2.5 model (whose API does not validate signatures) the proxy adds nothing:
    # the request goes as sent (the mock validates whatever the model, so it refuses it)
    with pytest.raises(SDK_ERRORS):
        foreign_gemini_request(d.client(restore_proxy.base_url + ROUTE[mode], sent), mode, "gemini-2.5-flash")
    assert mock.last("POST", d.path).body == sent.last().body


# =============================================================================================
# A restore is never the reason a request fails
# =============================================================================================


def test_restored_carrier_the_model_rejects_is_retried_without_and_not_restored_again(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture
) -> None:
    """A model that takes no ``reasoning_content`` in input: the restored one is refused, the
    proxy retries once with the client's own message (accepted), remembers "no restore" for
    (host, model), and the next request goes once, unrestored."""
    mode, model = "no-reasoning-input", "mock-model-no-reasoning-input"
    c = openai_client(f"{restore_proxy.base_url}/openai/v1", sent)
    log = restore_proxy.request_log()
    headers = knobs(mode)
    loop = chat_loop(lambda _k: c, model, False, headers, Loop(), "reasoning_content")
    assert loop.text and len(loop.turns) == ROUNDS + 1
    ups = mock.matching("POST", "/chat/completions")
    delivered = [[r.value for r in u.carriers] for u in ups]
    # request 0; request 1 restored (refused), then as the client sent it; request 2 unrestored
    assert delivered == [[], [loop.turns[0].carriers[0]], [None], [None, None]], delivered
    assert [u.response_status for u in ups] == [200, 400, 200, 200]
    assert ups[1].strict_error == sm.REASONING_UNSUPPORTED.format(index=1)
    assert ups[2].body == sent.requests[1].body and ups[3].body == sent.requests[2].body
    lines = log.wait(None, len(loop.turns))
    assert "restore" in json.dumps(lines[1].get("retried_without")), lines[1]
    assert lines[2].get(RESTORED_TURNS, 0) == 0, lines[2]


# =============================================================================================
# Anthropic: a thinking block whose signature no longer verifies is dropped, once
# =============================================================================================


def test_anthropic_history_with_a_broken_signature_is_stripped_and_retried_once(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture
) -> None:
    """An agent resumes a finished conversation from a store that re-encoded its history (the
    U+2028 in the first round's thinking became a newline): Anthropic's "Invalid `signature` in
    `thinking` block" 400; the proxy remembers the request's signatures as rejected, strips
    those blocks, retries once (accepted), and strips them up front on the next request."""
    c = anthropic_client(f"{restore_proxy.base_url}/anthropic", sent)
    tools = [{"name": "get_weather", "description": "Weather for a city.", "input_schema": WEATHER_SCHEMA}]
    kwargs: dict[str, Any] = dict(
        model=CLAUDE, max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048}, tools=tools, extra_headers=knobs("anthropic")
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    while True:  # the conversation, every block kept as parsed
        msg = c.messages.create(messages=messages, **kwargs)
        blocks = [b.model_dump(exclude_none=True) for b in msg.content]
        for b in blocks:
            b.pop("citations", None)
        messages.append({"role": "assistant", "content": blocks})
        if msg.stop_reason != "tool_use":
            break
        uses = [b for b in msg.content if b.type == "tool_use"]
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "Sunny."} for b in uses]})
    assert len(messages) == 2 * ROUNDS + 2
    signatures = [b["signature"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"]
    first = messages[1]["content"][0]
    assert first["type"] == "thinking" and "\u2028" in first["thinking"]
    first["thinking"] = first["thinking"].replace("\u2028", "\n")  # the store's re-encoding
    messages.append({"role": "user", "content": "And tomorrow?"})

    mock.clear()
    log = restore_proxy.request_log()
    raw = c.messages.with_raw_response.create(messages=messages, **kwargs)
    assert raw.parse().stop_reason == "end_turn"
    ups = mock.matching("POST", "/v1/messages")
    assert [u.response_status for u in ups] == [400, 200], "one retry"
    assert ups[0].strict_error == sm.ANTHROPIC_INVALID_SIGNATURE.format(index=1, block=0)
    # every signed block of the rejected request (ROUNDS x thinking + redacted_thinking, and the
    # final answer's thinking) is dropped from the retry
    signed = 2 * ROUNDS + 1
    assert [r.value for r in ups[1].carriers if r.value is not None] == [], "a rejected block was sent again"
    line = log.one("/anthropic/v1/messages")
    assert (line.get("thinking_rejected"), line.get("retried_without")) == (signed, f"thinking_signatures:{signed}"), line
    # the next request of the conversation: stripped before it goes, no second 400
    mock.clear()
    messages += [{"role": "assistant", "content": [{"type": "text", "text": "Sunny again."}]}, {"role": "user", "content": "Thanks!"}]
    log.mark()
    c.messages.create(messages=messages, **kwargs)
    ups = mock.matching("POST", "/v1/messages")
    assert [u.response_status for u in ups] == [200]
    assert not [s for s in signatures if s.encode() in ups[0].body]
    line = log.one("/anthropic/v1/messages")
    assert line.get("thinking_rejected") == signed and not line.get("retried_without"), line
    assert all(s.encode() in sent.last().body for s in signatures), "the client itself kept sending them"


def test_another_key_on_gemini_3_gets_the_placeholder_never_the_first_keys_signature(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture
) -> None:
    d = DIALECTS["gemini"]
    base = restore_proxy.base_url + ROUTE["gemini"]
    clients = [d.client(base, sent), d.client(base, sent, "AIza-e2e-second-key-24680")]
    loop = d.run(lambda k: clients[min(k, 1)], sent, False, Loop())
    assert loop.text
    sigs = [c for _k, c in loop.carriers()]
    # round 0 was answered to key A: key B gets the placeholder for it; the later rounds were
    # answered to key B, which gets their signatures back
    delivered = [r.value for r in mock.last("POST", d.path).carriers]
    assert delivered == ["skip_thought_signature_validator", *sigs[1:]], delivered
    assert all(sigs[0].encode() not in r.body for r in mock.matching("POST", d.path)[1:]), "key A's signature reached key B's request"


@STREAM
def test_agent_padded_reasoning_is_replaced_by_the_captured_one(
    restore_proxy: Proxy, mock: MockUpstream, sent: Capture, stream: bool
) -> None:
    """An agent that pads the turns it rebuilt with ``reasoning_content: " "`` (to dodge
    DeepSeek's 400) sends no reasoning of its own: the captured text replaces the pad."""
    d = DIALECTS["deepseek"]
    with pytest.raises(openai.BadRequestError) as info:
        chat_loop(lambda _k: d.client(mock.url, sent), DEEPSEEK_MODEL, stream, knobs("deepseek"), Loop(), "reasoning_content", pad=" ")
    assert error_message(info.value).startswith("mock upstream (strict deepseek): the `reasoning_content`")
    client = d.client(restore_proxy.base_url + ROUTE["deepseek"], sent)
    loop = chat_loop(lambda _k: client, DEEPSEEK_MODEL, stream, knobs("deepseek"), Loop(), "reasoning_content", pad=" ")
    assert loop.text
    assert b'"reasoning_content":" "' in sent.last().body
    assert_mock_got_carriers(mock, d, loop)
