"""Strict upstream modes for the mock provider: answers carrying reasoning carriers, and the
providers' real HTTP 400s when a later request echoes a turn without them.

Selected per request by the header ``x-mock-strict: MODE`` (it passes through cachekeeper like
any other header); ``x-mock-strict-rounds: N`` (default 2) is how many tool rounds the mock asks
for before it answers with text. Each tool round's carrier is unique (it names the response's
serial number), and the mock remembers what it issued for which tool call, so it can check that
an echoed carrier is *exactly* the one it sent (``StrictState.issued``), and records every
carrier it receives (``StrictState.received``, and per request ``RecordedRequest.carriers``).

A tool round calls ``get_weather`` when the request declares it (the SDK tests), else one of
the agent's own read-only tools (``SAFE_TOOLS``: Read, read_file, ls, glob, ...), else there is
no tool round (agent trials never get a call that runs a command or writes a file).

Modes (the rules follow the providers' documentation; the wordings are the real API messages):

- ``deepseek`` (OpenAI Chat, DeepSeek thinking mode): every answer has ``reasoning_content``
  (deltas when streamed) and, for a tool round, one tool call. When the request has ``tools``,
  every assistant message with ``tool_calls`` must carry ``reasoning_content``: missing (or
  empty) is DeepSeek's "Missing `reasoning_content` field in the assistant message at message
  index N…"; present but not the text issued with that tool call is a 400 saying so (the mock's
  own wording: the real API cannot tell, the exactness check is the test's).
- ``anthropic`` (Messages, thinking on): a tool round answers ``[thinking (signed),
  redacted_thinking, text, tool_use]``, the last answer ``[thinking, text]``. The thinking text
  holds non-ASCII, a newline, quotes, a backslash, a tab and U+2028; the JSON answer escapes
  them (``\\u…``), the stream sends them raw (UTF-8). When the request ends with a tool result,
  the last assistant message must start with a thinking block ("Expected `thinking` or
  `redacted_thinking`, but found `tool_use`…"), and its thinking / redacted_thinking blocks must
  be the ones issued with its tool_use, in order ("… cannot be modified…"); a thinking block
  anywhere whose text or signature differs from the issued one is "Invalid `signature` in
  `thinking` block".
- ``gemini`` (native ``generateContent`` / ``streamGenerateContent``, Gemini 3 rules): a tool
  round answers two parallel ``functionCall`` parts (with ids), only the first with a
  ``thoughtSignature``; the last answer is text with a signature on its last part. Every model
  content after the last user content that is not only ``functionResponse`` parts must have a
  ``thoughtSignature`` on its first ``functionCall`` part ("Function call is missing a
  thought_signature in functionCall parts…"); a signature other than the one issued for that
  call, or Google's documented dummy values, is "Corrupted thought signature.".
- ``gemini-openai`` (Gemini's OpenAI-compatible Chat endpoint): the same two parallel calls as
  ``tool_calls``, the first with ``extra_content.google.thought_signature``; the same rule and
  wordings, error bodies wrapped in a JSON array as that endpoint sends them.
- ``responses`` (OpenAI Responses): a tool round answers ``[reasoning (id, summary,
  encrypted_content), function_call]``, the last answer ``[reasoning, message]``. The
  ``encrypted_content`` names its item id (as the real one is bound to it). A ``function_call``
  the mock issued must come after its ``reasoning`` item in the input ("Item 'fc_…' of type
  'function_call' was provided without its required 'reasoning' item: 'rs_…'."); a reasoning
  item whose ``encrypted_content`` is not bound to its ``id`` is "Encrypted content item_id did
  not match the target item id." (code ``invalid_encrypted_content``); one without
  ``encrypted_content`` is "Item with id 'rs_…' not found. Items are not persisted when `store`
  is set to false…".
- ``no-reasoning-input`` (OpenAI Chat): answers like ``deepseek``, but takes no
  ``reasoning_content`` back: an assistant message carrying one is refused with Cerebras'
  wording ("messages.N.assistant.reasoning_content: property 'reasoning_content' is
  unsupported"), as some models reject the field in input.

This module is pure (no HTTP): :func:`answer` turns a parsed request into an :class:`Answer`
(a JSON body with its status, or SSE events) that mock_upstream.py writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

MODES = ("deepseek", "anthropic", "gemini", "gemini-openai", "responses", "no-reasoning-input")
DEFAULT_ROUNDS = 2
CITIES = ("Paris", "Zürich", "Lyon", "Kraków", "Porto", "Oslo")
# Part of every thinking / reasoning text: what a careless re-encoder breaks.
TRICKY = 'Zürich “quoted” "inner" back\\slash\nnew line\u2028line-sep\ttab 🌦 ünïcödé'
CREATED = 1_764_500_000

# Real API wordings (see the module doc; each names its provider's documentation page).
DEEPSEEK_MISSING = (
    "Missing `reasoning_content` field in the assistant message at message index {index}. "
    "For more information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
)
DEEPSEEK_DIFFERS = (
    "mock upstream (strict deepseek): the `reasoning_content` of the assistant message at message index "
    "{index} is not the one returned with tool call {call_id}"
)
ANTHROPIC_EXPECTED_THINKING = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. "
    "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
    "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
    "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult "
    "our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
ANTHROPIC_MODIFIED = (
    "messages.{index}.content.{block}: `thinking` or `redacted_thinking` blocks in the latest assistant "
    "message cannot be modified. These blocks must remain as they were in the original response."
)
ANTHROPIC_INVALID_SIGNATURE = "messages.{index}.content.{block}: Invalid `signature` in `thinking` block"
GEMINI_MISSING = (
    "Function call is missing a thought_signature in functionCall parts. This is required for tools to "
    "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
    "data, function call `default_api:{name}` , position {position}. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
GEMINI_CORRUPTED = "Corrupted thought signature."
# Google's documented dummy signatures for calls that never had one (foreign history).
GEMINI_DUMMIES = ("skip_thought_signature_validator", "context_engineering_is_the_way_to_go")
REASONING_UNSUPPORTED = "messages.{index}.assistant.reasoning_content: property 'reasoning_content' is unsupported"
RESPONSES_WITHOUT_REASONING = (
    "Item '{fc_id}' of type 'function_call' was provided without its required 'reasoning' item: '{rs_id}'."
)
RESPONSES_ID_MISMATCH = "Encrypted content item_id did not match the target item id."
RESPONSES_NOT_FOUND = (
    "Item with id '{rs_id}' not found. Items are not persisted when `store` is set to false. Try again "
    "with `store` set to true, or remove this item from your input."
)


@dataclass(frozen=True)
class Received:
    """One carrier as a request delivered it (``value`` None: the turn came without it)."""

    mode: str
    kind: str  # reasoning_content | thinking | redacted_thinking | thought_signature | reasoning
    key: str  # the tool call id / item id it belongs to
    value: Any  # the text / signature / (encrypted_content) as received, decoded from JSON


@dataclass
class StrictState:
    """What the strict modes issued (``issued[(mode, key)]``) and received (in order)."""

    issued: dict[tuple[str, str], Any] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # A file a read tool's call names (agent trials: a screenshot, so the tool round carries an
    # image); None: the tool's required strings are ".".
    read_path: str | None = None

    def clear(self) -> None:
        with self.lock:
            self.issued.clear()
            self.received.clear()

    def next(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter

    def issue(self, mode: str, key: str, value: Any) -> None:
        with self.lock:
            self.issued[(mode, key)] = value

    def get(self, mode: str, key: str) -> Any:
        with self.lock:
            return self.issued.get((mode, key))

    def got(self, mode: str, kind: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.mode == mode and r.kind == kind]


@dataclass
class Answer:
    """What to write: a JSON body (``status``, ``body`` bytes) or SSE ``events`` (status 200)."""

    status: int = 200
    body: bytes | None = None
    events: list[bytes] | None = None
    error: str | None = None  # the 400's message, when this is one
    received: list[Received] = field(default_factory=list)


class _Reject(Exception):
    def __init__(self, status: int, body: Any, message: str) -> None:
        super().__init__(message)
        self.status, self.body, self.message = status, body, message


def _dumps(obj: Any, ascii_only: bool = True) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=ascii_only).encode("utf-8")


def _sse(obj: Any, event: str | None = None, ascii_only: bool = True) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + _dumps(obj, ascii_only) + b"\n\n"


def _pieces(text: str, n: int = 3) -> list[str]:
    if len(text) < n:
        return [text]
    step = -(-len(text) // n)
    return [text[i : i + step] for i in range(0, len(text), step)]


def thought(mode: str, n: int, city: str) -> str:
    """The reasoning text of response ``n`` (unique per response)."""
    return f"Response {n} ({mode}): the user wants the weather; call get_weather for {city} first.\n{TRICKY}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def signature(kind: str, n: int, size: int = 97) -> str:
    """An opaque base64 signature for response ``n`` (``+``, ``/`` and ``=`` included)."""
    raw = b""
    i = 0
    while len(raw) < size:
        raw += hashlib.sha256(f"{kind}:{n}:{i}".encode()).digest()
        i += 1
    return _b64(raw[:size])


def encrypted_content(item_id: str, n: int) -> str:
    """A Fernet-looking token bound to ``item_id`` (it decodes to the id)."""
    blob = json.dumps({"item_id": item_id, "n": n}, separators=(",", ":")).encode()
    return "gAAAAAB" + base64.urlsafe_b64encode(blob).decode("ascii")


def encrypted_item_id(token: str) -> str | None:
    if not isinstance(token, str) or not token.startswith("gAAAAAB"):
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(token[7:]))["item_id"]
    except Exception:  # noqa: BLE001 - anything else is simply not bound to an id
        return None


# Tools a strict answer may call when the request does not declare `get_weather` (a real agent's
# own tools): read-only ones only, so an agent trial never runs a command or writes a file.
SAFE_TOOLS = ("read", "read_file", "readfile", "view", "view_image", "ls", "list", "list_directory", "list_dir", "glob", "find_files")


def _tool_decls(req: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, JSON schema) of every tool the request declares, in any of the four dialects."""
    out: list[tuple[str, Any]] = []
    for t in req.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if isinstance(t.get("function"), dict):  # OpenAI Chat
            out.append((str(t["function"].get("name")), t["function"].get("parameters")))
        elif isinstance(t.get("functionDeclarations"), list):  # Gemini
            for d in t["functionDeclarations"]:
                if isinstance(d, dict):
                    out.append((str(d.get("name")), d.get("parametersJsonSchema") or d.get("parameters")))
        elif t.get("name"):  # Anthropic, Responses
            out.append((str(t["name"]), t.get("input_schema") or t.get("parameters")))
    return out


