"""End to end (issue 8): the bytes the client receives are the upstream's, exactly, with the
response observer on -- streamed, gzip-encoded (the compressed bytes compared), with comment
lines and ``ping`` events, CRLF, events split across chunks at any byte, and broken mid-way.

A raw socket client (helpers.raw_request) reads the response: only the HTTP chunk framing is
undone, nothing is decoded, and what arrived before a broken connection is kept. The mock
records the body bytes it wrote (``RecordedRequest.response_body``).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from typing import TYPE_CHECKING, Any

import pytest

from helpers import raw_request, sse_data
from mock_upstream import MockUpstream
from test_usage import AUTH, GEN, knobs

if TYPE_CHECKING:
    from conftest import Proxy, RequestLog

DIALECTS = pytest.mark.parametrize("dialect", list(GEN))


def _turn(proxy: Proxy, dialect: str, stream: bool, headers: dict[str, str]) -> tuple[Any, str]:
    path, spath, body, sbody = GEN[dialect]
    p, b = (spath, sbody) if stream else (path, body)
    h = dict(AUTH[dialect])
    h.update(headers)
    return raw_request(proxy.base_url, "POST", p, json.dumps(b).encode(), h), p.split("?", 1)[0]


STREAM_SHAPES = {
    "plain": {},
    "comments_and_pings": knobs(sse_extras=1),
    "crlf": knobs(crlf=1),
    "split_1_byte": knobs(split=1),
    "split_7_bytes_crlf_comments": knobs(split=7, crlf=1, sse_extras=1),
    "reasoning": knobs(reasoning=1),
}


@pytest.mark.parametrize("shape", list(STREAM_SHAPES))
@DIALECTS
def test_streamed_bytes_arrive_unchanged(proxy: Proxy, upstream: MockUpstream, dialect: str, shape: str) -> None:
    r, _ = _turn(proxy, dialect, True, STREAM_SHAPES[shape])
    rec = upstream.last("POST")
    assert r.status == 200 and r.complete
    assert r.header("content-type") == rec.response_header("content-type")
    assert r.body == bytes(rec.response_body), "the client's bytes differ from the upstream's"
    assert sse_data(r.body), "the stream carried no events"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@DIALECTS
def test_gzip_encoded_bytes_arrive_unchanged(proxy: Proxy, upstream: MockUpstream, dialect: str, stream: bool) -> None:
    """The client asked for gzip: it gets the upstream's compressed bytes, not a re-encoding,
    and its content-encoding header."""
    r, _ = _turn(proxy, dialect, stream, {**knobs(gzip=1, reasoning=1), "accept-encoding": "gzip"})
    rec = upstream.last("POST")
    assert rec.response_header("content-encoding") == "gzip"
    assert r.status == 200 and r.complete
    assert r.header("content-encoding") == "gzip"
    assert r.body == bytes(rec.response_body), "the compressed bytes differ from the upstream's"
    plain = gzip.decompress(r.body)
    if stream:
        assert sse_data(plain)
    else:
        json.loads(plain)


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
@DIALECTS
def test_gzip_stream_split_at_every_few_bytes_arrives_unchanged(
    proxy: Proxy, upstream: MockUpstream, dialect: str, gzipped: bool
) -> None:
    h = knobs(split=3, sse_extras=1, gzip=1 if gzipped else None)
    h["accept-encoding"] = "gzip"
    r, _ = _turn(proxy, dialect, True, h)
    rec = upstream.last("POST")
    assert r.status == 200 and r.complete
    assert r.body == bytes(rec.response_body)


# ---------------------------------------------------------------------------------------------
# Broken mid-way
# ---------------------------------------------------------------------------------------------

# the proxy's error event after a break (src/proxy/errors.rs midstream_error_event), after at
# most a line end or a blank line that ends an event cut mid-way
ERROR_EVENT = {
    "anthropic": re.compile(rb"\A(\n|\n\n)?event: error\ndata: (\{.*\})\n\n\Z", re.S),
    "responses": re.compile(rb"\A(\n|\n\n)?event: error\ndata: (\{.*\})\n\n\Z", re.S),
    "openai": re.compile(rb"\A(\n|\n\n)?data: (\{.*\})\n\n\Z", re.S),
}


@pytest.mark.parametrize("cut", [False, True], ids=["between_events", "inside_an_event"])
@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
@DIALECTS
def test_broken_stream_client_gets_everything_sent_before_the_break(
    proxy: Proxy, upstream: MockUpstream, request_log: RequestLog, dialect: str, gzipped: bool, cut: bool
) -> None:
    """The upstream resets the connection after 2 events (and half of the third): the client's
    bytes start with every byte the upstream sent. Then: Anthropic, OpenAI Chat and Responses
    plain event streams broken between events end with the dialect's error event; Gemini
    streams, gzip-encoded ones and streams broken inside an event's line are aborted (no
    clean end the client could mistake for the whole answer; a cut line closed as an event
    would reach the SDK as a JSON error instead of the break)."""
    h = knobs(reset_after=2, reset_cut=1 if cut else None, gzip=1 if gzipped else None)
    h["accept-encoding"] = "gzip"
    r, path = _turn(proxy, dialect, True, h)
    rec = upstream.last("POST")
    assert rec.reset, "the mock did not reset the connection"
    sent = bytes(rec.response_body)
    assert sent, "the mock sent nothing before the reset"
    assert r.status == 200
    assert r.body[: len(sent)] == sent, "the client did not get everything the upstream sent before the break"
    rest = r.body[len(sent) :]
    if gzipped or dialect == "gemini" or cut:
        assert rest == b"", f"nothing may follow the upstream's bytes in an aborted stream: {rest!r}"
        assert not r.complete, "an aborted stream must not end cleanly"
    else:
        m = ERROR_EVENT[dialect].match(rest)
        assert m, f"after the upstream's bytes, want the proxy's error event, got {rest!r}"
        err = json.loads(m.group(2))
        message = err["error"]["message"] if "error" in err and isinstance(err["error"], dict) else err["message"]
        assert message.startswith("cachekeeper:"), err
    line = request_log.one(path)
    assert line["outcome"] == "upstream_broken", line
    proxy.assert_alive()
    # and the proxy answers the next request
    ok, _ = _turn(proxy, dialect, True, {})
    assert ok.status == 200 and ok.complete and ok.body == bytes(upstream.last("POST").response_body)


def test_raw_client_dechunks_what_it_is_given() -> None:
    """The test's own client keeps a cut-off chunk's bytes (no proxy)."""
    from helpers import _dechunk

    assert _dechunk(b"3\r\nabc\r\n0\r\n\r\n") == (b"abc", True)
    assert _dechunk(b"3\r\nabc\r\n5\r\nde") == (b"abcde", False)
    assert _dechunk(b"3\r\nab") == (b"ab", False)
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    z = co.compress(b"data: {}\n\n") + co.flush(zlib.Z_SYNC_FLUSH)
    assert zlib.decompressobj(31).decompress(z) == b"data: {}\n\n", "a sync-flushed gzip chunk decodes alone"
