"""A small mock LLM provider for cachekeeper's end-to-end tests and agent trials.

Speaks just enough of each wire format for the official SDKs and real agents to complete a turn:

- Anthropic Messages: ``POST .../v1/messages`` (JSON and SSE), ``POST .../v1/messages/count_tokens``
- OpenAI Chat: ``POST .../chat/completions`` (JSON and SSE ``data:`` chunks, ``[DONE]``,
  the ``stream_options.include_usage`` chunk)
- OpenAI Responses: ``POST .../responses`` (JSON and SSE ``event:``/``data:`` pairs)
- Gemini: ``POST .../models/{model}:generateContent``, ``:streamGenerateContent?alt=sse``,
  ``:countTokens``
- Model lists: ``GET .../models`` (Anthropic, OpenAI or Gemini shape, by request headers / path)

Every response reports usage the way the real API does (the figures are the ``*_USAGE`` constants
below): Anthropic ``usage`` with ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` and
the TTL split ``cache_creation``, in a stream on ``message_start`` and again, cumulative, on the
last ``message_delta``; OpenAI Chat ``usage`` with ``prompt_tokens_details.cached_tokens`` (in a
stream only as the extra chunk with empty ``choices`` when ``stream_options.include_usage``);
Responses ``usage`` on ``response.completed``; Gemini ``usageMetadata`` on every chunk, the final
figures on the last one.

Every request is recorded (method, path, query, headers, raw body bytes) in ``MockUpstream.requests``
so tests can assert exactly what the proxy forwarded, and so is the response the mock wrote
(status, headers, and the body bytes exactly as written: encoded, without the HTTP chunk framing)
so tests can assert the client received exactly those bytes. Streaming responses are sent with
chunked transfer encoding, one flush per SSE event and a small delay between events, so a
buffering proxy is observable.

Per-request knobs, as request headers (they pass through cachekeeper like any other header):

- ``x-mock-gate: NAME`` -- after the first SSE event, wait (up to ``gate_timeout`` s) until the
  test calls ``mock.gate(NAME).set()``. ``RecordedRequest.gate_released`` says whether it was set
  in time: a proxy that buffers the stream makes the client miss the first event until timeout.
- ``x-mock-status: CODE`` -- answer with that HTTP status and the dialect's error body.
- ``x-mock-reply: TEXT`` -- reply text instead of the default.
- ``x-mock-usage: VARIANT`` -- the usage shape: ``none`` (no usage reported at all: no ``usage`` /
  ``usageMetadata``, no include_usage chunk); ``deepseek`` (OpenAI Chat: DeepSeek's
  ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``, ``DEEPSEEK_USAGE``);
  ``cache-write`` (OpenAI Chat and Responses: ``cache_write_tokens`` reported, as newer models
  do, ``OPENAI_USAGE_CACHE_WRITE`` / ``RESPONSES_USAGE_CACHE_WRITE``). Default: the ``*_USAGE``
  constants.
- ``x-mock-cache: exact-prefix`` -- (Anthropic) the usage comes from an exact-prefix prompt cache
  shared by every request to this mock (prefix_cache.py: breakpoints, 20-block lookback, 5-minute
  / 1-hour TTL on the mock's clock, ``MockUpstream.prefix_cache.advance(ms)``);
  ``RecordedRequest.cache_usage`` holds the figures.
- ``x-mock-reasoning: 1`` -- the response carries reasoning carriers (``REASONING_CARRIERS`` says
  how many per dialect): Anthropic a signed ``thinking`` block (``signature_delta`` when streamed)
  and a ``redacted_thinking`` block; OpenAI Chat ``reasoning_content`` (deltas when streamed);
  Responses a ``reasoning`` item with ``encrypted_content`` (its ``output_item.added`` copy
  without it, as the real API); Gemini two parallel ``functionCall`` parts, the first with a
  ``thoughtSignature``.
- ``x-mock-gzip: 1`` -- when the request's ``accept-encoding`` names gzip, the body is sent
  gzip-encoded (``content-encoding: gzip``); a stream is one gzip member flushed
  (``Z_SYNC_FLUSH``) after every event, so each chunk decodes as it arrives.
- ``x-mock-sse-extras: 1`` -- SSE comment lines (``: OPENROUTER PROCESSING``) before and between
  events, and (Anthropic) extra ``ping`` events.
- ``x-mock-crlf: 1`` -- SSE lines end with ``\\r\\n`` instead of ``\\n``.
- ``x-mock-split: N`` -- write the (encoded) stream in chunks of N bytes, whatever the event
  boundaries, with no pause between them.
- ``x-mock-reset-after: N`` -- after N SSE events (N encoded chunks), wait a moment and reset the
  connection (TCP RST); with ``x-mock-reset-cut: 1`` the first half of event N+1 is sent before
  the reset. ``RecordedRequest.reset`` says it happened.
- ``x-mock-garbage: KIND`` -- answer 200 with a body the dialect's parser cannot use:
  ``not_json`` / ``not_sse`` (an HTML page, or binary noise under ``text/event-stream``),
  ``invalid_utf8`` (the normal body with invalid UTF-8 bytes: in the reply text of a JSON body,
  in the first key of the first event's JSON in a stream), ``big_json`` (the normal JSON body whose reply text is
  ``BIG_JSON_TEXT_BYTES`` long, usage after it).
- ``x-mock-strict: MODE`` -- a provider that is strict about echoed reasoning carriers
  (``deepseek``, ``anthropic``, ``gemini``, ``gemini-openai``, ``responses``,
  ``no-reasoning-input``; ``auto`` picks one of the first five by the request's path): tool rounds whose answers carry carriers, and the provider's
  real 400 when a later request echoes a turn without them (strict_mock.py says what each mode
  issues and checks). ``x-mock-strict-rounds: N`` tool rounds before the text answer (default
  2). ``MockUpstream.strict`` holds what was issued and received; ``RecordedRequest.carriers``
  and ``strict_error`` say what one request delivered and why it was refused.

Run standalone for the agent trials::

    python tests/e2e/mock_upstream.py --port 9100 [--record requests.jsonl]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import socket
import struct
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import prefix_cache
import strict_mock

DEFAULT_REPLY = "Hello from the mock upstream."

# Usage figures every response reports, so tests can assert what the SDK parsed and what the
# proxy logged. Shapes as the real APIs report them (Anthropic: `input_tokens` excludes cached
# tokens, `cache_creation_input_tokens` is the sum of the TTL split).
ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 248,
    "cache_read_input_tokens": 5120,
    "cache_creation": {"ephemeral_5m_input_tokens": 148, "ephemeral_1h_input_tokens": 100},
    "output_tokens": 7,
    "service_tier": "standard",
}
# Chat: `prompt_tokens` includes `cached_tokens`.
OPENAI_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 7,
    "total_tokens": 2013,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}
# Newer models also report the tokens written to the cache (included in `prompt_tokens`).
OPENAI_USAGE_CACHE_WRITE = {
    "prompt_tokens": 2006,
    "completion_tokens": 7,
    "total_tokens": 2013,
    "prompt_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 64, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}
# DeepSeek: hit + miss = prompt; no `prompt_tokens_details`.
DEEPSEEK_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 7,
    "total_tokens": 2013,
    "prompt_cache_hit_tokens": 1792,
    "prompt_cache_miss_tokens": 214,
    "completion_tokens_details": {"reasoning_tokens": 0},
}
RESPONSES_USAGE = {
    "input_tokens": 2006,
    "input_tokens_details": {"cached_tokens": 1920},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 2013,
}
RESPONSES_USAGE_CACHE_WRITE = {
    "input_tokens": 2006,
    "input_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 64},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 2013,
}
# Gemini: `promptTokenCount` includes `cachedContentTokenCount`; the bill's output is
# candidates + thoughts; total = prompt + candidates + thoughts.
GEMINI_USAGE = {
    "promptTokenCount": 2006,
    "cachedContentTokenCount": 1920,
    "candidatesTokenCount": 7,
    "thoughtsTokenCount": 5,
    "totalTokenCount": 2018,
}
# With x-mock-reasoning: the reasoning share of the output (already inside the output count).
REASONING_TOKENS = 4
# How many reasoning carriers a response with x-mock-reasoning holds, per dialect.
REASONING_CARRIERS = {"anthropic": 2, "openai": 1, "responses": 1, "gemini": 1}
ANTHROPIC_SIGNATURE = "EqQBCgIYAhIMmockSignature0001GgxtaW5pbWFsIHRoaW5raW5n"
ANTHROPIC_REDACTED = "EmwKAhgBEgy3va3pzixMockRedacted0001"
RESPONSES_ENCRYPTED = "gAAAAABmockEncryptedReasoning0001"
GEMINI_SIGNATURE = base64.b64encode(b"mock gemini thought signature 0001").decode()
BIG_JSON_TEXT_BYTES = 50_000_000  # x-mock-garbage: big_json
CREATED = 1_764_500_000  # fixed timestamp: responses are deterministic


@dataclass
class RecordedRequest:
    """One request as the mock received it, and the response the mock wrote."""

    method: str
    path: str  # without the query
    query: str  # raw query string, '' if none
    headers: list[tuple[str, str]]  # in arrival order, names as sent
    body: bytes  # raw bytes as received (after de-chunking, before content decoding)
    received_at: float = 0.0
    gate_released: bool | None = None  # None: no gate asked
    events_sent: int = 0
    completed: bool = False  # the whole response was written
    client_gone: bool = False  # the connection broke while answering
    response_status: int | None = None
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    # the body bytes exactly as written (content-encoded, without the HTTP chunk framing)
    response_body: bytearray = field(default_factory=bytearray)
    reset: bool = False  # the mock reset the connection mid-response (x-mock-reset-after)
    cache_usage: Any = None  # x-mock-cache: exact-prefix: the prefix_cache.Usage it answered
    # x-mock-strict: the carriers this request delivered, and the 400's message if refused
    carriers: list[strict_mock.Received] = field(default_factory=list)
    strict_error: str | None = None
    # cloud routes (cloud_mock.CloudMock): the operation and model the path named, how the
    # request authenticated ('sigv4', 'bearer', 'api-key', or None: no credential), whether
    # its SigV4 signature verified (None: not a SigV4 request), and why auth was refused
    operation: str | None = None
    model_id: str | None = None
    auth_scheme: str | None = None
    signature_verified: bool | None = None
    auth_error: str | None = None

    def header(self, name: str) -> str | None:
        """Value of the first header called ``name`` (case-insensitive), or None."""
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return None

    def header_all(self, name: str) -> list[str]:
        lname = name.lower()
        return [v for k, v in self.headers if k.lower() == lname]

    def response_header(self, name: str) -> str | None:
        lname = name.lower()
        for k, v in self.response_headers:
            if k.lower() == lname:
                return v
        return None

    @property
    def decoded_body(self) -> bytes:
        """The body with any ``content-encoding`` (gzip, deflate) undone."""
        enc = (self.header("content-encoding") or "").strip().lower()
        if enc == "gzip":
            return gzip.decompress(self.body)
        if enc == "deflate":
            return zlib.decompress(self.body)
        return self.body

    def json(self) -> Any:
        return json.loads(self.decoded_body)

    @property
    def query_params(self) -> dict[str, list[str]]:
        return parse_qs(self.query, keep_blank_values=True)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog. socketserver's default is 5: with hundreds of connections opened at
    # once (benches/soak.py's 1,000 streams), the kernel's accept queue overflows, the final
    # ACK of a handshake is dropped, and the proxy's request on that connection (established
    # on its side) is answered with a reset. Providers' front ends accept thousands at once.
    request_queue_size = 4096

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # sockets to close with a reset (SO_LINGER 0, no shutdown first, which would send FIN)
        self.abortive: set[Any] = set()

    def shutdown_request(self, request: Any) -> None:
        if request in self.abortive:
            self.abortive.discard(request)
            request.close()
            return
        super().shutdown_request(request)


class MockUpstream:
    """The mock server; run it in a background thread with :meth:`start`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        sse_delay: float = 0.02,
        gate_timeout: float = 10.0,
        reply_text: str = DEFAULT_REPLY,
        on_request: Callable[[RecordedRequest], None] | None = None,
        strict: str | None = None,
    ) -> None:
        """``strict``: the ``x-mock-strict`` mode for requests that send no such header (for
        agents, which cannot add headers; ``auto`` picks the mode by path)."""
        self.sse_delay = sse_delay
        self.gate_timeout = gate_timeout
        self.reply_text = reply_text
        self.on_request = on_request
        self.strict_default = strict
        self.strict = strict_mock.StrictState()
        # x-mock-cache: exact-prefix (Anthropic): one provider-side cache for every request.
        self.prefix_cache = prefix_cache.PrefixCache()
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Event] = {}
        self._counter = 0
        mock = self

        class Handler(self.handler_base()):  # type: ignore[misc]
            upstream = mock

        self._server = _Server((host, port), Handler)
        self._thread: threading.Thread | None = None

    @classmethod
    def handler_base(cls) -> type["_Handler"]:
        """The request handler class; a subclass of the mock (cloud_mock.CloudMock) answers
        more routes with a subclass of it."""
        return _Handler

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MockUpstream":
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="mock-upstream", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        for g in list(self._gates.values()):
            g.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "MockUpstream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- recording ---------------------------------------------------------------------------
    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self._gates.clear()
        self.strict.clear()

    def record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)
        if self.on_request is not None:
            self.on_request(req)

    def matching(self, method: str | None = None, path_suffix: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            reqs = list(self.requests)
        return [
            r
            for r in reqs
            if (method is None or r.method == method)
            and (path_suffix is None or r.path.endswith(path_suffix))
        ]

    def last(self, method: str | None = None, path_suffix: str | None = None) -> RecordedRequest:
        found = self.matching(method, path_suffix)
        if not found:
            with self._lock:
                seen = [(r.method, r.path) for r in self.requests]
            raise AssertionError(
                f"mock upstream got no {method or 'any'} request for *{path_suffix or ''}; got {seen}"
            )
        return found[-1]

    def wait_completed(self, rec: RecordedRequest, timeout: float = 5.0) -> bool:
        """Wait until the mock has written the whole response to ``rec`` (the client may see the
        last event before the handler has written the final zero-length chunk)."""
        deadline = time.monotonic() + timeout
        while not rec.completed and not rec.client_gone and not rec.reset and time.monotonic() < deadline:
            time.sleep(0.01)
        return rec.completed

    def gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter


# ---------------------------------------------------------------------------------------------
# Request handler
# ---------------------------------------------------------------------------------------------


class _ClientGone(Exception):
    pass


class _Reset(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    upstream: MockUpstream  # set by the subclass built in MockUpstream.__init__
    protocol_version = "HTTP/1.1"
    server_version = "mock-upstream/1"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet; the records are the log

    # every method goes through one dispatcher
    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

    # -- recording the response ----------------------------------------------------------------
    def send_response(self, code: int, message: str | None = None) -> None:
        rec = getattr(self, "rec", None)
        if rec is not None:
            rec.response_status = code
        super().send_response(code, message)

    def send_header(self, keyword: str, value: str) -> None:
        rec = getattr(self, "rec", None)
        if rec is not None:
            rec.response_headers.append((keyword, value))
        super().send_header(keyword, value)

    # -- knobs ----------------------------------------------------------------------------------
    def knob(self, name: str) -> str | None:
        """The ``x-mock-NAME`` request header, stripped, or None."""
        v = self.rec.header(f"x-mock-{name}")
        return v.strip() if v is not None else None

    def _flag(self, name: str) -> bool:
        return (self.knob(name) or "").lower() in ("1", "true", "yes", "on")

    def _usage_variant(self) -> str:
        return (self.knob("usage") or "").lower()

    def _reasoning(self) -> bool:
        return self._flag("reasoning")

    def _garbage(self) -> str:
        return (self.knob("garbage") or "").lower()

    def _gzip_wanted(self) -> bool:
        accepted = (self.rec.header("accept-encoding") or "").lower()
        return self._flag("gzip") and "gzip" in accepted

    # -- plumbing ----------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        te = (self.headers.get("transfer-encoding") or "").lower()
        if "chunked" in te:
            out = bytearray()
            while True:
                line = self.rfile.readline()
                if not line:
                    break
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the blank line
                    while True:
                        t = self.rfile.readline()
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                out += self.rfile.read(size)
                self.rfile.readline()  # CRLF after the chunk
            return bytes(out)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, status: int, obj: Any, extra_headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        garbage = self._garbage() if status == 200 else ""
        if garbage in ("not_json", "not_sse"):
            data = b"<html><head><title>502 Bad Gateway</title></head><body>upstream said no</body></html>\n"
        elif garbage == "invalid_utf8":
            data = _corrupt_utf8(data, self._reply_text().encode())
        self._send_body(status, data, "application/json", extra_headers)

    def _send_body(self, status: int, data: bytes, content_type: str, extra_headers: dict[str, str] | None = None) -> None:
        headers = dict(extra_headers or {})
        if self._gzip_wanted():
            data = gzip.compress(data, mtime=0)
            headers["content-encoding"] = "gzip"
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.rec.response_body += data  # before the write: the client may read it at once
            self.wfile.write(data)
        self.wfile.flush()
        self.rec.completed = True

    def _start_sse(self, extra_headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        if self._gzip_wanted():
            self.send_header("content-encoding", "gzip")
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.rec.response_body += data  # before the write: the client may read it at once
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            self.rec.client_gone = True
            raise _ClientGone() from e

    def _shape_events(self, events: list[bytes]) -> list[bytes]:
        """Apply the stream knobs that change the plain event bytes."""
        garbage = self._garbage()
        if garbage in ("not_json", "not_sse"):
            return [
                b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR not an event stream",
                b"\x00\x01\x02 binary noise without a line end " * 64,
                b"\xff\xfe\xfd{\"usage\":{\"input_tokens\":1}",
            ]
        if garbage == "invalid_utf8" and events:
            # inside the first event's JSON (its first key), so that event's data cannot be
            # read; bytes before `data:` would only make an unknown field name, which SSE ignores
            events = [_corrupt_utf8(events[0], b'{"', b'{"\xff\xfe')] + events[1:]
        if self._flag("sse-extras"):
            comment = b": OPENROUTER PROCESSING\n\n"
            ping = b'event: ping\ndata: {"type": "ping"}\n\n'
            anthropic = _dialect_of(self.rec.path, self.rec) == "anthropic"
            shaped = [comment]
            for i, ev in enumerate(events):
                shaped.append(ev)
                if i < len(events) - 1:
                    shaped.append(ping if anthropic and i % 2 == 0 else comment)
            events = shaped
        if self._flag("crlf"):
            events = [ev.replace(b"\n", b"\r\n") for ev in events]
        return events

    def _send_events(self, events: list[bytes]) -> None:
        """Write SSE events one chunk (and one flush) each, pausing between them; then the
        stream knobs: gzip, re-chunking, a reset mid-way."""
        up = self.upstream
        events = self._shape_events(events)
        if self._gzip_wanted():
            co = zlib.compressobj(6, zlib.DEFLATED, 31)
            events = [co.compress(ev) + co.flush(zlib.Z_SYNC_FLUSH) for ev in events]
            events[-1] += co.flush()
        reset_at: int | None = None
        if self.knob("reset-after") is not None:
            n = int(self.knob("reset-after") or 0)
            reset_at = sum(len(ev) for ev in events[:n])
            if self._flag("reset-cut") and n < len(events):
                reset_at += len(events[n]) // 2
        delay = up.sse_delay
        split = int(self.knob("split") or 0)
        if split > 0:
            whole = b"".join(events)
            events = [whole[i : i + split] for i in range(0, len(whole), split)]
            delay = 0.0
        gate_name = self.rec.header("x-mock-gate")
        sent = 0
        for i, ev in enumerate(events):
            if i > 0 and delay:
                time.sleep(delay)
            if reset_at is not None and sent + len(ev) >= reset_at:
                if reset_at > sent:
                    self._chunk(ev[: reset_at - sent])
                self._reset()
            self._chunk(ev)
            sent += len(ev)
            self.rec.events_sent += 1
            if i == 0 and gate_name:
                self.rec.gate_released = up.gate(gate_name).wait(up.gate_timeout)
        if reset_at is not None:
            self._reset()
        self._chunk(b"")  # terminating zero-length chunk
        self.rec.completed = True

    def _reset(self) -> None:
        """Reset the connection: give the reader a moment to take what was sent, then close
        with SO_LINGER 0 (an RST, not a FIN)."""
        self.wfile.flush()
        time.sleep(0.3)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.server.abortive.add(self.connection)  # type: ignore[attr-defined]
        self.rec.reset = True
        raise _Reset()

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        body = self._read_body()
        self.rec = RecordedRequest(
            method=self.command,
            path=split.path,
            query=split.query,
            headers=list(self.headers.items()),
            body=body,
            received_at=time.monotonic(),
        )
        self.upstream.record(self.rec)
        try:
            self._route(split.path)
        except _Reset:
            self.close_connection = True
        except _ClientGone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.rec.client_gone = True
            self.close_connection = True

    def _json_body(self) -> dict[str, Any]:
        try:
            obj = self.rec.json()
        except Exception:  # noqa: BLE001 - the mock answers anything that is not JSON with {}
            return {}
        return obj if isinstance(obj, dict) else {}

    def _route(self, path: str) -> None:
        m = self.command
        req = self._json_body() if m == "POST" else {}
        forced = self.rec.header("x-mock-status")
        dialect = _dialect_of(path, self.rec)
        if forced:
            return self._send_json(int(forced), _error_body(dialect, int(forced)))
        if m == "POST" and path.endswith("/messages/count_tokens"):
            return self._send_json(200, {"input_tokens": _rough_tokens(self.rec.body)})
        strict = (self.knob("strict") or self.upstream.strict_default or "").lower()
        if strict and m == "POST":
            mode = _strict_mode(path) if strict == "auto" else strict
            if mode is not None and _strict_mode(path) is not None:
                return self._strict(mode, path, req)
        if m == "POST" and path.endswith("/messages"):
            return self._anthropic(req)
        if m == "POST" and path.endswith("/chat/completions"):
            return self._openai_chat(req)
        if m == "POST" and path.endswith("/responses"):
            return self._responses(req)
        if m == "POST" and ":streamGenerateContent" in path:
            return self._gemini(req, path, stream=True)
        if m == "POST" and ":generateContent" in path:
            return self._gemini(req, path, stream=False)
        if m == "POST" and ":countTokens" in path:
            return self._send_json(200, {"totalTokens": _rough_tokens(self.rec.body)})
        if m in ("GET", "HEAD") and path.rstrip("/").endswith("/models"):
            return self._send_json(200, _models_list(dialect))
        if m in ("GET", "HEAD") and "/models/" in path:
            return self._send_json(200, _model_info(dialect, path.rsplit("/", 1)[-1]))
        if m in ("GET", "HEAD") and path in ("/", ""):
            return self._send_json(200, {"ok": True})
        return self._send_json(404, _error_body(dialect, 404, f"mock upstream: no handler for {m} {path}"))

    def _strict(self, mode: str, path: str, req: dict[str, Any]) -> None:
        stream = ":streamGenerateContent" in path if mode == "gemini" else bool(req.get("stream"))
        rounds = int(self.knob("strict-rounds") or strict_mock.DEFAULT_ROUNDS)
        # the reply text: the header's; for a server-wide strict mode (agent trials) the mock's
        reply = self.rec.header("x-mock-reply") or (self.upstream.reply_text if self.upstream.strict_default else None)
        a = strict_mock.answer(mode, self.upstream.strict, req, path, stream, rounds, reply)
        self.rec.carriers = a.received
        self.rec.strict_error = a.error
        if a.events is not None:
            self._start_sse()
            return self._send_events(a.events)
        assert a.body is not None
        self._send_body(a.status, a.body, "application/json")

    def _reply_text(self) -> str:
        if self._garbage() == "big_json":
            return "x" * BIG_JSON_TEXT_BYTES
        return self.rec.header("x-mock-reply") or self.upstream.reply_text

    # -- Anthropic Messages --------------------------------------------------------------------
    def _anthropic(self, req: dict[str, Any]) -> None:
        n = self.upstream.next_id()
        model = req.get("model") or "claude-mock"
        text = self._reply_text()
        msg_id = f"msg_mock_{n:04d}"
        hdrs = {"request-id": f"req_mock_{n:04d}"}
        usage: dict[str, Any] | None = None if self._usage_variant() == "none" else dict(ANTHROPIC_USAGE)
        if (self.knob("cache") or "").lower() == "exact-prefix":
            u = self.upstream.prefix_cache.usage(req)
            usage = {
                "input_tokens": u.input_tokens,
                "cache_creation_input_tokens": u.cache_creation_input_tokens,
                "cache_read_input_tokens": u.cache_read_input_tokens,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": u.cache_creation_input_tokens - u.cache_creation_1h,
                    "ephemeral_1h_input_tokens": u.cache_creation_1h,
                },
                "output_tokens": 7,
                "service_tier": "standard",
            }
            self.rec.cache_usage = u
        reasoning = self._reasoning()
        thinking_text = "The user wants a greeting; answer briefly."
        if not req.get("stream"):
            content: list[dict[str, Any]] = []
            if reasoning:
                content += [
                    {"type": "thinking", "thinking": thinking_text, "signature": ANTHROPIC_SIGNATURE},
                    {"type": "redacted_thinking", "data": ANTHROPIC_REDACTED},
                ]
            content.append({"type": "text", "text": text})
            msg: dict[str, Any] = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": "end_turn",
                "stop_sequence": None,
            }
            if usage is not None:
                msg["usage"] = usage
            return self._send_json(200, msg, hdrs)
        start_msg: dict[str, Any] = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        }
        if usage is not None:
            start_msg["usage"] = dict(usage, output_tokens=1)
        events = [_sse_named("message_start", {"type": "message_start", "message": start_msg})]
        index = 0
        if reasoning:
            events += [
                _sse_named(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
                ),
            ]
            for piece in _pieces(thinking_text, 2):
                events.append(
                    _sse_named(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": piece}},
                    )
                )
            events += [
                _sse_named(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": ANTHROPIC_SIGNATURE}},
                ),
                _sse_named("content_block_stop", {"type": "content_block_stop", "index": 0}),
                _sse_named(
                    "content_block_start",
                    {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": ANTHROPIC_REDACTED}},
                ),
                _sse_named("content_block_stop", {"type": "content_block_stop", "index": 1}),
            ]
            index = 2
        events += [
            _sse_named(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            ),
            _sse_named("ping", {"type": "ping"}),
        ]
        for piece in _pieces(text):
            events.append(
                _sse_named(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                )
            )
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
        if usage is not None:
            # cumulative, as the real API sends it: the input-side figures again, the final output
            delta["usage"] = {
                "input_tokens": usage["input_tokens"],
                "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
                "cache_read_input_tokens": usage["cache_read_input_tokens"],
                "output_tokens": usage["output_tokens"],
            }
        events += [
            _sse_named("content_block_stop", {"type": "content_block_stop", "index": index}),
            _sse_named("message_delta", delta),
            _sse_named("message_stop", {"type": "message_stop"}),
        ]
        self._start_sse(hdrs)
        self._send_events(events)

    # -- OpenAI Chat Completions ---------------------------------------------------------------
    def _openai_usage(self) -> dict[str, Any] | None:
        variant = self._usage_variant()
        if variant == "none":
            return None
        base = {"deepseek": DEEPSEEK_USAGE, "cache-write": OPENAI_USAGE_CACHE_WRITE}.get(variant, OPENAI_USAGE)
        usage = json.loads(json.dumps(base))
        if self._reasoning():
            usage["completion_tokens_details"]["reasoning_tokens"] = REASONING_TOKENS
        return usage

    def _openai_chat(self, req: dict[str, Any]) -> None:
        n = self.upstream.next_id()
        model = req.get("model") or "gpt-mock"
        text = self._reply_text()
        cid = f"chatcmpl-mock-{n:04d}"
        hdrs = {"x-request-id": f"req_mock_{n:04d}"}
        usage = self._openai_usage()
        reasoning = "The user wants a greeting; answer briefly." if self._reasoning() else None
        if not req.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
            if reasoning is not None:
                message["reasoning_content"] = reasoning
            body: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion",
                "created": CREATED,
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
            }
            if usage is not None:
                body["usage"] = usage
            body["system_fingerprint"] = "fp_mock"
            return self._send_json(200, body, hdrs)
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
            obj: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "system_fingerprint": "fp_mock",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if include_usage:
                obj["usage"] = None
            return _sse_data(obj)

        events = [chunk({"role": "assistant", "content": "", "refusal": None}, None)]
        if reasoning is not None:
            events += [chunk({"reasoning_content": p}, None) for p in _pieces(reasoning)]
        events += [chunk({"content": p}, None) for p in _pieces(text)]
        events.append(chunk({}, "stop"))
        if include_usage and usage is not None:
            events.append(
                _sse_data(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": CREATED,
                        "model": model,
                        "system_fingerprint": "fp_mock",
                        "choices": [],
                        "usage": usage,
                    }
                )
            )
        events.append(b"data: [DONE]\n\n")
        self._start_sse(hdrs)
        self._send_events(events)

    # -- OpenAI Responses ----------------------------------------------------------------------
    def _responses(self, req: dict[str, Any]) -> None:
        n = self.upstream.next_id()
        model = req.get("model") or "gpt-mock"
        text = self._reply_text()
        rid = f"resp_mock_{n:04d}"
        mid = f"msg_mock_{n:04d}"
        rsid = f"rs_mock_{n:04d}"
        hdrs = {"x-request-id": f"req_mock_{n:04d}"}
        variant = self._usage_variant()
        usage: dict[str, Any] | None = None
        if variant != "none":
            usage = json.loads(json.dumps(RESPONSES_USAGE_CACHE_WRITE if variant == "cache-write" else RESPONSES_USAGE))
            if self._reasoning():
                usage["output_tokens_details"]["reasoning_tokens"] = REASONING_TOKENS
        summary = "Greet the user briefly."
        reasoning_done = {
            "id": rsid,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": RESPONSES_ENCRYPTED,
            "status": "completed",
        }
        part_done = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        item_done = {
            "id": mid,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part_done],
        }
        final_output = [reasoning_done, item_done] if self._reasoning() else [item_done]
        msg_index = len(final_output) - 1

        def response_obj(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "response",
                "created_at": CREATED,
                "status": status,
                "error": None,
                "incomplete_details": None,
                "instructions": req.get("instructions"),
                "max_output_tokens": req.get("max_output_tokens"),
                "model": model,
                "output": output,
                "parallel_tool_calls": req.get("parallel_tool_calls", True),
                "previous_response_id": req.get("previous_response_id"),
                "reasoning": {"effort": None, "summary": None},
                "store": req.get("store", True),
                "temperature": req.get("temperature", 1.0),
                "text": {"format": {"type": "text"}},
                "tool_choice": req.get("tool_choice", "auto"),
                "tools": req.get("tools", []),
                "top_p": req.get("top_p", 1.0),
                "truncation": "disabled",
                "usage": usage,
                "user": None,
                "metadata": {},
            }

        if not req.get("stream"):
            return self._send_json(200, response_obj("completed", final_output, usage), hdrs)

        seq = iter(range(1_000_000))

        def ev(kind: str, payload: dict[str, Any]) -> bytes:
            return _sse_named(kind, {"type": kind, "sequence_number": next(seq), **payload})

        events = [
            ev("response.created", {"response": response_obj("in_progress", [], None)}),
            ev("response.in_progress", {"response": response_obj("in_progress", [], None)}),
        ]
        if self._reasoning():
            # the `added` copy is incomplete (no encrypted_content, empty summary), as the real API
            events += [
                ev(
                    "response.output_item.added",
                    {"output_index": 0, "item": {"id": rsid, "type": "reasoning", "summary": [], "status": "in_progress"}},
                ),
                ev(
                    "response.reasoning_summary_part.added",
                    {"item_id": rsid, "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
                ),
            ]
            for p in _pieces(summary, 2):
                events.append(
                    ev(
                        "response.reasoning_summary_text.delta",
                        {"item_id": rsid, "output_index": 0, "summary_index": 0, "delta": p},
                    )
                )
            events += [
                ev(
                    "response.reasoning_summary_text.done",
                    {"item_id": rsid, "output_index": 0, "summary_index": 0, "text": summary},
                ),
                ev(
                    "response.reasoning_summary_part.done",
                    {"item_id": rsid, "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": summary}},
                ),
                ev("response.output_item.done", {"output_index": 0, "item": reasoning_done}),
            ]
        events += [
            ev(
                "response.output_item.added",
                {
                    "output_index": msg_index,
                    "item": {"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
                },
            ),
            ev(
                "response.content_part.added",
                {
                    "item_id": mid,
                    "output_index": msg_index,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                },
            ),
        ]
        for p in _pieces(text):
            events.append(
                ev(
                    "response.output_text.delta",
                    {"item_id": mid, "output_index": msg_index, "content_index": 0, "delta": p, "logprobs": []},
                )
            )
        events += [
            ev(
                "response.output_text.done",
                {"item_id": mid, "output_index": msg_index, "content_index": 0, "text": text, "logprobs": []},
            ),
            ev(
                "response.content_part.done",
                {"item_id": mid, "output_index": msg_index, "content_index": 0, "part": part_done},
            ),
            ev("response.output_item.done", {"output_index": msg_index, "item": item_done}),
            ev("response.completed", {"response": response_obj("completed", final_output, usage)}),
        ]
        self._start_sse(hdrs)
        self._send_events(events)

    # -- Gemini ----------------------------------------------------------------------------------
    def _gemini(self, req: dict[str, Any], path: str, stream: bool) -> None:
        model = path.rsplit("/", 1)[-1].split(":", 1)[0] or "gemini-mock"
        text = self._reply_text()
        gen = req.get("generationConfig") or {}
        if gen.get("responseMimeType") == "application/json":
            # Gemini CLI asks for JSON in side calls (routing, who speaks next): answer with an
            # object that fits the schema it sent.
            schema = gen.get("responseJsonSchema") or gen.get("responseSchema") or {}
            value = _from_schema(schema)
            if not isinstance(value, dict) or not value:
                value = {"reasoning": "mock upstream", "next_speaker": "user"}
            text = json.dumps(value)
        report_usage = self._usage_variant() != "none"

        def resp(parts: list[dict[str, Any]], final: bool, candidates_so_far: int) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            if final:
                cand["finishReason"] = "STOP"
            out: dict[str, Any] = {"candidates": [cand], "modelVersion": model, "responseId": "mock-gemini"}
            if report_usage:
                # every chunk has usageMetadata; only the last one has the final figures
                out["usageMetadata"] = (
                    dict(GEMINI_USAGE)
                    if final
                    else {
                        "promptTokenCount": GEMINI_USAGE["promptTokenCount"],
                        "cachedContentTokenCount": GEMINI_USAGE["cachedContentTokenCount"],
                        "candidatesTokenCount": candidates_so_far,
                        "totalTokenCount": GEMINI_USAGE["promptTokenCount"] + candidates_so_far,
                    }
                )
            return out

        if self._reasoning():
            # parallel function calls: only the first part carries the signature
            first = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": GEMINI_SIGNATURE}
            second = {"functionCall": {"name": "get_weather", "args": {"city": "Lyon"}}}
            if not stream:
                return self._send_json(200, resp([first, second], True, 0))
            events = [_sse_data(resp([first], False, 3)), _sse_data(resp([second], True, 0))]
            self._start_sse()
            return self._send_events(events)
        if not stream:
            return self._send_json(200, resp([{"text": text}], True, 0))
        pieces = _pieces(text)
        events = [
            _sse_data(resp([{"text": p}], i == len(pieces) - 1, i + 1)) for i, p in enumerate(pieces)
        ]
        self._start_sse()
        self._send_events(events)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _sse_named(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _sse_data(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _corrupt_utf8(data: bytes, needle: bytes, replacement: bytes | None = None) -> bytes:
    """``data`` with its first ``needle`` replaced by bytes that are not UTF-8 (by default the
    needle with 0xFF 0xFE after its first byte); prefixed with them when the needle is absent."""
    if replacement is None:
        replacement = needle[:1] + b"\xff\xfe" + needle[1:]
    i = data.find(needle) if needle else -1
    if i < 0:
        return b"\xff\xfe" + data
    return data[:i] + replacement + data[i + len(needle) :]


def _pieces(text: str, n: int = 3) -> list[str]:
    """Split ``text`` into up to ``n`` non-empty pieces (the streamed deltas)."""
    if len(text) < n:
        return [text]
    step = -(-len(text) // n)
    return [text[i : i + step] for i in range(0, len(text), step)]


def _from_schema(schema: Any, depth: int = 0) -> Any:
    """A small value that satisfies a JSON / OpenAPI schema (types may be upper-case)."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _from_schema(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _from_schema(v, depth + 1) for k, v in props.items()}
    if kind == "array":
        n = int(schema.get("minItems") or 0)
        return [_from_schema(schema.get("items") or {}, depth + 1) for _ in range(n)]
    if kind in ("number", "integer"):
        lo = schema.get("minimum")
        return lo if isinstance(lo, (int, float)) else 1
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "mock upstream"


def _strict_mode(path: str) -> str | None:
    """The strict mode ``auto`` means for a generation path (None: not a generation path)."""
    last = path.rsplit("/", 1)[-1]
    if ":generateContent" in last or ":streamGenerateContent" in last:
        return "gemini"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/chat/completions"):
        return "gemini-openai" if "/v1beta/openai/" in path else "deepseek"
    if path.endswith("/responses"):
        return "responses"
    return None


def _rough_tokens(body: bytes) -> int:
    return max(1, len(body) // 4)


def _dialect_of(path: str, rec: RecordedRequest) -> str:
    if ":" in path.rsplit("/", 1)[-1] or "/v1beta/" in path or rec.header("x-goog-api-key"):
        return "gemini"
    if path.endswith("/messages") or "/messages/" in path or rec.header("anthropic-version") or rec.header("x-api-key"):
        return "anthropic"
    return "openai"


def _error_body(dialect: str, status: int, message: str | None = None) -> dict[str, Any]:
    message = message or f"mock upstream: forced status {status}"
    if dialect == "anthropic":
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if dialect == "gemini":
        return {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


MODEL_IDS = ["mock-model-large", "mock-model-small"]


def _models_list(dialect: str) -> dict[str, Any]:
    if dialect == "anthropic":
        data = [_model_info("anthropic", m) for m in MODEL_IDS]
        return {"data": data, "has_more": False, "first_id": MODEL_IDS[0], "last_id": MODEL_IDS[-1]}
    if dialect == "gemini":
        return {"models": [_model_info("gemini", m) for m in MODEL_IDS]}
    return {"object": "list", "data": [_model_info("openai", m) for m in MODEL_IDS]}


def _model_info(dialect: str, model_id: str) -> dict[str, Any]:
    if dialect == "anthropic":
        return {"type": "model", "id": model_id, "display_name": model_id, "created_at": "2026-01-01T00:00:00Z"}
    if dialect == "gemini":
        return {
            "name": f"models/{model_id}",
            "displayName": model_id,
            "inputTokenLimit": 1_048_576,
            "outputTokenLimit": 65_536,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }
    return {"id": model_id, "object": "model", "created": CREATED, "owned_by": "mock"}


# ---------------------------------------------------------------------------------------------
# standalone
# ---------------------------------------------------------------------------------------------


def _redacted_headers(rec: RecordedRequest) -> dict[str, str]:
    secret = {"authorization", "x-api-key", "x-goog-api-key", "cookie"}
    return {k: ("<redacted>" if k.lower() in secret else v) for k, v in rec.headers}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9100)
    ap.add_argument("--sse-delay", type=float, default=0.02, help="seconds between SSE events")
    ap.add_argument("--reply", default=DEFAULT_REPLY, help="reply text")
    ap.add_argument("--record", metavar="FILE", help="append one JSON line per request (bodies as sha256 + length)")
    ap.add_argument("--record-bodies", metavar="DIR", help="also write each raw request body to DIR/NNNN.body")
    ap.add_argument(
        "--strict",
        metavar="MODE",
        help="x-mock-strict mode for requests without the header (auto: by path; " + ", ".join(strict_mock.MODES) + ")",
    )
    args = ap.parse_args(argv)

    rec_lock = threading.Lock()
    count = [0]

    def on_request(rec: RecordedRequest) -> None:
        with rec_lock:
            count[0] += 1
            n = count[0]
        line = f"[mock] #{n} {rec.method} {rec.path}{'?' + rec.query if rec.query else ''} ({len(rec.body)} bytes)"
        print(line, file=sys.stderr, flush=True)
        if args.record:
            entry = {
                "n": n,
                "method": rec.method,
                "path": rec.path,
                "query": rec.query,
                "headers": _redacted_headers(rec),
                "body_len": len(rec.body),
                "body_sha256": hashlib.sha256(rec.body).hexdigest(),
            }
            with rec_lock, open(args.record, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        if args.record_bodies:
            import os

            os.makedirs(args.record_bodies, exist_ok=True)
            with open(os.path.join(args.record_bodies, f"{n:04d}.body"), "wb") as f:
                f.write(rec.body)

    mock = MockUpstream(
        args.host, args.port, sse_delay=args.sse_delay, reply_text=args.reply, on_request=on_request, strict=args.strict
    )
    mock.start()
    print(f"mock upstream listening on {mock.url}", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        mock.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