def _fill(schema: Any) -> dict[str, Any]:
    """Arguments for a foreign tool: its required properties, strings as ".", numbers 1."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for k in schema.get("required") or []:
        kind = str((props.get(k) or {}).get("type", "string")).lower()
        out[k] = 1 if kind in ("integer", "number") else False if kind == "boolean" else [] if kind == "array" else {} if kind == "object" else "."
    return out


# The read tools that take a file to read (``read_path`` goes in their first required string).
READ_TOOLS = ("read", "read_file", "readfile", "view", "view_image")


def pick_tool(req: dict[str, Any], city: str, read_path: str | None = None) -> tuple[str, dict[str, Any]] | None:
    """The call a tool round makes: ``get_weather(city)`` when the request declares it (the SDK
    tests), else a read-only tool of the agent's (a read tool on ``read_path`` when given, first),
    else None (no tool round: a text answer)."""
    decls = _tool_decls(req)
    if any(name == "get_weather" for name, _ in decls):
        return ("get_weather", {"city": city})
    safe = [(n, sch) for n, sch in decls if n.lower().replace("-", "_") in SAFE_TOOLS]
    if read_path is not None:
        for name, schema in safe:
            if name.lower().replace("-", "_") in READ_TOOLS:
                args = _fill(schema)
                first = next((k for k, v in args.items() if v == "."), None)
                if first is not None:
                    args[first] = read_path
                    return (name, args)
    return (safe[0][0], _fill(safe[0][1])) if safe else None


def _final_text(n: int, reply: str | None) -> str:
    return reply or f"Response {n}: it is sunny everywhere you asked about."


def answer(mode: str, state: StrictState, req: dict[str, Any], path: str, stream: bool, rounds: int, reply: str | None) -> Answer:
    """The strict ``mode``'s answer to ``req`` (``path`` for the Gemini model name)."""
    received: list[Received] = []
    try:
        if mode == "deepseek":
            out = _deepseek(state, req, stream, rounds, reply, received)
        elif mode == "no-reasoning-input":
            out = _no_reasoning_input(state, req, stream, rounds, reply, received)
        elif mode == "anthropic":
            out = _anthropic(state, req, stream, rounds, reply, received)
        elif mode == "gemini":
            out = _gemini(state, req, path, stream, rounds, reply, received)
        elif mode == "gemini-openai":
            out = _gemini_openai(state, req, stream, rounds, reply, received)
        elif mode == "responses":
            out = _responses(state, req, stream, rounds, reply, received)
        else:
            raise _Reject(400, {"error": {"message": f"mock upstream: unknown x-mock-strict mode {mode!r}"}}, "unknown mode")
    except _Reject as r:
        out = Answer(status=r.status, body=_dumps(r.body), error=r.message)
    with state.lock:
        state.received.extend(received)
    out.received = received
    return out


