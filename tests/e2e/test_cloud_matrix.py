"""Issue 29's matrix: every official cloud client x every property, through the proxy to the
cloud mock (cloud_mock.py). A cell names the test that covers it; ``M:`` is this file, ``C:``
test_clouds.py, ``V:`` test_converse.py; ``[id]`` is the parametrization.

Rows (the client and the call it makes):

- ``converse``, ``converse_stream``, ``invoke_model``, ``invoke_model_with_response_stream``:
  boto3 ``bedrock-runtime``, SigV4-signed with the key the proxy holds (route ``/bedrock``,
  ``[routes.aws]``), so every rewritten body here is also signed again by the proxy and checked
  by the mock as AWS does (botocore's signer);
- ``AnthropicBedrock``: anthropic's client with a Bedrock API key (``Authorization: Bearer``),
  ``messages.create`` on ``/invoke`` (``.stream``: ``messages.stream`` on
  ``/invoke-with-response-stream``);
- ``AnthropicVertex``: ``:rawPredict`` (``.stream``: ``:streamRawPredict``), OAuth bearer;
- ``AzureOpenAI``: ``chat.completions`` on ``/openai/deployments/{d}/chat/completions``
  (``.stream`` with ``include_usage``), api-key; ``AzureOpenAI.responses``: ``responses.create``
  on the v1 API ``/openai/v1/responses``;
- ``genai-vertex``: google-genai with ``vertexai=True``, ``generate_content`` (``.stream``:
  ``generate_content_stream``, SSE), OAuth bearer.

Columns:

- evict: 21 screenshots of 2400x1350 in tool results: the 11 oldest retired (the fixed text),
  the 10 newest forwarded byte for byte;
- downscale: one 1920x1080 screenshot (about 1.5 MB): forwarded at most 1568 px, its declared
  type naming the new bytes, the fixed downscale note after it;
- restore: reasoning carriers the response carried and the client dropped from its echo are
  put back, the exact bytes (signature, blob, encrypted content);
- usage: what the client parsed and what the request log holds are the mock's figures;
- signed: a body the proxy rewrote is accepted upstream (the signature, redone by the proxy,
  verifies);
- retry: a 400 naming an unknown field (each cloud's own wording, the mock's
  ``reject_fields``) is answered by one retry without it; for boto3 that retry is signed again;
- as-signed: a SigV4 request to a proxy with no AWS credentials, on a route on ``/``, goes
  upstream byte for byte with the host it was signed for, and verifies.

Cells: the test of this file that covers it (its parametrization is the row), then, after
``+``, an earlier test that covers it too (``C``: test_clouds.py, ``V``: test_converse.py).
``n/a``: bearer / api-key, no body signature.

================================= ====== ========= ========= ====== ====== ====== =========
row                               evict  downscale restore   usage  signed retry  as-signed
================================= ====== ========= ========= ====== ====== ====== =========
converse                          E +V1  D +V2     Rc +V3    U +V1  S +C1  T +C1  A +C2
converse_stream                   E +V1  D +V2     Rc        U +V1  S      T      A +C2
invoke_model                      E +C3  D         Ra        U      S +C3  T +C4  A +C2
invoke_model_with_response_stream E      D         Ra        U      S +C3  T      A
AnthropicBedrock (+ .stream)      E +C5  D         Ra +C6    U +C6  n/a    T      n/a
AnthropicVertex (+ .stream)       E +C7  D         Ra +C8    U +C7  n/a    T      n/a
AzureOpenAI (chat, + .stream)     E      D         Rz        U +C9  n/a    T      n/a
AzureOpenAI.responses (+ .stream) (a)    (a)       Rz        U      n/a    (a)    n/a
genai-vertex (+ .stream)          E      D         Rg        U +C10 n/a    T      n/a
================================= ====== ========= ========= ====== ====== ====== =========

This file: E ``test_evict``, D ``test_downscale``, Ra ``test_restore_anthropic``, Rc
``test_restore_converse``, Rg ``test_restore_gemini``, Rz ``test_restore_azure``, U
``test_usage``, T ``test_retry``, A ``test_as_signed``; S: every E, D, Ra, Rc and T cell of a
boto3 row checks that the body the proxy rewrote and signed again verifies upstream
(``upstream_auth=resigned``, the mock's SigV4 check).
Earlier tests: V1 ``test_images_evicted_and_cache_points_placed``, V2
``test_screenshots_downscaled_with_their_format``, V3 ``test_reasoning_the_client_dropped_is_restored``
(V*: a Bedrock API key, not signed); C1 ``test_signed_converse_is_rewritten_resigned_and_retried_signed``,
C2 ``test_boto3_signed_requests_go_upstream_as_signed``, C3
``test_boto3_signed_with_the_proxy_s_key_is_rewritten_and_resigned``, C4
``test_the_one_retry_is_signed_again``, C5 ``test_anthropic_bedrock_api_key_gets_the_passes``,
C6 ``test_anthropic_bedrock_stream_is_read``, C7
``test_anthropic_vertex_images_retired_and_usage_read``, C8
``test_anthropic_vertex_thinking_the_client_dropped_is_restored``, C9
``test_azure_openai_deployment_maps_to_its_model``, C10
``test_genai_vertex_model_from_the_path_and_usage``.
(a): not run here: the Azure row of this matrix is the Chat Completions client; its Responses
calls are here for what only they carry (the reasoning item, their usage shape).

Notes on cells:

- restore on Azure: the ``azure-openai`` row reads what the ``openai`` row reads (RC on Chat
  Completions, docs/providers.md; **unconfirmed** that Azure's own deployments send or accept
  it): a ``reasoning_content`` the response carried and the client dropped is put back
  (``AzureOpenAI`` chat); and, on the Responses API, the ``reasoning`` item (with its
  ``encrypted_content``) a reasoning deployment returns with ``store: false``.
- restore keeps the route's model: a restored request is logged under the model the route's
  ``models`` table maps the deployment to (``test_restore_azure[chat]`` found it logged under
  the deployment name; fixed in ``rewrite_parsed``).
- restore on genai-vertex: Gemini's ``thoughtSignature`` on the first of two parallel
  ``functionCall`` parts, as Vertex returns them; the second has none and gets none.
- The retry column uses a model of its own per row: a learned field is remembered for (host,
  model), and the other columns must not see it dropped.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pytest

from cloud_mock import (
    AWS_ACCESS_KEY_ID,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    AZURE_API_KEY,
    BEDROCK_API_KEY,
    BEDROCK_CONVERSE_USAGE,
    BEDROCK_REDACTED,
    REASONING_TEXT,
    VERTEX_ACCESS_TOKEN,
    VERTEX_LOCATION,
    VERTEX_PROJECT,
    CloudMock,
)
from conftest import Proxy, RequestLog, launch_proxy
from helpers import LARGE, assert_retired_text, fake_png
from images import b64, downscale_note, image_size, screenshot_png
from mock_upstream import (
    ANTHROPIC_REDACTED,
    ANTHROPIC_SIGNATURE,
    DEFAULT_REPLY,
    GEMINI_SIGNATURE,
    GEMINI_USAGE,
    OPENAI_USAGE,
    RESPONSES_ENCRYPTED,
    RESPONSES_USAGE,
)
from test_converse import TOOLS as CONVERSE_TOOLS
from test_converse import carrier as converse_carrier
from test_converse import session as converse_session
from test_usage import ANTHROPIC, GEMINI_EXPECTED, OPENAI, Usage, assert_logged

CLAUDE_BEDROCK = "anthropic.claude-sonnet-4-5-20250929-v1:0"
CLAUDE_VERTEX = "claude-sonnet-4-5@20250929"
GEMINI_VERTEX = "gemini-2.5-flash"
AZURE_DEPLOYMENT = "prod-4o"
AZURE_MODEL = "gpt-4o"
AZURE_REASONING_MODEL = "o4-mini"  # the v1 API names the deployment in the body
SCREEN = (1920, 1080)
MAX_DIMENSION = 1568  # [images] max_dimension default (docs/images.md)
RETIRED, KEPT = 11, 10  # of 21 screenshots over 2000 px: down to half the ceiling of 20
MIME = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
REJECTED = "service_tier"  # on the default droppable_params; each cloud's mock refuses it on demand


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
    """One route per cloud; the proxy holds the mock's AWS key, so boto3's signed requests are
    checked, rewritten and signed again (AnthropicBedrock's API key goes as sent)."""
    routes = f"""
[[routes]]
name = "vertex"
prefix = "/vertex"
upstream = "{cloud.url}"
provider = "vertex"

[[routes]]
name = "bedrock"
prefix = "/bedrock"
upstream = "{cloud.url}"
provider = "bedrock"
[routes.aws]
region = "{AWS_REGION}"

[[routes]]
name = "azure"
prefix = "/azure"
upstream = "{cloud.url}"
provider = "azure-openai"
models = {{ "{AZURE_DEPLOYMENT}" = "{AZURE_MODEL}" }}
"""
    env = {"AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET_ACCESS_KEY}
    with launch_proxy(tmp_path_factory.mktemp("cloud-matrix"), routes, env_extra=env) as p:
        yield p


@pytest.fixture(scope="module")
def root_proxy(cloud: CloudMock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """No AWS credentials, one Bedrock route on `/`: a signed request can only go as signed."""
    routes = f'[[routes]]\nname = "bedrock"\nprefix = "/"\nupstream = "{cloud.url}"\nprovider = "bedrock"\n'
    with launch_proxy(tmp_path_factory.mktemp("cloud-matrix-root"), routes) as p:
        yield p


@pytest.fixture
def log(proxy: Proxy, cloud: CloudMock) -> Iterator[RequestLog]:
    cloud.requests.clear()
    cloud.reject_fields = set()
    yield proxy.request_log()
    cloud.reject_fields = set()


# ---------------------------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------------------------


def boto3_client(proxy: Proxy, prefix: str, headers: dict[str, str] | None = None, sent: list[bytes] | None = None) -> Any:
    """boto3's bedrock-runtime client signing with the mock's key for the proxy's host and
    ``prefix``; ``headers`` (mock knobs) are added before signing; ``sent`` collects the body
    bytes of each request as boto3 sent it."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=f"{proxy.base_url}{prefix}",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=AWS_SECRET_ACCESS_KEY,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60),
    )

    def add(request: Any, **_: Any) -> None:
        for k, v in (headers or {}).items():
            request.headers[k] = v

    def record(request: Any, **_: Any) -> None:
        if sent is not None:
            body = request.body or b""
            sent.append(body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else body.read())

    client.meta.events.register("before-sign.bedrock-runtime.*", add)
    client.meta.events.register("before-send.bedrock-runtime.*", record)
    return client


def anthropic_bedrock(proxy: Proxy) -> Any:
    from anthropic import AnthropicBedrock

    return AnthropicBedrock(
        aws_region=AWS_REGION, base_url=f"{proxy.base_url}/bedrock", api_key=BEDROCK_API_KEY, max_retries=0, timeout=60.0
    )


def anthropic_vertex(proxy: Proxy) -> Any:
    from anthropic import AnthropicVertex

    return AnthropicVertex(
        region=VERTEX_LOCATION,
        project_id=VERTEX_PROJECT,
        access_token=VERTEX_ACCESS_TOKEN,
        base_url=f"{proxy.base_url}/vertex/v1",
        max_retries=0,
        timeout=60.0,
    )


def azure(proxy: Proxy, v1: bool = False) -> Any:
    from openai import AzureOpenAI

    if v1:  # the v1 API: no deployment in the path (https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle)
        return AzureOpenAI(
            base_url=f"{proxy.base_url}/azure/openai/v1/", api_key=AZURE_API_KEY, api_version="preview", max_retries=0, timeout=60.0
        )
    return AzureOpenAI(
        azure_endpoint=f"{proxy.base_url}/azure",
        api_key=AZURE_API_KEY,
        api_version="2024-10-21",
        azure_deployment=AZURE_DEPLOYMENT,
        max_retries=0,
        timeout=60.0,
    )


def genai_vertex(proxy: Proxy) -> Any:
    from google import genai
    from google.genai import types
    from google.oauth2.credentials import Credentials

    return genai.Client(
        vertexai=True,
        project=VERTEX_PROJECT,
        location=VERTEX_LOCATION,
        credentials=Credentials(token=VERTEX_ACCESS_TOKEN),
        http_options=types.HttpOptions(base_url=f"{proxy.base_url}/vertex/", timeout=60_000),
    )


def genai_config(headers: dict[str, str] | None = None, extra_body: dict[str, Any] | None = None, **kw: Any) -> Any:
    from google.genai import types

    http = types.HttpOptions(headers=headers or None, extra_body=extra_body)
    return types.GenerateContentConfig(http_options=http, **kw)


# ---------------------------------------------------------------------------------------------
# Bodies: a screenshot session per wire; each forwarded carrier is [text, image, (note)]
# ---------------------------------------------------------------------------------------------


def b64_any(text: str) -> bytes:
    """Standard or URL-safe base64 (google-genai sends the URL-safe alphabet)."""
    return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)


def anthropic_shots(pngs: list[bytes]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Open the app and take a screenshot after each step."}]
    for i, png in enumerate(pngs):
        tid = f"toolu_{i:03d}"
        msgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "screenshot", "input": {"step": i}}]})
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(png)}}
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                                  "content": [{"type": "text", "text": f"Screenshot {i} taken."}, image]}]})  # fmt: skip
    return msgs


ANTHROPIC_TOOLS = [{"name": "screenshot", "description": "Take a screenshot.", "input_schema": {"type": "object", "properties": {}}}]


def openai_shots(pngs: list[bytes]) -> list[dict[str, Any]]:
    """Chat Completions takes images in user messages only: each tool message is followed by a
    user message with the screenshot (carrier ``i`` is ``messages[3 + 3*i]``)."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Open the app and take a screenshot after each step."}]
    for i, png in enumerate(pngs):
        cid = f"call_{i:03d}"
        call = {"id": cid, "type": "function", "function": {"name": "screenshot", "arguments": f'{{"step":{i}}}'}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": "Screenshot taken; it follows as an image."})
        url = "data:image/png;base64," + b64(png)
        msgs.append({"role": "user", "content": [{"type": "text", "text": f"Screenshot {i} taken."},
                                                 {"type": "image_url", "image_url": {"url": url}}]})  # fmt: skip
    return msgs


OPENAI_TOOLS = [{"type": "function", "function": {"name": "screenshot", "description": "Take a screenshot.",
                                                  "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip


def gemini_shots(pngs: list[bytes]) -> list[Any]:
    """A user turn, then per screenshot the model's functionCall and a user content holding the
    functionResponse and the screenshot as inline data (carrier ``i`` is ``contents[2 + 2*i]``)."""
    from google.genai import types

    contents = [types.Content(role="user", parts=[types.Part.from_text(text="Open the app and take a screenshot after each step.")])]
    for i, png in enumerate(pngs):
        contents.append(types.Content(role="model", parts=[types.Part.from_function_call(name="screenshot", args={"step": i})]))
        contents.append(
            types.Content(
                role="user",
                parts=[
                    types.Part.from_function_response(name="screenshot", response={"output": f"Screenshot {i} taken."}),
                    types.Part.from_bytes(data=png, mime_type="image/png"),
                ],
            )
        )
    return contents


def gemini_tools() -> list[Any]:
    from google.genai import types

    decl = types.FunctionDeclaration(name="screenshot", description="Take a screenshot.", parameters={"type": "object", "properties": {}})
    return [types.Tool(function_declarations=[decl])]


@dataclass(frozen=True)
class Shots:
    """One row's screenshot session: how to send it and how to read what was forwarded."""

    name: str
    suffix: str  # the upstream path's (and the log line's) suffix
    dialect: str
    model: str
    signed: bool
    send: Callable[[Proxy, list[bytes]], None]
    carrier: Callable[[dict[str, Any], int], list[Any]]
    image: Callable[[Any], tuple[str, bytes] | None]  # (declared type, bytes) of an image part
    text: Callable[[Any], str | None]  # the text of a text part


def _boto3_invoke(stream: bool) -> Callable[[Proxy, list[bytes]], None]:
    def send(proxy: Proxy, pngs: list[bytes]) -> None:
        client = boto3_client(proxy, "/bedrock")
        body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "tools": ANTHROPIC_TOOLS,
                           "messages": anthropic_shots(pngs)})  # fmt: skip
        if stream:
            resp = client.invoke_model_with_response_stream(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
            blocks, _, _ = assemble_anthropic(chunk_events(resp))
        else:
            resp = client.invoke_model(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
            blocks = json.loads(resp["body"].read())["content"]
        assert blocks == [{"type": "text", "text": DEFAULT_REPLY}]

    return send


def _boto3_converse(stream: bool) -> Callable[[Proxy, list[bytes]], None]:
    def send(proxy: Proxy, pngs: list[bytes]) -> None:
        client = boto3_client(proxy, "/bedrock")
        kwargs = dict(modelId=CLAUDE_BEDROCK, messages=converse_session(pngs), toolConfig=CONVERSE_TOOLS, inferenceConfig={"maxTokens": 64})
        if stream:
            events = list(client.converse_stream(**kwargs)["stream"])
            text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
            assert text == DEFAULT_REPLY
        else:
            assert client.converse(**kwargs)["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]

    return send


def _anthropic_sdk(make: Callable[[Proxy], Any], model: str) -> Callable[[Proxy, list[bytes]], None]:
    def send(proxy: Proxy, pngs: list[bytes]) -> None:
        msg = make(proxy).messages.create(model=model, max_tokens=64, tools=ANTHROPIC_TOOLS, messages=anthropic_shots(pngs))
        assert [b.text for b in msg.content if b.type == "text"] == [DEFAULT_REPLY]

    return send


def _azure_send(proxy: Proxy, pngs: list[bytes]) -> None:
    resp = azure(proxy).chat.completions.create(model=AZURE_DEPLOYMENT, messages=openai_shots(pngs), tools=OPENAI_TOOLS)
    assert resp.choices[0].message.content == DEFAULT_REPLY


def _genai_send(proxy: Proxy, pngs: list[bytes]) -> None:
    client = genai_vertex(proxy)  # kept: the SDK closes its HTTP client when the object goes
    resp = client.models.generate_content(model=GEMINI_VERTEX, contents=gemini_shots(pngs), config=genai_config(tools=gemini_tools()))
    assert resp.text == DEFAULT_REPLY


def _anthropic_carrier(sent: dict[str, Any], i: int) -> list[Any]:
    return sent["messages"][2 + 2 * i]["content"][0]["content"]


def _anthropic_image(part: Any) -> tuple[str, bytes] | None:
    if part.get("type") != "image":
        return None
    return part["source"]["media_type"], base64.b64decode(part["source"]["data"])


def _anthropic_text(part: Any) -> str | None:
    return part.get("text") if part.get("type") == "text" else None


def _converse_image(part: Any) -> tuple[str, bytes] | None:
    if "image" not in part:
        return None
    return MIME[part["image"]["format"]], base64.b64decode(part["image"]["source"]["bytes"])


def _openai_image(part: Any) -> tuple[str, bytes] | None:
    if part.get("type") != "image_url":
        return None
    head, _, data = part["image_url"]["url"].partition(",")
    assert head.startswith("data:") and head.endswith(";base64"), head
    return head[5 : -len(";base64")], base64.b64decode(data)


def _gemini_image(part: Any) -> tuple[str, bytes] | None:
    blob = part.get("inlineData") or part.get("inline_data")
    if blob is None:
        return None
    return blob.get("mimeType") or blob.get("mime_type"), b64_any(blob["data"])


SHOTS = [
    Shots("converse", "/converse", "converse", CLAUDE_BEDROCK, True, _boto3_converse(False), converse_carrier, _converse_image,
          lambda p: p.get("text")),
    Shots("converse_stream", "/converse-stream", "converse", CLAUDE_BEDROCK, True, _boto3_converse(True), converse_carrier,
          _converse_image, lambda p: p.get("text")),
    Shots("invoke_model", "/invoke", "anthropic", CLAUDE_BEDROCK, True, _boto3_invoke(False), _anthropic_carrier, _anthropic_image,
          _anthropic_text),
    Shots("invoke_model_with_response_stream", "/invoke-with-response-stream", "anthropic", CLAUDE_BEDROCK, True, _boto3_invoke(True),
          _anthropic_carrier, _anthropic_image, _anthropic_text),
    Shots("AnthropicBedrock", "/invoke", "anthropic", CLAUDE_BEDROCK, False, _anthropic_sdk(anthropic_bedrock, CLAUDE_BEDROCK),
          _anthropic_carrier, _anthropic_image, _anthropic_text),
    Shots("AnthropicVertex", ":rawPredict", "anthropic", CLAUDE_VERTEX, False, _anthropic_sdk(anthropic_vertex, CLAUDE_VERTEX),
          _anthropic_carrier, _anthropic_image, _anthropic_text),
    Shots("AzureOpenAI", "/chat/completions", "openai", AZURE_MODEL, False, _azure_send,
          lambda sent, i: sent["messages"][3 + 3 * i]["content"], _openai_image, _anthropic_text),
    Shots("genai-vertex", ":generateContent", "gemini", GEMINI_VERTEX, False, _genai_send,
          lambda sent, i: sent["contents"][2 + 2 * i]["parts"], _gemini_image, lambda p: p.get("text")),
]  # fmt: skip


def _check_auth(signed: bool, rec: Any, line: dict[str, Any]) -> None:
    """A signed row: the rewritten body was signed again by the proxy and verifies upstream."""
    if signed:
        assert rec.auth_scheme == "sigv4" and rec.signature_verified is True, rec.auth_error
        assert line["upstream_auth"] == "resigned", line
    else:
        assert line.get("upstream_auth", "") == "", line


# ---------------------------------------------------------------------------------------------
# evict, downscale
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", SHOTS, ids=[r.name for r in SHOTS])
def test_evict(proxy: Proxy, cloud: CloudMock, log: RequestLog, row: Shots) -> None:
    """21 screenshots over 2000 px: the 11 oldest become the fixed text, in place; the 10 newest
    go upstream as the client sent them (the same bytes, the same declared type)."""
    pngs = [fake_png(*LARGE, seed=100 + i) for i in range(21)]
    row.send(proxy, pngs)
    rec = cloud.last("POST", row.suffix)
    sent = rec.json()
    for i, png in enumerate(pngs):
        parts = row.carrier(sent, i)
        assert len(parts) == 2, (i, parts)
        assert row.text(parts[0]) == f"Screenshot {i} taken." or row.image(parts[0]) is None, parts[0]
        if i < RETIRED:
            assert row.image(parts[1]) is None, i
            assert_retired_text(row.text(parts[1]))
        else:
            assert row.image(parts[1]) == ("image/png", png), i
    assert sum(row.image(row.carrier(sent, i)[1]) is not None for i in range(21)) == KEPT
    line = log.one(row.suffix)
    route = "vertex" if row.suffix.startswith(":") else "azure" if row.dialect == "openai" else "bedrock"
    assert (line["route"], line["dialect"], line["model"], line["body"]) == (route, row.dialect, row.model, "rewritten")
    assert line["images_retired"] == RETIRED
    _check_auth(row.signed, rec, line)


@pytest.mark.parametrize("row", SHOTS, ids=[r.name for r in SHOTS])
def test_downscale(proxy: Proxy, cloud: CloudMock, log: RequestLog, row: Shots) -> None:
    """A 1920x1080 screenshot of about 1.5 MB: forwarded within 1568 px, declared as what the
    new bytes are, with the fixed downscale note right after it."""
    png = screenshot_png(*SCREEN, seed=7200 + SHOTS.index(row))
    row.send(proxy, [png])
    rec = cloud.last("POST", row.suffix)
    parts = row.carrier(rec.json(), 0)
    got = row.image(parts[1])
    assert got is not None, parts[1]
    declared, data = got
    fmt, w, h = image_size(data)
    assert declared == MIME[fmt], (declared, fmt)
    assert max(w, h) <= MAX_DIMENSION and (w, h) != SCREEN, (w, h)
    assert len(data) < len(png) // 4, f"{len(data)} bytes forwarded of {len(png)}"
    assert len(parts) == 3, parts
    assert row.text(parts[2]) == downscale_note(SCREEN, (w, h))
    line = log.one(row.suffix)
    assert (line["dialect"], line["model"], line["body"], line["images_downscaled"]) == (row.dialect, row.model, "rewritten", 1)
    _check_auth(row.signed, rec, line)


# ---------------------------------------------------------------------------------------------
# Anthropic streams as the clients read them
# ---------------------------------------------------------------------------------------------


def chunk_events(resp: Any) -> list[dict[str, Any]]:
    """The Claude events of an InvokeModelWithResponseStream answer, as boto3 decodes them."""
    return [json.loads(e["chunk"]["bytes"]) for e in resp["body"] if "chunk" in e]


def assemble_anthropic(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]:
    """(content blocks, usage, Bedrock's invocationMetrics) of a Claude event stream."""
    blocks: list[dict[str, Any]] = []
    usage: dict[str, Any] = {}
    metrics = None
    for ev in events:
        kind = ev["type"]
        if kind == "message_start":
            usage.update(ev["message"].get("usage") or {})
        elif kind == "content_block_start":
            blocks.append(dict(ev["content_block"]))
        elif kind == "content_block_delta":
            d, b = ev["delta"], blocks[ev["index"]]
            field = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}[d["type"]]
            b[field] = (b.get(field, "") if field != "signature" else "") + d[field]
        elif kind == "message_delta":
            usage.update(ev.get("usage") or {})
        elif kind == "message_stop":
            metrics = ev.get("amazon-bedrock-invocationMetrics")
    return blocks, usage, metrics


# ---------------------------------------------------------------------------------------------
# restore: Anthropic wire (InvokeModel, its stream, AnthropicBedrock, AnthropicVertex)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claude:
    """One Anthropic-wire row: ``call(proxy, model, body, headers)`` sends ``body`` (no
    ``model``; extra keys allowed) and returns (content blocks, usage, extra figures the client
    saw)."""

    name: str
    suffix: str
    model: str
    signed: bool
    call: Callable[[Proxy, str, dict[str, Any], dict[str, str]], tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]]


def _claude_boto3(stream: bool) -> Any:
    def call(proxy: Proxy, model: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        client = boto3_client(proxy, "/bedrock", headers)
        raw = json.dumps({"anthropic_version": "bedrock-2023-05-31", **body})
        if stream:
            resp = client.invoke_model_with_response_stream(modelId=model, body=raw, contentType="application/json")
            blocks, usage, metrics = assemble_anthropic(chunk_events(resp))
            return blocks, usage, {"invocationMetrics": metrics}
        resp = client.invoke_model(modelId=model, body=raw, contentType="application/json")
        out = json.loads(resp["body"].read())
        hdrs = resp["ResponseMetadata"]["HTTPHeaders"]
        return out["content"], out["usage"], {k: v for k, v in hdrs.items() if k.startswith("x-amzn-bedrock-")}

    return call


def _claude_sdk(make: Callable[[Proxy], Any], stream: bool) -> Any:
    def call(proxy: Proxy, model: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        client = make(proxy)
        known = {k: v for k, v in body.items() if k in ("max_tokens", "messages", "tools")}
        extra = {k: v for k, v in body.items() if k not in known}
        kwargs = dict(model=model, extra_headers=headers, extra_body=extra or None, **known)
        if stream:
            with client.messages.stream(**kwargs) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kwargs)
        return [b.model_dump(exclude_none=True) for b in msg.content], msg.usage.model_dump(exclude_none=True), {}

    return call


CLAUDES = [
    Claude("invoke_model", "/invoke", CLAUDE_BEDROCK, True, _claude_boto3(False)),
    Claude("invoke_model_with_response_stream", "/invoke-with-response-stream", CLAUDE_BEDROCK, True, _claude_boto3(True)),
    Claude("AnthropicBedrock", "/invoke", CLAUDE_BEDROCK, False, _claude_sdk(anthropic_bedrock, False)),
    Claude("AnthropicBedrock.stream", "/invoke-with-response-stream", CLAUDE_BEDROCK, False, _claude_sdk(anthropic_bedrock, True)),
    Claude("AnthropicVertex", ":rawPredict", CLAUDE_VERTEX, False, _claude_sdk(anthropic_vertex, False)),
    Claude("AnthropicVertex.stream", ":streamRawPredict", CLAUDE_VERTEX, False, _claude_sdk(anthropic_vertex, True)),
]


@pytest.mark.parametrize("row", CLAUDES, ids=[r.name for r in CLAUDES])
def test_restore_anthropic(proxy: Proxy, cloud: CloudMock, log: RequestLog, row: Claude) -> None:
    """The answer carries a signed ``thinking`` and a ``redacted_thinking`` block (JSON, or
    Claude events in AWS event-stream frames, or SSE); the client sends the turn back with its
    text only: both blocks are put back first in the turn, the same thinking, signature and data,
    on the same path (signed again for boto3)."""
    question = [{"role": "user", "content": f"List the files ({row.name})."}]
    body = {"max_tokens": 64, "tools": ANTHROPIC_TOOLS, "messages": question}
    blocks, _, _ = row.call(proxy, row.model, body, {"x-mock-reasoning": "1"})
    assert [b["type"] for b in blocks] == ["thinking", "redacted_thinking", "text"], blocks
    thinking, redacted, text = blocks
    assert (thinking["signature"], redacted["data"]) == (ANTHROPIC_SIGNATURE, ANTHROPIC_REDACTED)
    first = log.one(row.suffix)
    assert (first["reasoning_seen"], first["turn_captured"]) == (2, True), first

    log.mark()
    cloud.requests.clear()
    echoed = question + [{"role": "assistant", "content": [text]}, {"role": "user", "content": "Thanks."}]
    blocks, _, _ = row.call(proxy, row.model, dict(body, messages=echoed), {})
    assert blocks == [{"type": "text", "text": DEFAULT_REPLY}]
    rec = cloud.last("POST", row.suffix)
    assert rec.json()["messages"][1]["content"] == [
        {"type": "thinking", "thinking": thinking["thinking"], "signature": ANTHROPIC_SIGNATURE},
        {"type": "redacted_thinking", "data": ANTHROPIC_REDACTED},
        {"type": "text", "text": DEFAULT_REPLY},
    ]
    line = log.one(row.suffix)
    assert (line["restored_thinking"], line["restored_redacted_thinking"], line["body"]) == (1, 1, "rewritten"), line
    _check_auth(row.signed, rec, line)


# ---------------------------------------------------------------------------------------------
# restore: Converse (signed)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse_stream"])
def test_restore_converse(proxy: Proxy, cloud: CloudMock, log: RequestLog, stream: bool) -> None:
    """Signed Converse / ConverseStream: the ``reasoningContent`` blocks (signed text and a
    redacted blob) captured from the JSON answer or the stream's deltas are put back into the
    echo sent the same way, and the proxy's new signature over that body verifies."""
    question = [{"role": "user", "content": [{"text": f"Say hello (signed {'stream' if stream else 'json'})."}]}]
    fields = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    kwargs: dict[str, Any] = dict(modelId=CLAUDE_BEDROCK, messages=question, inferenceConfig={"maxTokens": 64},
                                  additionalModelRequestFields=fields)  # fmt: skip
    op, suffix = ("converse_stream", "/converse-stream") if stream else ("converse", "/converse")
    first = getattr(boto3_client(proxy, "/bedrock", {"x-mock-reasoning": "1"}), op)(**kwargs)
    if stream:
        deltas = [e["contentBlockDelta"]["delta"] for e in first["stream"] if "contentBlockDelta" in e]
        assert {"reasoningContent": {"signature": ANTHROPIC_SIGNATURE}} in deltas
    else:
        assert first["output"]["message"]["content"][0]["reasoningContent"]["reasoningText"]["signature"] == ANTHROPIC_SIGNATURE
    captured = log.one(suffix)
    assert (captured["reasoning_seen"], captured["turn_captured"]) == (2, True), captured

    log.mark()
    cloud.requests.clear()
    echoed = question + [{"role": "assistant", "content": [{"text": DEFAULT_REPLY}]}, {"role": "user", "content": [{"text": "Again."}]}]
    again = getattr(boto3_client(proxy, "/bedrock"), op)(**dict(kwargs, messages=echoed))
    if stream:
        list(again["stream"])
    rec = cloud.last("POST", suffix)
    assert rec.json()["messages"][1]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": REASONING_TEXT, "signature": ANTHROPIC_SIGNATURE}}},
        {"reasoningContent": {"redactedContent": BEDROCK_REDACTED}},
        {"text": DEFAULT_REPLY},
    ]
    assert rec.signature_verified is True, rec.auth_error
    line = log.one(suffix)
    assert (line["restored_thinking"], line["restored_redacted_thinking"], line["upstream_auth"]) == (1, 1, "resigned")


# ---------------------------------------------------------------------------------------------
# restore: Gemini on Vertex (thoughtSignature), Azure OpenAI (reasoning_content, reasoning item)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_restore_gemini(proxy: Proxy, cloud: CloudMock, log: RequestLog, stream: bool) -> None:
    """Vertex answers two parallel function calls, the first with a ``thoughtSignature``; the
    client echoes the calls without it (an agent that keeps only name and args): the proxy puts
    the signature back on the first call, exactly, and none on the second."""
    from google.genai import types

    client = genai_vertex(proxy)
    question = types.Content(role="user", parts=[types.Part.from_text(text=f"Weather in Paris and Lyon? ({stream})")])
    params = {"type": "object", "properties": {"city": {"type": "string"}}}
    decl = types.FunctionDeclaration(name="get_weather", description="Weather.", parameters=params)
    config = genai_config({"x-mock-reasoning": "1"}, tools=[types.Tool(function_declarations=[decl])])
    if stream:
        chunks = list(client.models.generate_content_stream(model=GEMINI_VERTEX, contents=[question], config=config))
    else:
        chunks = [client.models.generate_content(model=GEMINI_VERTEX, contents=[question], config=config)]
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    assert [p.function_call.args["city"] for p in parts] == ["Paris", "Lyon"]
    assert [p.thought_signature for p in parts] == [base64.b64decode(GEMINI_SIGNATURE), None]
    captured = log.one(":streamGenerateContent" if stream else ":generateContent")
    assert (captured["reasoning_seen"], captured["turn_captured"]) == (1, True), captured

    log.mark()
    cloud.requests.clear()
    echo = [
        question,
        types.Content(role="model", parts=[types.Part.from_function_call(name="get_weather", args={"city": c}) for c in ("Paris", "Lyon")]),
        types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather", response={"output": f"sunny in {c}"})
                                          for c in ("Paris", "Lyon")]),
    ]  # fmt: skip
    config = genai_config(tools=[types.Tool(function_declarations=[decl])])
    resp = client.models.generate_content(model=GEMINI_VERTEX, contents=echo, config=config)
    assert resp.text == DEFAULT_REPLY
    model_turn = cloud.last("POST", ":generateContent").json()["contents"][1]["parts"]
    assert [p["functionCall"]["args"]["city"] for p in model_turn] == ["Paris", "Lyon"]
    assert model_turn[0]["thoughtSignature"] == GEMINI_SIGNATURE
    assert "thoughtSignature" not in model_turn[1]
    line = log.one(":generateContent")
    assert (line["restored_thought_signature"], line["body"]) == (1, "rewritten"), line


@pytest.mark.parametrize("kind", ["chat", "chat.stream", "responses", "responses.stream"])
def test_restore_azure(proxy: Proxy, cloud: CloudMock, log: RequestLog, kind: str) -> None:
    """Azure OpenAI reads the carriers the openai row reads. Chat Completions: a reasoning
    deployment's ``reasoning_content`` the client did not send back is appended to its
    assistant message. Responses (v1 API): the ``reasoning`` item (``encrypted_content``) the
    client left out of its input goes back before the message it produced, as the JSON text
    received."""
    stream = kind.endswith(".stream")
    if kind.startswith("chat"):
        client = azure(proxy)
        question = [{"role": "user", "content": f"Say hello ({kind})."}]
        if stream:
            chunks = list(client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=question, stream=True,
                                                         extra_headers={"x-mock-reasoning": "1"}))  # fmt: skip
            rc = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices)
        else:
            msg = client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=question, extra_headers={"x-mock-reasoning": "1"})
            rc = (msg.choices[0].message.model_extra or {}).get("reasoning_content")
        assert rc == REASONING_TEXT
        captured = log.one("/chat/completions")
        assert (captured["reasoning_seen"], captured["turn_captured"]) == (1, True), captured
        log.mark()
        cloud.requests.clear()
        echoed = question + [{"role": "assistant", "content": DEFAULT_REPLY}, {"role": "user", "content": "Again."}]
        client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=echoed)
        sent = cloud.last("POST", "/chat/completions").json()
        assert sent["messages"][1] == {"role": "assistant", "content": DEFAULT_REPLY, "reasoning_content": REASONING_TEXT}
        line = log.one("/chat/completions")
        assert (line["model"], line["restored_reasoning_content"]) == (AZURE_MODEL, 1), line
        return

    client = azure(proxy, v1=True)
    question = {"role": "user", "content": f"Say hello ({kind})."}
    kwargs: dict[str, Any] = dict(model=AZURE_REASONING_MODEL, input=[question], store=False, include=["reasoning.encrypted_content"])
    if stream:
        with client.responses.stream(**kwargs, extra_headers={"x-mock-reasoning": "1"}) as s:
            for _ in s:
                pass
            first = s.get_final_response()
    else:
        first = client.responses.create(**kwargs, extra_headers={"x-mock-reasoning": "1"})
    reasoning, message = first.output
    assert (reasoning.type, reasoning.encrypted_content, message.type) == ("reasoning", RESPONSES_ENCRYPTED, "message")
    captured = log.one("/responses")
    assert (captured["reasoning_seen"], captured["turn_captured"]) == (1, True), captured
    log.mark()
    cloud.requests.clear()
    kept = message.model_dump(exclude_none=True)
    client.responses.create(**dict(kwargs, input=[question, kept, {"role": "user", "content": "Again."}]))
    rec = cloud.last("POST", "/responses")
    assert rec.path == "/openai/v1/responses"
    sent = rec.json()["input"]
    assert [i.get("type", "message") for i in sent] == ["message", "reasoning", "message", "message"]
    assert sent[1] == {"id": reasoning.id, "type": "reasoning", "summary": [{"type": "summary_text", "text": "Greet the user briefly."}],
                       "encrypted_content": RESPONSES_ENCRYPTED, "status": "completed"}  # fmt: skip
    assert sent[2]["id"] == message.id
    line = log.one("/responses")
    assert line["restored_reasoning_item"] == 1, line


