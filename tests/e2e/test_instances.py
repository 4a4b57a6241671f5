"""End to end (issue 13, shared state): two cachekeeper instances on one Redis, a client that
alternates between them on every turn, as behind a round-robin load balancer.

- A verdict learned through instance A (the mock refuses ``reasoning_content`` in input with a
  400 naming it) is honoured by instance B: B's request goes once, without the field, no
  second 400.
- An agent that drops its reasoning carriers (the tool loops of test_restore.py) gets them
  restored on every turn, by the instance that did not capture them: each instance restores
  from what the other wrote to Redis. Turns follow each other with no pause: each response's
  last chunk waited for its writes (``[state] write_wait_ms``), counted ``written`` on
  ``/metrics``.
- ``cachekeeper report`` run against either instance's config shows the one session with all
  its turns, numbered in order.
- A Responses conversation chained by ``previous_response_id`` alone, alternating between the
  instances, stays one session: each instance finds the session of the response the other
  answered (the link is a ``response_link`` record in Redis).
- With ``[state] share_transcodes = true`` a screenshot one instance downscaled is served to
  the other from Redis (``cachekeeper_shared_transcodes_total`` on ``/metrics``), and both
  forward the same bytes.
- Over ``rediss://`` with ``[state] ca_file`` (a CA and server certificate made here with
  ``openssl``, Redis serving TLS only) the same holds; with another CA's file an instance
  cannot open the store, says why, and serves on memory.

The Redis is Debian's ``redis-server`` on a free loopback port (never 6379), without
persistence, killed at the end; scripts/test.sh installs it.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

import strict_mock as sm
import test_restore as tr
from conftest import Capture, Proxy, _binary, _free_port, launch_proxy
from helpers import SCREENSHOT_TOOL_ANTHROPIC
from images import b64, screenshot_png
from mock_upstream import MockUpstream

REDIS_START_S = 20.0
# How long a record read waits for Redis (a cache miss). The default (20 ms) is for a real
# deployment; the test machine runs the suite under load.
READ_TIMEOUT_MS = 500
# The pause between a verdict learned on A and B's request: over the one second within
# which B's memory has it (pub/sub invalidation, docs/guide/production.md#running-n-instances-a-load-balancer-in-front-one-redis).
VERDICT_PAUSE_S = 1.2
# What a 400 naming ``reasoning_content`` teaches (``cachekeeper verdicts``' fields column): the
# whole family of reasoning carriers the route table groups with it.
REASONING_FAMILY = "message:reasoning,message:reasoning_content,message:reasoning_details"
# `[state] write_wait_ms`: how long a response's last chunk waits for its turn's carrier and
# session writes to reach Redis, so the next turn, sent the instant the client has the
# response, finds them on the other instance (no pause between turns). The default (50 ms)
# is for a real deployment; the test machine runs the suite under load.
WRITE_WAIT_MS = 2000


def _ping(port: int, ca: Path | None = None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
            s = raw
            if ca is not None:
                s = ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(b"PING\r\n")
            return s.recv(7) == b"+PONG\r\n"
    except OSError:
        return False


def make_ca(tmp: Path) -> Path:
    """A throwaway CA (``ca.pem``) and a server certificate it signed for 127.0.0.1
    (``server.pem``, ``server.key``) in ``tmp``, made with the openssl command; returns ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        out = subprocess.run(["openssl", *args], cwd=tmp, capture_output=True, text=True)
        assert out.returncode == 0, f"openssl {args}: {out.stderr}"

    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=cachekeeper e2e CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (tmp / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
    return tmp


@contextlib.contextmanager
def redis_server(tmp: Path, tls: Path | None = None) -> Iterator[int]:
    """A throwaway redis-server on a free loopback port; yields the port. ``tls``: a folder from
    :func:`make_ca`, served TLS only (``--port 0 --tls-port``, clients not asked for a
    certificate)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server; scripts/test.sh installs it)", pytrace=False)
    tmp.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    assert port != 6379
    listen = ["--port", str(port)]
    if tls is not None:
        listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(tls / "server.pem"),
                  "--tls-key-file", str(tls / "server.key"), "--tls-ca-cert-file", str(tls / "ca.pem"),
                  "--tls-auth-clients", "no"]
    proc = subprocess.Popen(
        [exe, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)],
        stdin=subprocess.DEVNULL,
        stdout=open(tmp / "redis.log", "wb"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + REDIS_START_S
        while not _ping(port, tls / "ca.pem" if tls else None):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start on port {port}: {(tmp / 'redis.log').read_text()}", pytrace=False)
            time.sleep(0.05)
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=10)


def write_waits(p: Proxy) -> dict[str, int]:
    """``cachekeeper_state_write_waits_total`` of instance ``p`` by ``result``."""
    with urllib.request.urlopen(f"{p.base_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = 'cachekeeper_state_write_waits_total{result="'
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            label, value = line[len(prefix):].split('"} ')
            out[label] = int(float(value))
    return out


@contextlib.contextmanager
def two_instances(tmp: Path, mock: MockUpstream, tls: bool = False, state_extra: str = "") -> Iterator[tuple[Proxy, Proxy]]:
    """Instances A and B, each with its own config file and logs, on one Redis (``tls``: over
    rediss:// with ``ca_file``; ``state_extra``: more ``[state]`` lines)."""
    certs = make_ca(tmp / "certs") if tls else None
    with redis_server(tmp / "redis", certs) as port, contextlib.ExitStack() as stack:
        state = f'backend = "redis"\nurl = "redis://127.0.0.1:{port}/0"\nread_timeout_ms = {READ_TIMEOUT_MS}\nwrite_wait_ms = {WRITE_WAIT_MS}\n{state_extra}'
        if certs is not None:
            state = state.replace("redis://", "rediss://") + f'\nca_file = "{certs / "ca.pem"}"'
        pair = []
        for name in ("a", "b"):
            (tmp / name).mkdir()
            pair.append(stack.enter_context(launch_proxy(tmp / name, tr.routes_toml(mock), state_toml=state)))
        yield pair[0], pair[1]


@pytest.fixture
def mock(mock_upstream: MockUpstream) -> Iterator[MockUpstream]:
    mock_upstream.clear()
    yield mock_upstream


def test_a_verdict_learned_through_one_instance_is_honoured_by_the_other(mock: MockUpstream, tmp_path: Path, sent: Capture) -> None:
    """Every turn echoes the assistant's tool rounds with ``reasoning_content``, which the model
    refuses in input. Turn 0 (A): the 400, A learns the field and retries without it. After
    the pause, turns 1-3 alternate B, A, B: each goes upstream once, without the field."""
    model, mode = "mock-model-no-reasoning-input", "no-reasoning-input"
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": tr.WEATHER_SCHEMA}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": tr.QUESTION}]
    with two_instances(tmp_path, mock) as (a, b):
        clients = [tr.openai_client(f"{p.base_url}/openai/v1", sent) for p in (a, b)]
        for k in range(4):
            if k == 1:
                time.sleep(VERDICT_PAUSE_S)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": f"Turn {k}: I should look the weather up.",
                    "tool_calls": [
                        {"id": f"call_v{k}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"call_v{k}", "content": "Sunny in Paris, 21 °C."})
            r = clients[k % 2].chat.completions.with_raw_response.create(
                model=model, messages=messages, tools=tools, extra_headers=tr.knobs(mode)  # type: ignore[arg-type]
            )
            assert r.http_response.status_code == 200
            assert all(b'"reasoning_content"' in s.body for s in sent.requests[-1:]), "the client sends the field"
        # `cachekeeper verdicts` and `cachekeeper state` against either instance's config read
        # the one verdict from Redis (docs/guide/production.md#running-n-instances-a-load-balancer-in-front-one-redis).
        for p in (a, b):
            rows = [line.split("\t") for line in cli(p, "verdicts").splitlines()]
            assert [(r[0], r[1], r[2]) for r in rows] == [(f"127.0.0.1:{mock.port}", model, REASONING_FAMILY)], rows
            listing = cli(p, "state", "--kind", "verdict")
            assert listing.startswith(f"redis://127.0.0.1:{redis_port(p)}/0: 1 record(s)"), listing
    ups = mock.matching("POST", "/chat/completions")
    assert [u.response_status for u in ups] == [400, 200, 200, 200, 200], [(u.response_status, u.strict_error) for u in ups]
    assert ups[0].strict_error == sm.REASONING_UNSUPPORTED.format(index=1)
    for u in ups[1:]:
        assert b'"reasoning_content"' not in u.body


@pytest.mark.parametrize(
    ("mode", "stream", "tls"), [("deepseek", True, False), ("anthropic", False, True)], ids=["deepseek-sse", "anthropic-json-rediss"]
)
def test_carriers_captured_by_one_instance_are_restored_by_the_other_and_report_shows_one_session(
    mock: MockUpstream, tmp_path: Path, sent: Capture, mode: str, stream: bool, tls: bool
) -> None:
    d = tr.DIALECTS[mode]
    session = f"two-instances-{mode}"
    headers = {**tr.knobs(mode), "x-cachekeeper-session": session}
    with two_instances(tmp_path, mock, tls) as (a, b):
        clients = [d.client(p.base_url + tr.ROUTE[mode], sent) for p in (a, b)]
        logs = [p.request_log() for p in (a, b)]

        def at(k: int) -> Any:
            return clients[k % 2]

        if mode == "deepseek":
            loop = tr.chat_loop(at, tr.DEEPSEEK_MODEL, stream, headers, tr.Loop(), "reasoning_content")
        else:
            loop = tr.anthropic_loop(at, stream, headers, tr.Loop())
        assert loop.text, "the loop did not finish"
        turns = len(loop.turns)
        assert turns == tr.ROUNDS + 1
        tr.assert_sent_without_carriers(sent, loop)
        tr.assert_mock_got_carriers(mock, d, loop)
        ups = mock.matching("POST", d.path)
        assert [u.response_status for u in ups] == [200] * turns, [u.strict_error for u in ups]
        # Request k (on instance k % 2) restored the k rounds before it, the last of them
        # captured by the other instance.
        lines = {0: logs[0].wait(None, (turns + 1) // 2), 1: logs[1].wait(None, turns // 2)}
        for k in range(turns):
            line = lines[k % 2][k // 2]
            assert line.get(tr.RESTORED_TURNS, 0) == k, f"request {k}: {line}"
        # Every response waited for its writes and had them in Redis within the bound.
        for i, p in enumerate((a, b)):
            served = (turns + 1 - i) // 2
            assert write_waits(p) == {"written": served}, p.base_url
        # Either instance's report shows the one session, every turn, in order.
        for p in (a, b):
            report = report_of(p, session, turns)
            assert [t["turn"] for t in report["turns"]] == list(range(1, turns + 1)), report
            assert report["summary"]["turns"] == turns, report["summary"]
        # So does either instance's dashboard API (the same stored turns, read from Redis).
        for p in (a, b):
            listed = [s for s in dashboard_sessions(p) if s["session"] == session]
            assert [s["turns"] for s in listed] == [turns], listed


def cli(p: Proxy, *args: str) -> str:
    """``cachekeeper ARGS --config`` ``p``'s config: its standard output (the command must succeed)."""
    out = subprocess.run([str(_binary()), *args, "--config", str(p.config_path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def redis_port(p: Proxy) -> int:
    """The port of the Redis ``p``'s config names."""
    m = re.search(r"rediss?://127\.0\.0\.1:(\d+)/", p.config_path.read_text())
    assert m, p.config_path.read_text()
    return int(m.group(1))


def dashboard_sessions(p: Proxy) -> list[dict[str, Any]]:
    """``/_cachekeeper/api/sessions`` on ``p``: the dashboard's session list."""
    with urllib.request.urlopen(f"{p.base_url}/_cachekeeper/api/sessions", timeout=10) as r:
        return json.load(r)


def report_of(p: Proxy, session: str, turns: int) -> dict[str, Any]:
    """``cachekeeper report --session SESSION --json`` against ``p``'s config, asked again (up to
    50 times, 0.1 s apart) until it shows ``turns`` turns (the last turn's usage record is
    written when its response has ended)."""
    report: dict[str, Any] = {}
    for _ in range(50):
        report = json.loads(cli(p, "report", "--session", session, "--json"))
        if len(report.get("turns", [])) >= turns:
            break
        time.sleep(0.1)
    return report


def test_a_responses_chain_alternating_between_instances_is_one_session(mock: MockUpstream, tmp_path: Path, sent: Capture) -> None:
    """A Responses conversation chained by ``previous_response_id`` alone (no session header),
    each turn on the other instance, JSON and streamed turns mixed: every turn is in the session
    of the first, numbered 1, 2, 3, 4 (each instance reads the link the other stored in Redis),
    and ``report --session`` on either instance shows all four turns."""
    turns = 4
    with two_instances(tmp_path, mock) as (a, b):
        clients = [tr.openai_client(f"{p.base_url}/openai/v1", sent) for p in (a, b)]
        logs = [p.request_log() for p in (a, b)]
        prev: str | None = None
        ids = []
        for k in range(turns):
            extra: dict[str, Any] = {} if prev is None else {"previous_response_id": prev}
            client = clients[k % 2]
            if k % 2:
                with client.responses.create(model="gpt-5", input=f"Turn {k}.", stream=True, **extra) as events:
                    done = [e for e in events if e.type == "response.completed"]
                assert len(done) == 1
                prev = done[0].response.id
            else:
                prev = client.responses.create(model="gpt-5", input=f"Turn {k}.", **extra).id
            ids.append(prev)
        assert len(set(ids)) == turns, ids
        ups = mock.matching("POST", "/responses")
        assert [u.response_status for u in ups] == [200] * turns
        assert [json.loads(u.body).get("previous_response_id") for u in ups] == [None, *ids[:-1]]
        lines = {0: logs[0].wait("/responses", (turns + 1) // 2), 1: logs[1].wait("/responses", turns // 2)}
        seen = [lines[k % 2][k // 2] for k in range(turns)]
        assert [line.get("turn") for line in seen] == list(range(1, turns + 1)), seen
        session = seen[0]["session"]
        assert all(line.get("session") == session for line in seen), seen
        for p in (a, b):
            report = report_of(p, session, turns)
            assert [t["turn"] for t in report["turns"]] == list(range(1, turns + 1)), report
            assert report["summary"]["turns"] == turns, report["summary"]


def shared_transcodes(p: Proxy) -> dict[str, float]:
    """``cachekeeper_shared_transcodes_total`` on ``p``'s ``/metrics``, by ``result``."""
    with urllib.request.urlopen(f"{p.base_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.fullmatch(r'cachekeeper_shared_transcodes_total\{result="(\w+)"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


@pytest.mark.parametrize("share", [True, False], ids=["share_transcodes", "default"])
def test_a_screenshot_transcoded_by_one_instance_is_served_to_the_other_from_redis(
    mock: MockUpstream, tmp_path: Path, sent: Capture, share: bool
) -> None:
    """``[state] share_transcodes = true``: A downscales a 1920x1080 screenshot (about 1.5 MB of
    PNG) and writes the transcode to Redis; B, sent the same request with the same API key,
    serves A's transcode without decoding (``/metrics``: A ``written`` 1, B ``read`` 1) and
    forwards a body byte-identical to A's. By default (off) each instance transcodes for
    itself: nothing shared is counted, Redis holds no transcode, and the bodies are the same."""
    shot = b64(screenshot_png(1920, 1080, seed=4242))
    # An agent image (a tool result's screenshot): what the proxy downscales (docs/images.md).
    messages = [
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_001", "name": "screenshot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_001",
                    "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": shot}}],
                }
            ],
        },
    ]
    with two_instances(tmp_path, mock, state_extra="share_transcodes = true" if share else "") as (a, b):
        clients = [tr.anthropic_client(p.base_url + tr.ROUTE["anthropic"], sent) for p in (a, b)]
        # No pause: A's transcode was queued before its response ended, so the response's last
        # chunk waited for it too ([state] write_wait_ms).
        for client in clients:
            r = client.messages.with_raw_response.create(
                model="claude-e2e-test-model", max_tokens=64, messages=messages, tools=[SCREENSHOT_TOOL_ANTHROPIC]  # type: ignore[arg-type]
            )
            assert r.http_response.status_code == 200
            assert "images_downscaled=1" in r.headers.get("x-cachekeeper-rewrites", ""), dict(r.headers)
        if share:
            assert shared_transcodes(a) == {"written": 1.0}, "A computed the transcode and shared it"
            assert shared_transcodes(b) == {"read": 1.0}, "B served A's transcode from Redis"
        else:
            assert shared_transcodes(a) == shared_transcodes(b) == {}
            listing = cli(b, "state", "--kind", "transcode")
            assert listing.startswith("no records in redis://127.0.0.1:"), listing
    ups = mock.matching("POST", "/messages")
    assert len(ups) == 2
    assert shot.encode() not in ups[0].body, "the screenshot went upstream downscaled"
    assert ups[0].body == ups[1].body, "both instances forwarded the same bytes"


def test_a_redis_certificate_of_another_ca_leaves_the_instance_serving_on_memory(mock: MockUpstream, tmp_path: Path, sent: Capture) -> None:
    """``ca_file`` names a CA that did not sign the Redis server's certificate: the instance
    starts, logs why it runs on memory (the URL, the CA file), and serves every request."""
    right, wrong = make_ca(tmp_path / "right"), make_ca(tmp_path / "wrong")
    with redis_server(tmp_path / "redis", right) as port:
        state = f'backend = "redis"\nurl = "rediss://:s3cret-pw@127.0.0.1:{port}/0"\nca_file = "{wrong / "ca.pem"}"'
        (tmp_path / "p").mkdir()
        with launch_proxy(tmp_path / "p", tr.routes_toml(mock), state_toml=state) as p:
            client = tr.openai_client(f"{p.base_url}/openai/v1", sent)
            for _ in range(2):
                r = client.chat.completions.with_raw_response.create(
                    model="gpt-test", messages=[{"role": "user", "content": "Hello."}]
                )
                assert r.http_response.status_code == 200
            log = p.stderr_path.read_text()
    assert "serving from memory" in log, log
    assert "does not verify against [state] ca_file" in log and str(wrong / "ca.pem") in log, log
    assert f"rediss://:***@127.0.0.1:{port}/0" in log, log
    assert "s3cret-pw" not in log
