"""Amazon Bedrock Converse through the proxy (issue 29), with boto3's ``bedrock-runtime`` client
and a Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``: botocore sends ``Authorization: Bearer``),
through a route with ``prefix = "/bedrock"`` to the cloud mock (cloud_mock.py), which speaks
Converse and ConverseStream and accepts the key.

botocore sends a bearer token over HTTPS only (``BearerAuth`` refuses a plain-HTTP endpoint), so
the client talks to a TLS front (``TlsFront``: a certificate made here with the openssl command,
bytes passed both ways to the proxy's plain listener); everything behind it is the proxy as
deployed. SigV4-signed requests are tests/e2e/test_clouds.py's.

Each test shows one thing the proxy does on the Converse wire: images evicted and downscaled
(``converse`` and ``converse_stream``), cache points placed, usage read (JSON and stream: the
request log), ``reasoningContent`` the client dropped restored, and a retry without a key of
``additionalModelRequestFields`` the model refused (``extraneous key``)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from cloud_mock import AWS_REGION, BEDROCK_API_KEY, BEDROCK_CONVERSE_USAGE, BEDROCK_REDACTED, REASONING_TEXT, CloudMock
from conftest import Proxy, RequestLog, launch_proxy
from helpers import LARGE, assert_retired_text, fake_png
from images import downscale_note, image_size, screenshot_png
from mock_upstream import ANTHROPIC_SIGNATURE, DEFAULT_REPLY

CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SCREEN = (1920, 1080)
MAX_DIMENSION = 1568  # [images] max_dimension default (docs/images.md)


# ---------------------------------------------------------------------------------------------
# A TLS front for the proxy: botocore sends a Bedrock API key over HTTPS only.
# ---------------------------------------------------------------------------------------------


def _certificate(tmp: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the client trusts it as its CA bundle)."""
    cert, key = tmp / "front.pem", tmp / "front.key"
    out = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return cert, key


class TlsFront:
    """Accepts TLS on a local port and passes the decrypted bytes to ``target`` (the proxy's
    plain listener) and back, one pair of threads per connection."""

    def __init__(self, target: tuple[str, int], cert: Path, key: Path) -> None:
        self.target = target
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            tls = self.ctx.wrap_socket(raw, server_side=True)
            up = socket.create_connection(self.target)
        except OSError:
            raw.close()
            return
        threading.Thread(target=self._pump, args=(up, tls), daemon=True).start()
        self._pump(tls, up)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cloud() -> Iterator[CloudMock]:
    mock = CloudMock().start()
    yield mock
    mock.stop()


@pytest.fixture(scope="module")
def proxy(cloud: CloudMock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    # `top_k` may be learned as unknown (a key of additionalModelRequestFields Bedrock's Claude
    # refuses); the rest of the list is the default's.
    routes = f"""
[reasoning]
droppable_params = ["top_k", "service_tier", "reasoning_effort"]

[[routes]]
name = "bedrock"
prefix = "/bedrock"
upstream = "{cloud.url}"
provider = "bedrock"
cache_breakpoints = "auto"
"""
    with launch_proxy(tmp_path_factory.mktemp("converse"), routes) as p:
        yield p


@pytest.fixture(scope="module")
def front(proxy: Proxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TlsFront, Path]]:
    cert, key = _certificate(tmp_path_factory.mktemp("tls"))
    host, port = proxy.base_url.removeprefix("http://").rsplit(":", 1)
    f = TlsFront((host, int(port)), cert, key)
    yield f, cert
    f.close()


@pytest.fixture
def log(proxy: Proxy, cloud: CloudMock) -> RequestLog:
    cloud.requests.clear()
    cloud.reject_fields.clear()
    return proxy.request_log()


@pytest.fixture
def client(front: tuple[TlsFront, Path], monkeypatch: pytest.MonkeyPatch) -> Any:
    """boto3's bedrock-runtime client with a Bedrock API key, on the proxy's `/bedrock` route
    (through the TLS front); one attempt, no credentials but the key."""
    import boto3
    from botocore.config import Config

    for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent-e2e-aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent-e2e-aws-credentials")
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", BEDROCK_API_KEY)
    tls, cert = front
    return boto3.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=f"https://127.0.0.1:{tls.port}/bedrock",
        verify=str(cert),
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60),
    )