# ---------------------------------------------------------------------------------------------
# usage: what the client parsed, what the log says
# ---------------------------------------------------------------------------------------------


def anthropic_usage(u: dict[str, Any]) -> Usage:
    split = u.get("cache_creation") or {}
    return Usage(u["input_tokens"], u["cache_read_input_tokens"], u["cache_creation_input_tokens"],
                 split.get("ephemeral_5m_input_tokens"), split.get("ephemeral_1h_input_tokens"), u["output_tokens"])  # fmt: skip


def converse_usage(u: dict[str, Any]) -> Usage:
    ttl = {d["ttl"]: d["inputTokens"] for d in u.get("cacheDetails", [])}
    return Usage(u["inputTokens"], u["cacheReadInputTokens"], u["cacheWriteInputTokens"], ttl.get("5m"), ttl.get("1h"), u["outputTokens"])


def _usage_converse(proxy: Proxy, stream: bool) -> tuple[str, Usage]:
    client = boto3_client(proxy, "/bedrock")
    messages = [{"role": "user", "content": [{"text": "Say hello."}]}]
    if stream:
        events = list(client.converse_stream(modelId=CLAUDE_BEDROCK, messages=messages)["stream"])
        meta = [e["metadata"] for e in events if "metadata" in e]
        assert len(meta) == 1 and meta[0]["usage"] == BEDROCK_CONVERSE_USAGE
        return "/converse-stream", converse_usage(meta[0]["usage"])
    resp = client.converse(modelId=CLAUDE_BEDROCK, messages=messages)
    assert resp["usage"] == BEDROCK_CONVERSE_USAGE
    return "/converse", converse_usage(resp["usage"])


