"""Adversarial inputs against the real binary: bodies it cannot parse go upstream byte-identical,
proxy-made errors keep the dialect's shape, credentials never reach the logs, rewrites are
deterministic, and the proxy keeps serving under bombs and concurrency.

Raw ``http.client`` is used instead of the SDKs so the bytes on the wire are exactly ours.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import struct
import threading
import time
import zlib
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import Proxy
from mock_upstream import MockUpstream

GEN_PATHS = [
    "/anthropic/v1/messages",
    "/openai/v1/chat/completions",
    "/openai/v1/responses",
    "/gemini/v1beta/models/gemini-2.5-flash:generateContent",
]

MALFORMED = {
    "truncated": b'{"model":"m","messages":[{"role":"user","content":"hi"',
    "empty": b"",
    "not_json": b"hello world",
    "json_null": b"null",
    "json_array": b"[1,2,3]",
    "messages_object": b'{"model":"m","messages":{"role":"user"}}',
    "messages_number": b'{"model":"m","messages":7}',
    "messages_null": b'{"model":"m","messages":null}',
    "content_number": b'{"model":"m","messages":[{"role":"user","content":5}]}',
    "messages_items_odd": b'{"model":"m","messages":[1,null,"x",[]]}',
    "image_no_source": b'{"model":"m","messages":[{"role":"user","content":[{"type":"image"}]}]}',
    "image_source_string": b'{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":"abc"}]}]}',
    "image_data_number": (
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":'
        b'{"type":"base64","media_type":"image/png","data":123}}]}]}'
    ),
    "image_corrupt_base64": (
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":'
        b'{"type":"base64","media_type":"image/png","data":"!!!notbase64***"}}]}]}'
    ),
    "image_url_bare_string": (
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"http://x/y.png"}]}]}'
    ),
    "image_url_number": b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":12}]}]}',
    "tool_result_content_number": (
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":5}]}]}'
    ),
    "deep_nesting": b'{"model":"m","messages":' + b"[" * 100000 + b"]" * 100000 + b"}",
    "invalid_utf8": b'{"model":"m\xff\xfe","messages":[]}',
    "trailing_garbage": b'{"model":"m","messages":[]} xyz',
    "nan": b'{"model":"m","max_tokens":NaN,"messages":[]}',
}


def _hostport(proxy: Proxy) -> tuple[str, int]:
    u = urlsplit(proxy.base_url)
    assert u.hostname and u.port
    return u.hostname, u.port


def _send(
    proxy: Proxy, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    host, port = _hostport(proxy)
    c = http.client.HTTPConnection(host, port, timeout=60)
    try:
        h = {"content-type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def _last_body(upstream: MockUpstream, path_suffix: str) -> bytes:
    matches = [r for r in upstream.requests if r.path.endswith(path_suffix)]
    assert matches, f"the upstream saw no request ending in {path_suffix}: {[r.path for r in upstream.requests]}"
    return matches[-1].body


@pytest.mark.parametrize("path", GEN_PATHS)
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_body_goes_upstream_byte_identical(proxy: Proxy, upstream: MockUpstream, path: str, name: str) -> None:
    body = MALFORMED[name]
    _send(proxy, "POST", path, body)
    assert _last_body(upstream, "/" + path.split("/", 2)[2]) == body
    proxy.assert_alive()


def _png(w: int, h: int, shade: int) -> bytes:
    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    raw = b"".join(b"\x00" + bytes([shade]) * w for _ in range(h))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _eviction_body(n: int, w: int = 16, h: int = 16) -> bytes:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(n):
        data = base64.b64encode(_png(w, h, i)).decode()
        msgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "shot", "input": {}}]})
        msgs.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"t{i}",
                        "content": [
                            {"type": "text", "text": f"shot {i}"},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                        ],
                    }
                ],
            }
        )
    return json.dumps({"model": "claude-x", "max_tokens": 10, "messages": msgs}).encode()


@pytest.mark.parametrize(
    "n,w,h,expect",
    [
        (101, 16, 16, "images_retired=51"),  # 101 small images > the 100-block ceiling: retired down to the low-water mark (50 left)
        (21, 2100, 2, "images_downscaled=21"),  # agent images over max_dimension: downscaled
    ],
)
def test_same_rewritten_request_twice_gives_byte_identical_upstream_bodies(
    proxy: Proxy, upstream: MockUpstream, n: int, w: int, h: int, expect: str
) -> None:
    body = _eviction_body(n, w, h)
    seen = []
    for _ in range(2):
        st, headers, _ = _send(proxy, "POST", "/anthropic/v1/messages", body)
        assert st == 200
        assert expect in headers["x-cachekeeper-rewrites"], headers["x-cachekeeper-rewrites"]
        seen.append(_last_body(upstream, "/v1/messages"))
    assert seen[0] != body
    assert seen[0] == seen[1]


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_corrupt_encoded_body_goes_upstream_unchanged(proxy: Proxy, upstream: MockUpstream, encoding: str) -> None:
    plain = _eviction_body(21)
    if encoding == "gzip":
        enc = bytearray(gzip.compress(plain))
    elif encoding == "deflate":
        enc = bytearray(zlib.compress(plain))
    else:
        # not a valid br / zstd stream at all
        enc = bytearray(b"\x00\xffnot-" + encoding.encode() + b"-data" * 50)
    enc[len(enc) // 2] ^= 0xFF
    st, headers, _ = _send(proxy, "POST", "/anthropic/v1/messages", bytes(enc), {"content-encoding": encoding})
    rec = upstream.last(path_suffix="/v1/messages")
    assert rec.body == bytes(enc)
    assert rec.header("content-encoding") == encoding
    assert "images_retired=0" in headers["x-cachekeeper-rewrites"]


@pytest.mark.parametrize("encoding", ["compress", "x-unknown", "gzip, gzip"])
def test_unknown_content_encoding_goes_upstream_unchanged(proxy: Proxy, upstream: MockUpstream, encoding: str) -> None:
    body = _eviction_body(21)
    _send(proxy, "POST", "/anthropic/v1/messages", body, {"content-encoding": encoding})
    rec = upstream.last(path_suffix="/v1/messages")
    assert rec.body == body
    assert rec.header("content-encoding") == encoding


def test_gzip_decompression_bomb_goes_upstream_unchanged(proxy: Proxy, upstream: MockUpstream) -> None:
    # 256 MiB of spaces inside a JSON string (over max_rewrite_bytes once decoded), ~250 KB gzipped.
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [co.compress(b'{"model":"m","messages":[{"role":"user","content":"')]
    block = b" " * (1 << 24)
    parts += [co.compress(block) for _ in range(16)]
    parts += [co.compress(b'"}]}'), co.flush()]
    bomb = b"".join(parts)
    st, _, _ = _send(proxy, "POST", "/anthropic/v1/messages", bomb, {"content-encoding": "gzip"})
    rec = upstream.last(path_suffix="/v1/messages")
    assert rec.body == bomb
    proxy.assert_alive()
    st, _, body = _send(proxy, "GET", "/healthz")
    assert st == 200


def test_credentials_in_query_and_headers_never_reach_the_logs(proxy: Proxy, upstream: MockUpstream) -> None:
    secrets = {
        "q1": "QSECRET-lower-key-11111",
        "q2": "QSECRET-upper-key-22222",
        "h1": "HSECRET-authorization-33333",
        "h2": "HSECRET-x-api-key-44444",
        "h3": "HSECRET-x-goog-api-key-55555",
    }
    body = b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}'
    hdrs = {
        "authorization": f"Bearer {secrets['h1']}",
        "x-api-key": secrets["h2"],
        "x-goog-api-key": secrets["h3"],
    }
    _send(proxy, "POST", f"/gemini/v1beta/models/g:generateContent?key={secrets['q1']}", body, hdrs)
    _send(proxy, "POST", f"/gemini/v1beta/models/g:streamGenerateContent?alt=sse&KEY={secrets['q2']}", body, hdrs)
    _send(proxy, "GET", f"/gemini/v1beta/models?key={secrets['q1']}", None, hdrs)
    _send(proxy, "GET", f"/no-such-route/x?key={secrets['q1']}", None, hdrs)
    # the upstream still gets them untouched
    assert any(secrets["q1"] in r.query for r in upstream.requests)
    assert all(r.header("x-goog-api-key") == secrets["h3"] for r in upstream.requests)
    time.sleep(0.3)  # let the log lines land
    logs = proxy.stderr_path.read_text(encoding="utf-8", errors="replace")
    for s in secrets.values():
        assert s not in logs, f"{s} leaked into the proxy log"


@pytest.mark.parametrize(
    "path,shape",
    [
        ("/nope/v1/messages", "error"),
        ("/anthropicX/v1/messages", "error"),
        ("//anthropic/v1/messages", "error"),
        ("/ANTHROPIC/v1/messages", "error"),
    ],
)
def test_unknown_routes_are_cachekeeper_404s(proxy: Proxy, upstream: MockUpstream, path: str, shape: str) -> None:
    st, _, data = _send(proxy, "POST", path, b"{}")
    assert st == 404
    err = json.loads(data)[shape]
    assert err["message"].startswith("cachekeeper:")
    assert not upstream.requests


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "DELETE", "PUT", "PATCH"])
def test_every_method_is_forwarded(proxy: Proxy, upstream: MockUpstream, method: str) -> None:
    _send(proxy, method, "/openai/v1/models")
    assert any(r.method == method and r.path.endswith("/v1/models") for r in upstream.requests)


@pytest.mark.parametrize("rest", ["/../x/v1/models", "/v1%2F..%2F..%2Fadmin", "/%2e%2e/x", "/v1/models%00"])
def test_odd_paths_are_forwarded_verbatim(proxy: Proxy, upstream: MockUpstream, rest: str) -> None:
    _send(proxy, "GET", "/openai" + rest)
    assert upstream.requests, "nothing reached the upstream"
    assert upstream.requests[-1].path == rest


def test_200_parallel_requests_all_complete(proxy: Proxy, upstream: MockUpstream) -> None:
    results: list[Any] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            if i % 2:
                body = json.dumps(
                    {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": f"hi {i}"}]}
                ).encode()
                st, _, data = _send(proxy, "POST", "/anthropic/v1/messages", body)
                ok = st == 200 and b"message_stop" in data
            else:
                body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": f"hi {i}"}]}).encode()
                st, _, data = _send(proxy, "POST", "/openai/v1/chat/completions", body)
                ok = st == 200 and b"[DONE]" in data
        except Exception as e:  # noqa: BLE001
            ok = repr(e)
        with lock:
            results.append(ok)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 200
    bad = [r for r in results if r is not True]
    assert not bad, bad[:5]
    proxy.assert_alive()
