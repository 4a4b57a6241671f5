"""Builders and byte-level helpers for the end-to-end tests."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[2]

# Credentials the SDKs send; the mock checks they arrive untouched. Not real keys.
ANTHROPIC_KEY = "sk-ant-e2e-test-key-0123456789"
OPENAI_KEY = "sk-e2e-test-key-9876543210"
GEMINI_KEY = "AIza-e2e-test-key-gemini-13579"


# ---------------------------------------------------------------------------------------------
# The fixed "image removed" sentence, read from src/texts.rs (the single source of truth).
# ---------------------------------------------------------------------------------------------

_CONST_RE = re.compile(r'pub\s+const\s+(\w+)\s*:\s*&(?:\'static\s+)?str\s*=\s*"((?:[^"\\]|\\.)*)"\s*;', re.S)


def _rust_unescape(s: str) -> str:
    # Enough for the constants we read: \" \\ \n \t and line continuations.
    s = re.sub(r"\\\n\s*", "", s)
    return s.replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")


def retired_image_text() -> str | None:
    """The retired-image sentence from src/texts.rs, or None when it is not there yet."""
    try:
        src = (REPO_ROOT / "src" / "texts.rs").read_text(encoding="utf-8")
    except OSError:
        return None
    consts = {name: _rust_unescape(val) for name, val in _CONST_RE.findall(src)}
    if "RETIRED_IMAGE" in consts:
        return consts["RETIRED_IMAGE"]
    for name, val in consts.items():
        if "RETIRED" in name.upper() and "IMAGE" in name.upper():
            return val
    for name, val in consts.items():
        if "RETIRED" in name.upper() or "EVICT" in name.upper():
            return val
    return None


def assert_retired_text(text: Any) -> None:
    """``text`` is the fixed retired-image sentence (or, before texts.rs has it, says 'removed')."""
    assert isinstance(text, str), f"retired image should become text, got {text!r}"
    expected = retired_image_text()
    if expected is not None:
        assert text == expected, f"retired-image text {text!r} != src/texts.rs constant {expected!r}"
    else:
        assert "removed" in text.lower(), f"retired-image text {text!r} does not say 'removed'"


# ---------------------------------------------------------------------------------------------
# Fake screenshots: a PNG header that tells the size, then filler. Nothing decodes the pixels.
# ---------------------------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def fake_png(width: int, height: int, seed: int, filler: int = 3000) -> bytes:
    """PNG signature + IHDR claiming ``width`` x ``height`` + an IDAT of unique filler + IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    noise = hashlib.sha256(f"screenshot-{seed}-{width}x{height}".encode()).digest()
    raw = (noise * (filler // len(noise) + 1))[:filler]
    idat = zlib.compress(raw, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def fake_png_b64(width: int, height: int, seed: int) -> str:
    return base64.b64encode(fake_png(width, height, seed)).decode("ascii")


LARGE = (2400, 1350)  # > 2000 px: Anthropic's many-image rule applies, block ceiling 20
SMALL = (1568, 882)  # <= 2000 px on both sides: block ceiling 100


# ---------------------------------------------------------------------------------------------
# Screenshot-heavy sessions
# ---------------------------------------------------------------------------------------------


def anthropic_session(n_shots: int, size: tuple[int, int]) -> list[dict[str, Any]]:
    """A user turn, then ``n_shots`` (assistant tool_use, user tool_result with text + image) pairs.

    Carrier ``i`` (0 = oldest) is ``messages[2 + 2*i]["content"][0]``.
    """
    w, h = size
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Open the app and take a screenshot after each step."}]
    for i in range(n_shots):
        tid = f"toolu_{i:03d}"
        msgs.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}: taking a screenshot."},
                    {"type": "tool_use", "id": tid, "name": "screenshot", "input": {"step": i}},
                ],
            }
        )
        msgs.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tid,
                        "content": [
                            {"type": "text", "text": f"Screenshot {i} taken."},
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": fake_png_b64(w, h, i)},
                            },
                        ],
                    }
                ],
            }
        )
    return msgs


def anthropic_carrier_index(i: int) -> int:
    return 2 + 2 * i


def openai_session(n_shots: int, size: tuple[int, int]) -> list[dict[str, Any]]:
    """System + user, then ``n_shots`` (assistant tool_calls, tool message with text + image_url).

    Carrier ``i`` (0 = oldest) is ``messages[3 + 2*i]``.
    """
    w, h = size
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful UI tester."},
        {"role": "user", "content": "Open the app and take a screenshot after each step."},
    ]
    for i in range(n_shots):
        cid = f"call_{i:03d}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "screenshot", "arguments": f'{{"step":{i}}}'}}
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": cid,
                "content": [
                    {"type": "text", "text": f"Screenshot {i} taken."},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + fake_png_b64(w, h, i)}},
                ],
            }
        )
    return msgs


def openai_carrier_index(i: int) -> int:
    return 3 + 2 * i


def openai_user_turn_session(n_shots: int, size: tuple[int, int]) -> list[dict[str, Any]]:
    """The common OpenAI agent pattern: OpenAI rejects images in tool messages, so each tool
    message says "see next message" and the screenshot follows in a user message.

    Carrier ``i`` (0 = oldest) is the user message ``messages[4 + 3*i]``.
    """
    w, h = size
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful UI tester."},
        {"role": "user", "content": "Open the app and take a screenshot after each step."},
    ]
    for i in range(n_shots):
        cid = f"call_{i:03d}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "screenshot", "arguments": f'{{"step":{i}}}'}}
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": "Screenshot taken; it follows as an image."})
        msgs.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Screenshot {i}:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + fake_png_b64(w, h, i)}},
                ],
            }
        )
    return msgs


def openai_user_turn_carrier_index(i: int) -> int:
    return 4 + 3 * i