def _usage_claude(row: Claude) -> Callable[[Proxy], tuple[str, Usage]]:
    def run(proxy: Proxy) -> tuple[str, Usage]:
        blocks, usage, extra = row.call(proxy, row.model, {"max_tokens": 64, "messages": [{"role": "user", "content": "Say hello."}]}, {})
        assert blocks == [{"type": "text", "text": DEFAULT_REPLY}]
        if "invocationMetrics" in extra:
            # Bedrock's own figures on message_stop, what boto3-based agents read
            m = extra["invocationMetrics"]
            got = (m["inputTokenCount"], m["outputTokenCount"], m["cacheReadInputTokenCount"], m["cacheWriteInputTokenCount"])
            assert got == (12, 7, 5120, 248), m
        elif row.signed:
            # InvokeModel's token-count headers
            assert extra["x-amzn-bedrock-cache-read-input-token-count"] == "5120"
            assert (extra["x-amzn-bedrock-input-token-count"], extra["x-amzn-bedrock-output-token-count"]) == ("12", "7")
        return row.suffix, anthropic_usage(usage)

    return run


def _usage_azure(stream: bool) -> Callable[[Proxy], tuple[str, Usage]]:
    def run(proxy: Proxy) -> tuple[str, Usage]:
        client = azure(proxy)
        hello = [{"role": "user", "content": "Say hello."}]
        if stream:
            chunks = list(client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=hello, stream=True,
                                                         stream_options={"include_usage": True}))  # fmt: skip
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEFAULT_REPLY
            u = chunks[-1].usage
        else:
            resp = client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=hello)
            assert resp.choices[0].message.content == DEFAULT_REPLY
            u = resp.usage
        assert u.model_dump(exclude_none=True) == OPENAI_USAGE
        cached = u.prompt_tokens_details.cached_tokens
        return "/chat/completions", Usage(u.prompt_tokens - cached, cached, None, None, None, u.completion_tokens)

    return run