# ---------------------------------------------------------------------------------------------
# DeepSeek-style OpenAI Chat
# ---------------------------------------------------------------------------------------------


def _openai_error(message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def _chat_messages(req: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = req.get("messages")
    return [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []


def _tool_rounds_done_chat(msgs: list[dict[str, Any]]) -> int:
    return sum(1 for m in msgs if m.get("role") == "assistant" and m.get("tool_calls"))


def _no_reasoning_input(state: StrictState, req: dict[str, Any], stream: bool, rounds: int, reply: str | None, received: list[Received]) -> Answer:
    for i, m in enumerate(_chat_messages(req)):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            received.append(Received("no-reasoning-input", "reasoning_content", str((m["tool_calls"][0] or {}).get("id")), m.get("reasoning_content")))
            if "reasoning_content" in m:
                msg = REASONING_UNSUPPORTED.format(index=i)
                body = {"message": msg, "type": "invalid_request_error", "param": "validation_error", "code": "wrong_api_format"}
                raise _Reject(400, body, msg)
    return _deepseek(state, req, stream, rounds, reply, [], check=False)


def _deepseek(
    state: StrictState, req: dict[str, Any], stream: bool, rounds: int, reply: str | None, received: list[Received], check: bool = True
) -> Answer:
    msgs = _chat_messages(req)
    if req.get("tools") and check:
        for i, m in enumerate(msgs):
            calls = m.get("tool_calls")
            if m.get("role") != "assistant" or not calls:
                continue
            call_id = str((calls[0] or {}).get("id"))
            rc = m.get("reasoning_content")
            received.append(Received("deepseek", "reasoning_content", call_id, rc))
            if not isinstance(rc, str) or rc == "":
                msg = DEEPSEEK_MISSING.format(index=i)
                raise _Reject(400, _openai_error(msg, code="invalid_request_error"), msg)
            want = state.get("deepseek", call_id)
            if want is not None and rc != want:
                msg = DEEPSEEK_DIFFERS.format(index=i, call_id=call_id)
                raise _Reject(400, _openai_error(msg, code="invalid_request_error"), msg)
    n = state.next()
    model = req.get("model") or "deepseek-mock"
    done = _tool_rounds_done_chat(msgs)
    city = CITIES[done % len(CITIES)]
    reasoning = thought("deepseek", n, city)
    calls: list[dict[str, Any]] = []
    text = ""
    tool = pick_tool(req, city, state.read_path) if done < rounds else None
    if tool is not None:
        call_id = f"call_{n:04d}_0"
        calls = [{"id": call_id, "type": "function", "function": {"name": tool[0], "arguments": json.dumps(tool[1], ensure_ascii=False)}}]
        state.issue("deepseek", call_id, reasoning)
    else:
        text = _final_text(n, reply)
    return _chat_answer(f"chatcmpl-strict-{n:04d}", model, req, stream, reasoning, text, calls, ascii_only=not stream)


def _chat_answer(
    cid: str,
    model: str,
    req: dict[str, Any],
    stream: bool,
    reasoning: str | None,
    text: str,
    calls: list[dict[str, Any]],
    ascii_only: bool,
    message_extra: dict[str, Any] | None = None,
) -> Answer:
    finish = "tool_calls" if calls else "stop"
    usage = {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        message.update(message_extra or {})
        body = {
            "id": cid,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": usage,
        }
        return Answer(body=_dumps(body, ascii_only))

    def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        return _sse(obj, ascii_only=ascii_only)

    events = [chunk({"role": "assistant", "content": ""}, None)]
    if reasoning is not None:
        events += [chunk({"reasoning_content": p}, None) for p in _pieces(reasoning)]
    if text:
        events += [chunk({"content": p}, None) for p in _pieces(text)]
    for i, c in enumerate(calls):
        head: dict[str, Any] = {"index": i, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}
        if "extra_content" in c:
            head["extra_content"] = c["extra_content"]
        events.append(chunk({"tool_calls": [head]}, None))
        for p in _pieces(c["function"]["arguments"], 2):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}, None))
    events.append(chunk({}, finish))
    if (req.get("stream_options") or {}).get("include_usage"):
        events.append(_sse({"id": cid, "object": "chat.completion.chunk", "created": CREATED, "model": model, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    return Answer(events=events)


# ---------------------------------------------------------------------------------------------
# Gemini's OpenAI-compatible Chat endpoint
# ---------------------------------------------------------------------------------------------


def _gemini_error(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def _check_gemini_signature(mode: str, state: StrictState, call_key: str, sig: Any, name: str, position: int, wrap: bool) -> None:
    def reject(msg: str) -> None:
        body: Any = _gemini_error(msg)
        raise _Reject(400, [body] if wrap else body, msg)

    if not isinstance(sig, str) or not sig:
        reject(GEMINI_MISSING.format(name=name, position=position))
    if sig in GEMINI_DUMMIES:
        return
    if state.get(mode, call_key) != sig:
        reject(GEMINI_CORRUPTED)


def _gemini_openai(state: StrictState, req: dict[str, Any], stream: bool, rounds: int, reply: str | None, received: list[Received]) -> Answer:
    msgs = _chat_messages(req)
    last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=-1)
    for i, m in enumerate(msgs):
        calls = m.get("tool_calls")
        if i < last_user or m.get("role") != "assistant" or not calls:
            continue
        first = calls[0] or {}
        sig = (((first.get("extra_content") or {}).get("google")) or {}).get("thought_signature")
        call_id = str(first.get("id"))
        received.append(Received("gemini-openai", "thought_signature", call_id, sig))
        name = str((first.get("function") or {}).get("name"))
        _check_gemini_signature("gemini-openai", state, call_id, sig, name, i, wrap=True)
    n = state.next()
    model = req.get("model") or "gemini-mock"
    done = _tool_rounds_done_chat(msgs)
    calls: list[dict[str, Any]] = []
    text = ""
    tools = [pick_tool(req, CITIES[(2 * done + j) % len(CITIES)], state.read_path) for j in range(2)] if done < rounds else []
    if tools and tools[0] is not None:
        sig = signature("gemini-openai", n)
        for j, tool in enumerate(tools):
            assert tool is not None
            call: dict[str, Any] = {
                "id": f"call_gem_{n:04d}_{j}",
                "type": "function",
                "function": {"name": tool[0], "arguments": json.dumps(tool[1])},
            }
            if j == 0:
                call["extra_content"] = {"google": {"thought_signature": sig}}
                state.issue("gemini-openai", call["id"], sig)
            calls.append(call)
    else:
        text = _final_text(n, reply)
    return _chat_answer(f"chatcmpl-gem-{n:04d}", model, req, stream, None, text, calls, ascii_only=True)


# ---------------------------------------------------------------------------------------------
# Anthropic Messages with thinking
# ---------------------------------------------------------------------------------------------


def _anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}, "request_id": "req_strict_mock"}


def _blocks(m: dict[str, Any]) -> list[dict[str, Any]]:
    c = m.get("content")
    if isinstance(c, str):
        return [{"type": "text", "text": c}]
    return [b for b in c if isinstance(b, dict)] if isinstance(c, list) else []


CARRIER_BLOCKS = ("thinking", "redacted_thinking")


def _carrier_view(b: dict[str, Any]) -> tuple[str, Any, Any]:
    if b.get("type") == "thinking":
        return ("thinking", b.get("thinking"), b.get("signature"))
    return ("redacted_thinking", b.get("data"), None)


def _anthropic(state: StrictState, req: dict[str, Any], stream: bool, rounds: int, reply: str | None, received: list[Received]) -> Answer:
    msgs = [m for m in (req.get("messages") or []) if isinstance(m, dict)]
    assistants = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    # what came back, and every thinking block must verify (known text + signature)
    by_signature: dict[str, str] = {}
    with state.lock:
        for (mode, _key), blocks in state.issued.items():
            if mode == "anthropic":
                for kind, text, sig in blocks:
                    if kind == "thinking":
                        by_signature[sig] = text
    for i in assistants:
        blocks = _blocks(msgs[i])
        tool_ids = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        key = tool_ids[0] if tool_ids else f"messages.{i}"
        for j, b in enumerate(blocks):
            if b.get("type") == "thinking":
                received.append(Received("anthropic", "thinking", key, (b.get("thinking"), b.get("signature"))))
                if by_signature.get(b.get("signature")) != b.get("thinking"):
                    msg = ANTHROPIC_INVALID_SIGNATURE.format(index=i, block=j)
                    raise _Reject(400, _anthropic_error(msg), msg)
            elif b.get("type") == "redacted_thinking":
                received.append(Received("anthropic", "redacted_thinking", key, b.get("data")))
        if not any(b.get("type") in CARRIER_BLOCKS for b in blocks):
            received.append(Received("anthropic", "thinking", key, None))
    last = msgs[-1] if msgs else {}
    in_tool_loop = last.get("role") == "user" and any(b.get("type") == "tool_result" for b in _blocks(last))
    if in_tool_loop and assistants:
        i = assistants[-1]
        blocks = _blocks(msgs[i])
        first = blocks[0].get("type") if blocks else "text"
        if first not in CARRIER_BLOCKS:
            msg = ANTHROPIC_EXPECTED_THINKING.format(index=i, found=first)
            raise _Reject(400, _anthropic_error(msg), msg)
        tool_ids = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        want = state.get("anthropic", tool_ids[0]) if tool_ids else None
        if want is not None:
            got = [(j, _carrier_view(b)) for j, b in enumerate(blocks) if b.get("type") in CARRIER_BLOCKS]
            for k in range(max(len(got), len(want))):
                if k >= len(got) or k >= len(want) or got[k][1] != tuple(want[k]):
                    j = got[k][0] if k < len(got) else (got[-1][0] + 1 if got else 0)
                    msg = ANTHROPIC_MODIFIED.format(index=i, block=j)
                    raise _Reject(400, _anthropic_error(msg), msg)
    n = state.next()
    model = req.get("model") or "claude-mock"
    done = sum(1 for m in msgs for b in _blocks(m) if m.get("role") == "assistant" and b.get("type") == "tool_use")
    city = CITIES[done % len(CITIES)]
    think = thought("anthropic", n, city)
    sig = signature("anthropic", n)
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": think, "signature": sig}]
    tool = pick_tool(req, city, state.read_path) if done < rounds else None
    if tool is not None:
        data = signature("anthropic-redacted", n, 61)
        tool_id = f"toolu_strict_{n:04d}"
        content += [
            {"type": "redacted_thinking", "data": data},
            {"type": "text", "text": f"Checking the weather in {city}."},
            {"type": "tool_use", "id": tool_id, "name": tool[0], "input": tool[1]},
        ]
        state.issue("anthropic", tool_id, [("thinking", think, sig), ("redacted_thinking", data, None)])
        stop = "tool_use"
    else:
        content.append({"type": "text", "text": _final_text(n, reply)})
        stop = "end_turn"
    msg_id = f"msg_strict_{n:04d}"
    usage = {"input_tokens": 200, "output_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    if not stream:
        body = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        return Answer(body=_dumps(body, ascii_only=True))  # \u escapes (and surrogate pairs)

    def ev(obj: dict[str, Any]) -> bytes:
        return _sse(obj, obj["type"], ascii_only=False)  # raw UTF-8, raw U+2028

    start = {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None, "stop_sequence": None, "usage": dict(usage, output_tokens=1)}
    events = [ev({"type": "message_start", "message": start})]
    for idx, b in enumerate(content):
        kind = b["type"]
        if kind == "thinking":
            events.append(ev({"type": "content_block_start", "index": idx, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            for p in _pieces(b["thinking"]):
                events.append(ev({"type": "content_block_delta", "index": idx, "delta": {"type": "thinking_delta", "thinking": p}}))
            events.append(ev({"type": "content_block_delta", "index": idx, "delta": {"type": "signature_delta", "signature": b["signature"]}}))
        elif kind == "redacted_thinking":
            events.append(ev({"type": "content_block_start", "index": idx, "content_block": b}))
        elif kind == "text":
            events.append(ev({"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}}))
            for p in _pieces(b["text"]):
                events.append(ev({"type": "content_block_delta", "index": idx, "delta": {"type": "text_delta", "text": p}}))
        else:
            events.append(ev({"type": "content_block_start", "index": idx, "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}))
            for p in _pieces(json.dumps(b["input"], ensure_ascii=False), 2):
                events.append(ev({"type": "content_block_delta", "index": idx, "delta": {"type": "input_json_delta", "partial_json": p}}))
        events.append(ev({"type": "content_block_stop", "index": idx}))
    events += [
        ev({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 30}}),
        ev({"type": "message_stop"}),
    ]
    return Answer(events=events)


# ---------------------------------------------------------------------------------------------
# Gemini native
# ---------------------------------------------------------------------------------------------


def _gemini(state: StrictState, req: dict[str, Any], path: str, stream: bool, rounds: int, reply: str | None, received: list[Received]) -> Answer:
    contents = [c for c in (req.get("contents") or []) if isinstance(c, dict)]

    def parts(c: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in (c.get("parts") or []) if isinstance(p, dict)]

    # the current turn starts after the last user content that is not only functionResponses
    start = max(
        (i for i, c in enumerate(contents) if c.get("role", "user") == "user" and any("functionResponse" not in p for p in parts(c))),
        default=-1,
    )
    for i, c in enumerate(contents):
        if i <= start or c.get("role") != "model":
            continue
        calls = [p for p in parts(c) if "functionCall" in p]
        if not calls:
            continue
        first = calls[0]
        fc = first.get("functionCall") or {}
        sig = first.get("thoughtSignature", first.get("thought_signature"))
        key = str(fc.get("id") or f"{fc.get('name')}:{json.dumps(fc.get('args'), sort_keys=True)}")
        received.append(Received("gemini", "thought_signature", key, sig))
        _check_gemini_signature("gemini", state, key, sig, str(fc.get("name")), i, wrap=False)
    n = state.next()
    model = path.rsplit("/", 1)[-1].split(":", 1)[0] or "gemini-mock"
    done = sum(1 for c in contents if c.get("role") == "model" and any("functionCall" in p for p in parts(c)))
    sig = signature("gemini", n)
    tools = [pick_tool(req, CITIES[(2 * done + j) % len(CITIES)], state.read_path) for j in range(2)] if done < rounds else []
    if tools and tools[0] is not None:
        out_parts: list[dict[str, Any]] = []
        for j, tool in enumerate(tools):
            assert tool is not None
            p: dict[str, Any] = {"functionCall": {"id": f"gem_{n:04d}_{j}", "name": tool[0], "args": tool[1]}}
            if j == 0:
                p["thoughtSignature"] = sig
                state.issue("gemini", p["functionCall"]["id"], sig)
            out_parts.append(p)
    else:
        out_parts = [{"text": _final_text(n, reply), "thoughtSignature": sig}]
    usage = {"promptTokenCount": 200, "candidatesTokenCount": 20, "thoughtsTokenCount": 10, "totalTokenCount": 230}

    def resp(ps: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": ps}, "index": 0}
        if final:
            cand["finishReason"] = "STOP"
        return {"candidates": [cand], "usageMetadata": usage, "modelVersion": model, "responseId": f"strict-gemini-{n:04d}"}

    if not stream:
        return Answer(body=_dumps(resp(out_parts, True)))
    events = [_sse(resp([p], i == len(out_parts) - 1)) for i, p in enumerate(out_parts)]
    return Answer(events=events)


# ---------------------------------------------------------------------------------------------
# OpenAI Responses
# ---------------------------------------------------------------------------------------------


def _responses(state: StrictState, req: dict[str, Any], stream: bool, rounds: int, reply: str | None, received: list[Received]) -> Answer:
    items = req.get("input")
    items = [it for it in items if isinstance(it, dict)] if isinstance(items, list) else []
    seen_rs: set[str] = set()
    for it in items:
        kind = it.get("type")
        if kind == "reasoning":
            rs_id = str(it.get("id"))
            enc = it.get("encrypted_content")
            received.append(Received("responses", "reasoning", rs_id, enc))
            if not enc:
                msg = RESPONSES_NOT_FOUND.format(rs_id=rs_id)
                raise _Reject(400, _openai_error(msg, param="input"), msg)
            if encrypted_item_id(enc) != rs_id or state.get("responses", rs_id) != enc:
                raise _Reject(400, _openai_error(RESPONSES_ID_MISMATCH, code="invalid_encrypted_content"), RESPONSES_ID_MISMATCH)
            seen_rs.add(rs_id)
        elif kind == "function_call":
            issued = state.get("responses", f"call:{it.get('call_id')}")
            if issued is None:
                continue
            fc_id, rs_id = issued
            if rs_id not in seen_rs:
                received.append(Received("responses", "reasoning", rs_id, None))
                msg = RESPONSES_WITHOUT_REASONING.format(fc_id=fc_id, rs_id=rs_id)
                raise _Reject(400, _openai_error(msg, param="input"), msg)
    n = state.next()
    model = req.get("model") or "gpt-mock"
    done = sum(1 for it in items if it.get("type") == "function_call")
    city = CITIES[done % len(CITIES)]
    rs_id, fc_id, call_id, msg_id = f"rs_strict_{n:04d}", f"fc_strict_{n:04d}", f"call_strict_{n:04d}", f"msg_strict_{n:04d}"
    enc = encrypted_content(rs_id, n)
    state.issue("responses", rs_id, enc)
    reasoning = {
        "id": rs_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": thought("responses", n, city)}],
        "encrypted_content": enc,
    }
    tool = pick_tool(req, city, state.read_path) if done < rounds else None
    if tool is not None:
        second: dict[str, Any] = {
            "id": fc_id,
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": tool[0],
            "arguments": json.dumps(tool[1]),
        }
        state.issue("responses", f"call:{call_id}", (fc_id, rs_id))
    else:
        second = {
            "id": msg_id,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": _final_text(n, reply), "annotations": [], "logprobs": []}],
        }
    output = [reasoning, second]
    usage = {
        "input_tokens": 200,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": 230,
    }

    def response_obj(status: str, out: list[Any], u: Any) -> dict[str, Any]:
        return {
            "id": f"resp_strict_{n:04d}",
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": req.get("instructions"),
            "model": model,
            "output": out,
            "parallel_tool_calls": True,
            "previous_response_id": req.get("previous_response_id"),
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": req.get("store", False),
            "tool_choice": req.get("tool_choice", "auto"),
            "tools": req.get("tools", []),
            "usage": u,
            "metadata": {},
        }

    if not stream:
        return Answer(body=_dumps(response_obj("completed", output, usage)))
    seq = iter(range(1_000_000))

    def ev(kind: str, payload: dict[str, Any]) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **payload}, kind)

    events = [
        ev("response.created", {"response": response_obj("in_progress", [], None)}),
        ev("response.output_item.added", {"output_index": 0, "item": {"id": rs_id, "type": "reasoning", "summary": []}}),
        ev("response.output_item.done", {"output_index": 0, "item": reasoning}),
    ]
    if second["type"] == "function_call":
        events += [
            ev("response.output_item.added", {"output_index": 1, "item": dict(second, arguments="", status="in_progress")}),
            ev("response.function_call_arguments.delta", {"item_id": fc_id, "output_index": 1, "delta": second["arguments"]}),
            ev("response.function_call_arguments.done", {"item_id": fc_id, "output_index": 1, "arguments": second["arguments"]}),
            ev("response.output_item.done", {"output_index": 1, "item": second}),
        ]
    else:
        text = second["content"][0]["text"]
        part = second["content"][0]
        at = {"item_id": msg_id, "output_index": 1, "content_index": 0}
        events += [
            ev("response.output_item.added", {"output_index": 1, "item": dict(second, content=[], status="in_progress")}),
            ev("response.content_part.added", {**at, "part": dict(part, text="")}),
            ev("response.output_text.delta", {**at, "delta": text, "logprobs": []}),
            ev("response.output_text.done", {**at, "text": text, "logprobs": []}),
            ev("response.content_part.done", {**at, "part": part}),
            ev("response.output_item.done", {"output_index": 1, "item": second}),
        ]
    events.append(ev("response.completed", {"response": response_obj("completed", output, usage)}))
    return Answer(events=events)