SCREENSHOT_TOOL_ANTHROPIC = {
    "name": "screenshot",
    "description": "Take a screenshot of the app.",
    "input_schema": {"type": "object", "properties": {"step": {"type": "integer"}}},
}
SCREENSHOT_TOOL_OPENAI = {
    "type": "function",
    "function": {
        "name": "screenshot",
        "description": "Take a screenshot of the app.",
        "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
    },
}


def count_anthropic_images(messages: list[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "image":
                n += 1
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                n += sum(1 for b in block["content"] if b.get("type") == "image")
    return n


def count_openai_images(messages: list[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            n += sum(1 for p in content if p.get("type") == "image_url")
    return n


# ---------------------------------------------------------------------------------------------
# Raw JSON spans: find the exact bytes of each element of a top-level array, so tests can say
# "these messages went upstream byte-for-byte" without assuming how anyone serializes JSON.
# ---------------------------------------------------------------------------------------------

_WS = b" \t\r\n"


def _skip_ws(b: bytes, i: int) -> int:
    while i < len(b) and b[i] in _WS:
        i += 1
    return i


def _scan_string(b: bytes, i: int) -> int:
    assert b[i] == 0x22  # '"'
    i += 1
    while True:
        c = b[i]
        if c == 0x5C:  # backslash
            i += 2
        elif c == 0x22:
            return i + 1
        else:
            i += 1


def _scan_value(b: bytes, i: int) -> int:
    """Index just past the JSON value starting at ``i`` (no leading whitespace)."""
    c = b[i]
    if c == 0x22:
        return _scan_string(b, i)
    if c in (0x7B, 0x5B):  # { [
        depth = 0
        while True:
            c = b[i]
            if c == 0x22:
                i = _scan_string(b, i)
                continue
            if c in (0x7B, 0x5B):
                depth += 1
            elif c in (0x7D, 0x5D):
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(b) and b[i] not in b",]}" + _WS:
        i += 1
    return i


def top_level_array_items(body: bytes, key: str) -> list[bytes]:
    """The raw bytes of each element of the array at top-level ``key`` in the JSON object ``body``."""
    i = _skip_ws(body, 0)
    assert body[i] == 0x7B, "body is not a JSON object"
    i += 1
    want = key.encode()
    while True:
        i = _skip_ws(body, i)
        if body[i] == 0x7D:
            raise KeyError(key)
        if body[i] == 0x2C:
            i = _skip_ws(body, i + 1)
        kend = _scan_string(body, i)
        k = body[i + 1 : kend - 1]
        i = _skip_ws(body, kend)
        assert body[i] == 0x3A  # ':'
        i = _skip_ws(body, i + 1)
        vend = _scan_value(body, i)
        if k == want:
            assert body[i] == 0x5B, f"{key} is not an array"
            items: list[bytes] = []
            j = _skip_ws(body, i + 1)
            if body[j] == 0x5D:
                return items
            while True:
                end = _scan_value(body, j)
                items.append(body[j:end])
                j = _skip_ws(body, end)
                if body[j] == 0x5D:
                    return items
                assert body[j] == 0x2C
                j = _skip_ws(body, j + 1)
        i = vend


# ---------------------------------------------------------------------------------------------
# A raw HTTP/1.1 client: the bytes exactly as they arrive (only the chunk framing undone; any
# content-encoding kept), including what came before a broken connection.
# ---------------------------------------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes  # the payload, still content-encoded, without the chunk framing
    complete: bool  # the message ended as HTTP says (last chunk, or content-length reached)

    def header(self, name: str) -> str | None:
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return None


def _dechunk(data: bytes) -> tuple[bytes, bool]:
    """Undo chunked framing; a cut-off stream gives what arrived and ``False``."""
    out = bytearray()
    i = 0
    while True:
        eol = data.find(b"\r\n", i)
        if eol < 0:
            return bytes(out), False
        size = int(data[i:eol].split(b";", 1)[0].strip() or b"0", 16)
        start = eol + 2
        if size == 0:
            return bytes(out), True
        piece = data[start : start + size]
        out += piece
        if len(piece) < size or data[start + size : start + size + 2] != b"\r\n":
            return bytes(out), False
        i = start + size + 2


def raw_request(
    base_url: str,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> RawResponse:
    """Send one request on a fresh connection (``connection: close``) and read the response to
    the end, or until the connection breaks."""
    u = urlsplit(base_url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    h = {"host": f"{host}:{port}", "content-type": "application/json", "connection": "close"}
    h.update({k.lower(): v for k, v in (headers or {}).items()})
    if method != "GET" or body:
        h["content-length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    data = bytearray()
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(head.encode("latin-1") + body)
        while True:
            try:
                got = s.recv(1 << 20)
            except (ConnectionResetError, ConnectionAbortedError):
                break
            if not got:
                break
            data += got
    end = data.find(b"\r\n\r\n")
    assert end >= 0, f"no complete response head in {bytes(data[:200])!r}"
    lines = bytes(data[:end]).decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdrs = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)]
    rest = bytes(data[end + 4 :])
    resp = RawResponse(status, hdrs, rest, True)
    if "chunked" in (resp.header("transfer-encoding") or "").lower():
        resp.body, resp.complete = _dechunk(rest)
    elif resp.header("content-length") is not None:
        n = int(resp.header("content-length") or 0)
        resp.body, resp.complete = rest[:n], len(rest) >= n
    return resp


def sse_data(payload: bytes) -> list[Any]:
    """The JSON ``data:`` payloads of an SSE stream (comment lines, ``[DONE]``, CRLF handled)."""
    out = []
    for line in payload.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            d = line[5:].strip()
            if d and d != b"[DONE]":
                out.append(json.loads(d))
    return out