def _usage_responses(proxy: Proxy) -> tuple[str, Usage]:
    r = azure(proxy, v1=True).responses.create(model=AZURE_REASONING_MODEL, input="Say hello.")
    assert r.output_text == DEFAULT_REPLY
    u = r.usage
    assert u.model_dump(exclude_none=True) == RESPONSES_USAGE
    cached = u.input_tokens_details.cached_tokens
    return "/responses", Usage(u.input_tokens - cached, cached, None, None, None, u.output_tokens)


def _usage_genai(stream: bool) -> Callable[[Proxy], tuple[str, Usage]]:
    def run(proxy: Proxy) -> tuple[str, Usage]:
        client = genai_vertex(proxy)
        if stream:
            chunks = list(client.models.generate_content_stream(model=GEMINI_VERTEX, contents="Say hello."))
        else:
            chunks = [client.models.generate_content(model=GEMINI_VERTEX, contents="Say hello.")]
        assert "".join(c.text or "" for c in chunks) == DEFAULT_REPLY
        m = chunks[-1].usage_metadata
        assert (m.prompt_token_count, m.cached_content_token_count, m.candidates_token_count, m.thoughts_token_count) == (
            GEMINI_USAGE["promptTokenCount"], GEMINI_USAGE["cachedContentTokenCount"],
            GEMINI_USAGE["candidatesTokenCount"], GEMINI_USAGE["thoughtsTokenCount"],
        )  # fmt: skip
        suffix = ":streamGenerateContent" if stream else ":generateContent"
        return suffix, Usage(m.prompt_token_count - m.cached_content_token_count, m.cached_content_token_count, None, None, None,
                             m.candidates_token_count + m.thoughts_token_count)  # fmt: skip

    return run