def with_headers(client: Any, headers: dict[str, str]) -> Any:
    """Add mock knobs (``x-mock-…`` headers) to every request ``client`` sends."""

    def add(request: Any, **_: Any) -> None:
        for k, v in headers.items():
            request.headers[k] = v

    client.meta.events.register("before-sign.bedrock-runtime.*", add)
    return client


# ---------------------------------------------------------------------------------------------
# Bodies
# ---------------------------------------------------------------------------------------------

TOOLS = {"tools": [{"toolSpec": {"name": "screenshot", "description": "Take a screenshot.",
                                 "inputSchema": {"json": {"type": "object", "properties": {}}}}}]}  # fmt: skip
SYSTEM = [{"text": "You are a careful UI tester."}]


def session(shots: list[bytes]) -> list[dict[str, Any]]:
    """A user turn, then per screenshot: the assistant's toolUse and a user toolResult holding
    a text and the image (raw bytes: boto3 base64-encodes them). Carrier ``i`` is
    ``messages[2 + 2*i]``."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "Open the app, screenshot each step."}]}]
    for i, png in enumerate(shots):
        tid = f"tooluse_{i:03d}"
        msgs.append({"role": "assistant", "content": [{"toolUse": {"toolUseId": tid, "name": "screenshot", "input": {}}}]})
        msgs.append({"role": "user", "content": [{"toolResult": {"toolUseId": tid, "content": [
            {"text": f"Screenshot {i} taken."}, {"image": {"format": "png", "source": {"bytes": png}}}]}}]})  # fmt: skip
    return msgs


def carrier(sent: dict[str, Any], i: int) -> list[dict[str, Any]]:
    return sent["messages"][2 + 2 * i]["content"][0]["toolResult"]["content"]


def cache_points(sent: dict[str, Any]) -> list[str]:
    out = [f"system[{i}]" for i, b in enumerate(sent.get("system", [])) if "cachePoint" in b]
    out += [f"tools[{i}]" for i, b in enumerate(sent.get("toolConfig", {}).get("tools", [])) if "cachePoint" in b]
    for i, m in enumerate(sent["messages"]):
        out += [f"messages[{i}][{j}]" for j, b in enumerate(m["content"]) if "cachePoint" in b]
    return out


def streamed_text(resp: dict[str, Any]) -> str:
    return "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in resp["stream"] if "contentBlockDelta" in e)


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse_stream"])
def test_images_evicted_and_cache_points_placed(client: Any, cloud: CloudMock, log: RequestLog, stream: bool) -> None:
    """21 screenshots of 2400x1350 in tool results (over Claude's 20-image ceiling for images
    over 2000 px): the 11 oldest are retired, each a ``{"text": …}`` block with its toolResult's
    id and text kept; four cache points go after the tool, the system prompt and the last two
    user messages. The usage the mock reported reaches the request log."""
    shots = [fake_png(*LARGE, seed=i) for i in range(21)]
    kwargs = dict(modelId=CLAUDE, system=SYSTEM, toolConfig=TOOLS, messages=session(shots),
                  inferenceConfig={"maxTokens": 64})  # fmt: skip
    if stream:
        assert streamed_text(client.converse_stream(**kwargs)) == DEFAULT_REPLY
    else:
        resp = client.converse(**kwargs)
        assert resp["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
        assert resp["usage"] == BEDROCK_CONVERSE_USAGE
    rec = cloud.last("POST", "/converse-stream" if stream else "/converse")
    assert rec.auth_scheme == "bearer"
    assert rec.model_id == CLAUDE
    sent = rec.json()
    for i in range(21):
        block = carrier(sent, i)
        assert block[0] == {"text": f"Screenshot {i} taken."}
        if i < 11:
            assert_retired_text(block[1]["text"])
        else:
            assert block[1]["image"]["format"] == "png", i
    assert cache_points(sent) == ["system[1]", "tools[1]", "messages[40][1]", "messages[42][1]"]
    line = log.one("/converse-stream" if stream else "/converse")
    assert (line["route"], line["dialect"], line["model"], line["body"]) == ("bedrock", "converse", CLAUDE, "rewritten")
    assert (line["images_retired"], line["breakpoints_added"]) == (11, 4)
    usage = {k: line[k] for k in ("uncached_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")}
    assert usage == {"uncached_input_tokens": 12, "cache_read_tokens": 5120, "cache_write_tokens": 248, "output_tokens": 7}
    assert (line["cache_write_5m_tokens"], line["cache_write_1h_tokens"]) == (148, 100)


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse_stream"])
def test_screenshots_downscaled_with_their_format(client: Any, cloud: CloudMock, log: RequestLog, stream: bool) -> None:
    """A 1920x1080 screenshot (about 1.5 MB of PNG) in a tool result: forwarded at most 1568 px
    on its long side, its ``format`` naming what the new bytes are, with the fixed downscale
    note after it in the tool result."""
    png = screenshot_png(*SCREEN, seed=7100 + int(stream))
    kwargs = dict(modelId=CLAUDE, messages=session([png]), toolConfig=TOOLS, inferenceConfig={"maxTokens": 64})
    if stream:
        assert streamed_text(client.converse_stream(**kwargs)) == DEFAULT_REPLY
    else:
        assert client.converse(**kwargs)["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    import base64

    content = carrier(cloud.last("POST", "/converse-stream" if stream else "/converse").json(), 0)
    image = content[1]["image"]
    fmt, w, h = image_size(base64.b64decode(image["source"]["bytes"]))
    assert image["format"] == fmt
    assert max(w, h) <= MAX_DIMENSION and (w, h) != SCREEN
    assert content[2] == {"text": downscale_note(SCREEN, (w, h))}
    line = log.one("/converse-stream" if stream else "/converse")
    assert line["images_downscaled"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse_stream"])
def test_reasoning_the_client_dropped_is_restored(client: Any, cloud: CloudMock, log: RequestLog, stream: bool) -> None:
    """A tool-use turn with reasoning (the mock's signed ``reasoningText`` and a
    ``redactedContent``); the client sends the turn back without them: the proxy captured both
    from the response (the JSON body, or the stream's ``reasoningContent`` deltas) and puts them
    back first in the turn, the same text, signature and blob."""
    with_headers(client, {"x-mock-reasoning": "1"})
    question = [{"role": "user", "content": [{"text": f"Say hello ({'stream' if stream else 'json'})."}]}]
    kwargs: dict[str, Any] = dict(modelId=CLAUDE, messages=question, inferenceConfig={"maxTokens": 64},
                                  additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 1024}})  # fmt: skip
    if stream:
        events = list(client.converse_stream(**kwargs)["stream"])
        kinds = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
        assert {"reasoningContent": {"signature": ANTHROPIC_SIGNATURE}} in kinds
    else:
        content = client.converse(**kwargs)["output"]["message"]["content"]
        assert content[0]["reasoningContent"]["reasoningText"]["signature"] == ANTHROPIC_SIGNATURE
    first = log.one("/converse-stream" if stream else "/converse")
    assert (first["reasoning_seen"], first["turn_captured"]) == (2, True)

    echoed = question + [
        {"role": "assistant", "content": [{"text": DEFAULT_REPLY}]},
        {"role": "user", "content": [{"text": "And again."}]},
    ]
    log.mark()
    client.converse(**dict(kwargs, messages=echoed))
    sent = cloud.last("POST", "/converse").json()
    assert sent["messages"][1]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": REASONING_TEXT, "signature": ANTHROPIC_SIGNATURE}}},
        {"reasoningContent": {"redactedContent": BEDROCK_REDACTED}},
        {"text": DEFAULT_REPLY},
    ]
    line = log.one("/converse")
    assert (line["restored_thinking"], line["restored_redacted_thinking"]) == (1, 1)


def test_unknown_model_field_retried_without_it(client: Any, cloud: CloudMock, log: RequestLog) -> None:
    """Bedrock refuses a key of ``additionalModelRequestFields`` Claude does not take (400
    ValidationException, "extraneous key [top_k] is not permitted"): the proxy learns it and
    sends the request once more without the key, so the client gets the answer; the next
    request leaves the key out from the start."""
    cloud.reject_fields.add("top_k")
    fields = {"top_k": 40, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    messages = [{"role": "user", "content": [{"text": "Say hello."}]}]
    resp = client.converse(modelId=CLAUDE, messages=messages, additionalModelRequestFields=fields)
    assert resp["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    converse = [r for r in cloud.requests if r.path.endswith("/converse")]
    assert len(converse) == 2
    assert "top_k" in converse[0].json()["additionalModelRequestFields"]
    assert converse[1].json()["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    line = log.one("/converse")
    assert line["retried_without"] == "param:top_k"
    log.mark()
    client.converse(modelId=CLAUDE, messages=messages, additionalModelRequestFields=fields)
    assert len([r for r in cloud.requests if r.path.endswith("/converse")]) == 3
    assert log.one("/converse")["params_dropped"] == 1