USAGE_ROWS: list[tuple[str, Callable[[Proxy], tuple[str, Usage]], Usage]] = [
    ("converse", lambda p: _usage_converse(p, False), ANTHROPIC),
    ("converse_stream", lambda p: _usage_converse(p, True), ANTHROPIC),
    *[(r.name, _usage_claude(r), ANTHROPIC) for r in CLAUDES],
    ("AzureOpenAI", _usage_azure(False), OPENAI),
    ("AzureOpenAI.stream", _usage_azure(True), OPENAI),
    ("AzureOpenAI.responses", _usage_responses, OPENAI),
    ("genai-vertex", _usage_genai(False), GEMINI_EXPECTED),
    ("genai-vertex.stream", _usage_genai(True), GEMINI_EXPECTED),
]


@pytest.mark.parametrize("name,run,want", USAGE_ROWS, ids=[r[0] for r in USAGE_ROWS])
def test_usage(proxy: Proxy, cloud: CloudMock, log: RequestLog, name: str, run: Callable[[Proxy], tuple[str, Usage]], want: Usage) -> None:
    """The figures the client parsed (its own usage object, Bedrock's headers or invocation
    metrics) are the mock's, and the request log line holds the same ones."""
    suffix, parsed = run(proxy)
    assert parsed == want, f"{name}: the client parsed {parsed}"
    assert_logged(log.one(suffix), want, reasoning=None)


# ---------------------------------------------------------------------------------------------
# retry after an unknown-field 400
# ---------------------------------------------------------------------------------------------


def _retry_boto3(op: str) -> Callable[[Proxy, str], str]:
    def run(proxy: Proxy, model: str) -> str:
        client = boto3_client(proxy, "/bedrock")
        if op.startswith("converse"):
            kwargs = dict(modelId=model, messages=[{"role": "user", "content": [{"text": "hi"}]}],
                          additionalModelRequestFields={REJECTED: "auto"})  # fmt: skip
            if op == "converse_stream":
                events = list(client.converse_stream(**kwargs)["stream"])
                assert "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e) == DEFAULT_REPLY
                return "/converse-stream"
            assert client.converse(**kwargs)["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
            return "/converse"
        body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 32, REJECTED: "auto",
                           "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        if op == "invoke_model_with_response_stream":
            resp = client.invoke_model_with_response_stream(modelId=model, body=body, contentType="application/json")
            assert assemble_anthropic(chunk_events(resp))[0] == [{"type": "text", "text": DEFAULT_REPLY}]
            return "/invoke-with-response-stream"
        resp = client.invoke_model(modelId=model, body=body, contentType="application/json")
        assert json.loads(resp["body"].read())["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
        return "/invoke"

    return run


def _retry_claude(make: Callable[[Proxy], Any], suffix: str) -> Callable[[Proxy, str], str]:
    def run(proxy: Proxy, model: str) -> str:
        client = make(proxy)
        hi = [{"role": "user", "content": "hi"}]
        msg = client.messages.create(model=model, max_tokens=32, messages=hi, extra_body={REJECTED: "auto"})
        assert [b.text for b in msg.content] == [DEFAULT_REPLY]
        return suffix

    return run


def _retry_azure(proxy: Proxy, model: str) -> str:
    # a deployment the models table does not map: its name is the model
    from openai import AzureOpenAI

    client = AzureOpenAI(azure_endpoint=f"{proxy.base_url}/azure", api_key=AZURE_API_KEY, api_version="2024-10-21",
                         azure_deployment=model, max_retries=0, timeout=60.0)  # fmt: skip
    resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], extra_body={REJECTED: "auto"})
    assert resp.choices[0].message.content == DEFAULT_REPLY
    return "/chat/completions"


def _retry_genai(proxy: Proxy, model: str) -> str:
    client = genai_vertex(proxy)
    resp = client.models.generate_content(model=model, contents="hi", config=genai_config(extra_body={REJECTED: "auto"}))
    assert resp.text == DEFAULT_REPLY
    return ":generateContent"


def json_strings(v: Any) -> str:
    """Every string of a JSON value, one per line (an error's message, unescaped)."""
    if isinstance(v, dict):
        return "\n".join(json_strings(x) for x in v.values())
    if isinstance(v, list):
        return "\n".join(json_strings(x) for x in v)
    return v if isinstance(v, str) else ""


# (row, how, model of its own, signed, the cloud's refusal as the mock words it)
RETRIES = [
    ("converse", _retry_boto3("converse"), "anthropic.claude-retry-converse-v1:0", True, "extraneous key [service_tier]"),
    ("converse_stream", _retry_boto3("converse_stream"), "anthropic.claude-retry-converse-stream-v1:0", True,
     "extraneous key [service_tier]"),
    ("invoke_model", _retry_boto3("invoke_model"), "anthropic.claude-retry-invoke-v1:0", True, "extraneous key [service_tier]"),
    ("invoke_model_with_response_stream", _retry_boto3("invoke_model_with_response_stream"), "anthropic.claude-retry-invoke-stream-v1:0",
     True, "extraneous key [service_tier]"),
    ("AnthropicBedrock", _retry_claude(anthropic_bedrock, "/invoke"), "anthropic.claude-retry-sdk-v1:0", False,
     "extraneous key [service_tier]"),
    ("AnthropicVertex", _retry_claude(anthropic_vertex, ":rawPredict"), "claude-retry@20250929", False,
     "service_tier: Extra inputs are not permitted"),
    ("AzureOpenAI", _retry_azure, "retry-deployment", False, "Unrecognized request argument supplied: service_tier"),
    ("genai-vertex", _retry_genai, "gemini-2.5-flash-retry", False, 'Unknown name "service_tier"'),
]  # fmt: skip


@pytest.mark.parametrize("name,run,model,signed,wording", RETRIES, ids=[r[0] for r in RETRIES])
def test_retry(proxy: Proxy, cloud: CloudMock, log: RequestLog, name: str, run: Callable[[Proxy, str], str], model: str,
               signed: bool, wording: str) -> None:  # fmt: skip
    """The cloud refuses ``service_tier`` with its own unknown-field 400: the proxy sends the
    request once more without it (a boto3 retry signed again over its new body) and the client
    gets the answer; the next request leaves it out from the start."""
    cloud.reject_fields = {REJECTED}
    suffix = run(proxy, model)
    first, retry = cloud.matching("POST", suffix)
    assert first.response_status == 400 and wording in json_strings(json.loads(first.response_body)), first.response_body[:300]
    assert retry.response_status == 200

    def has(rec: Any) -> bool:
        body = rec.json()
        return REJECTED in (body.get("additionalModelRequestFields") or {}) if name.startswith("converse") else REJECTED in body

    assert has(first) and not has(retry)
    if signed:
        assert first.signature_verified is True and retry.signature_verified is True, (first.auth_error, retry.auth_error)
        assert first.header("authorization") != retry.header("authorization")
    line = log.one(suffix)
    assert line["retried_without"] == f"param:{REJECTED}", line
    if signed:
        assert line["upstream_auth"] == "resigned"

    log.mark()
    cloud.requests.clear()
    run(proxy, model)
    (again,) = cloud.matching("POST", suffix)
    assert not has(again) and again.response_status == 200
    assert log.one(suffix)["params_dropped"] == 1


# ---------------------------------------------------------------------------------------------
# as-signed: no AWS credentials on the proxy, a route on `/`
# ---------------------------------------------------------------------------------------------

AS_SIGNED = ["converse", "converse_stream", "invoke_model", "invoke_model_with_response_stream"]


@pytest.mark.parametrize("op", AS_SIGNED)
def test_as_signed(root_proxy: Proxy, cloud: CloudMock, op: str) -> None:
    """A request the passes would rewrite (21 screenshots over 2000 px), signed by boto3 for
    the proxy's host: the proxy cannot sign again, so it goes upstream exactly as sent (the
    same body bytes, the host it was signed for) and AWS's check passes; the log says what the
    passes would have done."""
    cloud.requests.clear()
    log = root_proxy.request_log()
    sent: list[bytes] = []
    client = boto3_client(root_proxy, "", sent=sent)
    pngs = [fake_png(*LARGE, seed=300 + i) for i in range(21)]
    if op.startswith("converse"):
        kwargs = dict(modelId=CLAUDE_BEDROCK, messages=converse_session(pngs), toolConfig=CONVERSE_TOOLS)
        if op == "converse_stream":
            events = list(client.converse_stream(**kwargs)["stream"])
            assert "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e) == DEFAULT_REPLY
        else:
            assert client.converse(**kwargs)["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    else:
        body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": anthropic_shots(pngs)})
        if op == "invoke_model":
            resp = client.invoke_model(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
            assert json.loads(resp["body"].read())["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
        else:
            resp = client.invoke_model_with_response_stream(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
            blocks, usage, _ = assemble_anthropic(chunk_events(resp))
            assert blocks == [{"type": "text", "text": DEFAULT_REPLY}]
    suffix = {"converse": "/converse", "converse_stream": "/converse-stream", "invoke_model": "/invoke",
              "invoke_model_with_response_stream": "/invoke-with-response-stream"}[op]  # fmt: skip
    (rec,) = cloud.matching("POST", suffix)
    assert len(sent) == 1
    assert rec.body == sent[0], "the body went upstream as boto3 sent it"
    assert rec.header("host") == root_proxy.base_url.removeprefix("http://")
    assert rec.signature_verified is True, rec.auth_error
    line = log.one(suffix)
    assert (line["body"], line["upstream_auth"], line["images_retired"]) == ("signed", "as_signed", RETIRED), line
    if op == "invoke_model_with_response_stream":
        assert (line["cache_read_tokens"], line["output_tokens"]) == (5120, 7), "the stream is still read"
