"""The clouds through the proxy (issue 29), with the official clients pointed at cachekeeper and
the cloud mock (cloud_mock.py) behind it: anthropic's ``AnthropicVertex`` and google-genai with
``vertexai=True`` on a Vertex AI route, openai's ``AzureOpenAI`` on an Azure OpenAI route with a
``models`` table. Each: the passes ran on the cloud's own paths (images retired, reasoning carriers
the client dropped restored), the usage the mock reported reached the request log under the model
the path names, and what the client parsed is what the mock sent.

Amazon Bedrock: Claude's InvokeModel with a Bedrock API key gets the passes. A request boto3
signs with SigV4: with no AWS credentials on the proxy's side it goes upstream exactly as signed
(bytes and host), so the mock's SigV4 check, done as AWS does it, passes on a route on `/`; with
the same credentials as the client's, the proxy checks the signature, rewrites and signs again
(the one retry too); other credentials, a stale signature or an unsigned request are signed by
the proxy only on a `sign_all` route."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from cloud_mock import (
    AWS_ACCESS_KEY_ID,
    write_google_service_account,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    AZURE_API_KEY,
    BEDROCK_API_KEY,
    AZURE_API_VERSION,
    VERTEX_ACCESS_TOKEN,
    VERTEX_LOCATION,
    VERTEX_PROJECT,
    CloudMock,
)
from conftest import Proxy, RequestLog, launch_proxy
from helpers import LARGE, anthropic_carrier_index, anthropic_session, assert_retired_text
from mock_upstream import ANTHROPIC_SIGNATURE, DEFAULT_REPLY, GEMINI_USAGE, OPENAI_USAGE

CLAUDE_VERTEX = "claude-sonnet-4-5@20250929"
GEMINI_VERTEX = "gemini-2.5-flash"
CLAUDE_BEDROCK = "anthropic.claude-sonnet-4-5-20250929-v1:0"
AZURE_DEPLOYMENT = "prod-4o"
AZURE_MODEL = "gpt-4o"


@pytest.fixture(scope="module")
def cloud() -> Iterator[CloudMock]:
    mock = CloudMock().start()
    yield mock
    mock.stop()


@pytest.fixture(scope="module")
def proxy(cloud: CloudMock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
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

[[routes]]
name = "azure"
prefix = "/azure"
upstream = "{cloud.url}"
provider = "azure-openai"
models = {{ "{AZURE_DEPLOYMENT}" = "{AZURE_MODEL}" }}
"""
    with launch_proxy(tmp_path_factory.mktemp("clouds"), routes) as p:
        yield p


@pytest.fixture
def log(proxy: Proxy, cloud: CloudMock) -> RequestLog:
    cloud.requests.clear()
    return proxy.request_log()


def anthropic_vertex(proxy: Proxy) -> Any:
    from anthropic import AnthropicVertex

    return AnthropicVertex(
        region=VERTEX_LOCATION,
        project_id=VERTEX_PROJECT,
        access_token=VERTEX_ACCESS_TOKEN,
        base_url=f"{proxy.base_url}/vertex/v1",
        max_retries=0,
        timeout=30.0,
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
        http_options=types.HttpOptions(base_url=f"{proxy.base_url}/vertex/"),
    )


def azure(proxy: Proxy) -> Any:
    from openai import AzureOpenAI

    return AzureOpenAI(
        azure_endpoint=f"{proxy.base_url}/azure",
        api_key=AZURE_API_KEY,
        api_version=AZURE_API_VERSION,
        azure_deployment=AZURE_DEPLOYMENT,
        max_retries=0,
        timeout=30.0,
    )


def test_anthropic_vertex_images_retired_and_usage_read(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    """21 screenshots of 2400x1350 (over Anthropic's 20-image ceiling for images over 2000 px):
    the 11 oldest are retired down to the low-water mark, on the rawPredict path, streamed."""
    client = anthropic_vertex(proxy)
    messages = anthropic_session(21, LARGE)
    with client.messages.stream(model=CLAUDE_VERTEX, max_tokens=64, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == DEFAULT_REPLY
    assert final.usage.cache_read_input_tokens == 5120
    rec = cloud.last("POST", ":streamRawPredict")
    assert rec.model_id == CLAUDE_VERTEX
    sent = rec.json()
    assert "model" not in sent
    for i in range(21):
        block = sent["messages"][anthropic_carrier_index(i)]["content"][0]["content"][1]
        if i < 11:
            assert_retired_text(block["text"])
        else:
            assert block["type"] == "image", i
    line = log.one(":streamRawPredict")
    assert (line["route"], line["dialect"], line["model"]) == ("vertex", "anthropic", CLAUDE_VERTEX)
    assert (line["cache_read_tokens"], line["output_tokens"]) == (5120, 7)


def test_anthropic_vertex_thinking_the_client_dropped_is_restored(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    """A tool round whose thinking the client does not send back: the proxy captured the signed
    blocks from the response and puts them back, byte-exact (Vertex serves Claude itself)."""
    client = anthropic_vertex(proxy)
    tools = [{"name": "ls", "description": "List files.", "input_schema": {"type": "object", "properties": {}}}]
    first = client.messages.create(
        model=CLAUDE_VERTEX,
        max_tokens=64,
        messages=[{"role": "user", "content": "List the files."}],
        tools=tools,
        extra_headers={"x-mock-reasoning": "1"},
    )
    kinds = [b.type for b in first.content]
    assert kinds[:2] == ["thinking", "redacted_thinking"], kinds
    # The agent keeps only the text (and any tool call), as some agents do.
    kept = [b.model_dump(exclude_none=True) for b in first.content if b.type not in ("thinking", "redacted_thinking")]
    client.messages.create(
        model=CLAUDE_VERTEX,
        max_tokens=64,
        messages=[
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": kept},
            {"role": "user", "content": "Thanks."},
        ],
        tools=tools,
    )
    sent = cloud.last("POST", ":rawPredict").json()
    restored = sent["messages"][1]["content"]
    assert [b["type"] for b in restored][:2] == ["thinking", "redacted_thinking"], restored
    assert restored[0]["signature"] == ANTHROPIC_SIGNATURE
    lines = log.wait(":rawPredict", 2)
    assert lines[-1]["model"] == CLAUDE_VERTEX


def test_genai_vertex_model_from_the_path_and_usage(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    client = genai_vertex(proxy)
    resp = client.models.generate_content(model=GEMINI_VERTEX, contents="Say hello.")
    assert resp.text == DEFAULT_REPLY
    chunks = list(client.models.generate_content_stream(model=GEMINI_VERTEX, contents="Say hello."))
    assert "".join(c.text for c in chunks) == DEFAULT_REPLY
    for suffix in (":generateContent", ":streamGenerateContent"):
        line = log.one(suffix)
        assert (line["route"], line["dialect"], line["model"]) == ("vertex", "gemini", GEMINI_VERTEX), line
        assert line["cache_read_tokens"] == GEMINI_USAGE["cachedContentTokenCount"]
        assert cloud.last("POST", suffix).header("authorization") == f"Bearer {VERTEX_ACCESS_TOKEN}"


def test_vertex_request_without_a_credential_gets_the_proxy_s_401(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    """What Claude Code sends with ``CLAUDE_CODE_SKIP_VERTEX_AUTH=1`` and no token source: no
    Authorization header. The proxy answers in the Anthropic shape, saying what to send; nothing
    reaches Vertex."""
    path = f"/vertex/v1/projects/{VERTEX_PROJECT}/locations/{VERTEX_LOCATION}/publishers/anthropic/models/{CLAUDE_VERTEX}:rawPredict"
    body = json.dumps({"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
    conn = http.client.HTTPConnection(proxy.base_url.removeprefix("http://"), timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        status, answer = resp.status, json.loads(resp.read())
    finally:
        conn.close()
    assert status == 401
    assert answer["type"] == "error" and answer["error"]["type"] == "authentication_error", answer
    message = answer["error"]["message"]
    assert message.startswith("cachekeeper: route vertex forwards to vertex, which needs a credential"), message
    assert "CLAUDE_CODE_SKIP_VERTEX_AUTH=1" in message
    assert not [r for r in cloud.requests if r.method == "POST"]
    assert log.one(":rawPredict")["status"] == 401


def test_azure_openai_deployment_maps_to_its_model(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    client = azure(proxy)
    resp = client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=[{"role": "user", "content": "Say hello."}])
    assert resp.choices[0].message.content == DEFAULT_REPLY
    stream = client.chat.completions.create(
        model=AZURE_DEPLOYMENT,
        messages=[{"role": "user", "content": "Say hello."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEFAULT_REPLY
    rec = cloud.last("POST", "/chat/completions")
    assert rec.path == f"/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions"
    assert rec.header("api-key") == AZURE_API_KEY
    lines = log.wait("/chat/completions", 2)
    assert [(l["route"], l["model"]) for l in lines] == [("azure", AZURE_MODEL)] * 2
    cached = OPENAI_USAGE["prompt_tokens_details"]["cached_tokens"]
    assert [l["cache_read_tokens"] for l in lines] == [cached, cached]


@pytest.fixture(scope="module")
def root_proxy(cloud: CloudMock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """A proxy whose one route, to Bedrock, is on `/`: a SigV4 signature covers the path the
    client sent, so a request forwarded as signed verifies only when no prefix is cut."""
    routes = f"""
[[routes]]
name = "bedrock"
prefix = "/"
upstream = "{cloud.url}"
provider = "bedrock"
"""
    with launch_proxy(tmp_path_factory.mktemp("bedrock-root"), routes) as p:
        yield p


def boto3_bedrock(proxy: Proxy, prefix: str = "") -> Any:
    """boto3's bedrock-runtime client pointed at the proxy: it signs for the proxy's host and
    the path under ``prefix``."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=f"{proxy.base_url}{prefix}",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=AWS_SECRET_ACCESS_KEY,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=30),
    )


def test_boto3_signed_requests_go_upstream_as_signed(root_proxy: Proxy, cloud: CloudMock) -> None:
    """A SigV4-signed InvokeModel whose images the passes would retire, a ConverseStream
    and a Converse, on a route on `/`: each reaches the mock byte for byte with the host it was
    signed for, and the mock's signature check (botocore's signer, as AWS checks) passes."""
    cloud.requests.clear()
    log = root_proxy.request_log()
    client = boto3_bedrock(root_proxy)
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": anthropic_session(21, LARGE)})
    resp = client.invoke_model(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
    assert json.loads(resp["body"].read())["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
    rec = cloud.last("POST", "/invoke")
    assert rec.signature_verified is True, rec.auth_error
    assert rec.body == body.encode()
    line = log.one("/invoke")
    assert (line["route"], line["dialect"], line["model"], line["body"]) == ("bedrock", "anthropic", CLAUDE_BEDROCK, "signed")
    assert line["images_retired"] == 11  # what the passes would have done

    converse = client.converse(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Say hello."}]}])
    assert converse["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    assert cloud.last("POST", "/converse").signature_verified is True
    stream = client.converse_stream(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Say hello."}]}])
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in stream["stream"] if "contentBlockDelta" in e)
    assert text == DEFAULT_REPLY
    assert cloud.last("POST", "/converse-stream").signature_verified is True


def test_a_signed_request_under_a_prefix_cannot_verify(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    """The same request through the `/bedrock` route: the client signed `/bedrock/model/…`, the
    upstream gets `/model/…`, and AWS's check refuses it (403 InvalidSignatureException) — why
    a route that forwards signed requests must be on `/` when the proxy has no AWS credentials
    of its own."""
    import botocore.exceptions

    client = boto3_bedrock(proxy, "/bedrock")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.converse(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert cloud.last("POST", "/converse").signature_verified is False


def test_anthropic_bedrock_api_key_gets_the_passes(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    """Claude's InvokeModel with a Bedrock API key (Bearer): the Anthropic passes run on the
    body (the 11 oldest of 21 screenshots retired), the model is the path's."""
    from anthropic import AnthropicBedrock

    client = AnthropicBedrock(
        aws_region=AWS_REGION, base_url=f"{proxy.base_url}/bedrock", api_key=BEDROCK_API_KEY, max_retries=0, timeout=30.0
    )
    msg = client.messages.create(model=CLAUDE_BEDROCK, max_tokens=64, messages=anthropic_session(21, LARGE))
    assert "".join(b.text for b in msg.content if b.type == "text") == DEFAULT_REPLY
    rec = cloud.last("POST", "/invoke")
    assert rec.auth_scheme == "bearer"
    sent = rec.json()
    assert "model" not in sent
    assert_retired_text(sent["messages"][anthropic_carrier_index(0)]["content"][0]["content"][1]["text"])
    line = log.one("/invoke")
    assert (line["route"], line["model"], line["body"], line["images_retired"]) == ("bedrock", CLAUDE_BEDROCK, "rewritten", 11)
    assert line["cache_read_tokens"] == 5120


def test_anthropic_bedrock_stream_is_read(proxy: Proxy, cloud: CloudMock, log: RequestLog) -> None:
    """InvokeModelWithResponseStream answers AWS event-stream frames whose `chunk` events carry
    Claude's events as base64: the client gets the frames byte for byte, and the proxy reads a
    decoded copy (usage, the turn's signed thinking, restored when the agent drops it)."""
    from anthropic import AnthropicBedrock

    client = AnthropicBedrock(
        aws_region=AWS_REGION, base_url=f"{proxy.base_url}/bedrock", api_key=BEDROCK_API_KEY, max_retries=0, timeout=30.0
    )
    with client.messages.stream(
        model=CLAUDE_BEDROCK, max_tokens=64, messages=[{"role": "user", "content": "Hi."}], extra_headers={"x-mock-reasoning": "1"}
    ) as stream:
        final = stream.get_final_message()
    kinds = [b.type for b in final.content]
    assert kinds[:2] == ["thinking", "redacted_thinking"], kinds
    rec = cloud.last("POST", "/invoke-with-response-stream")
    assert rec.response_header("content-type") == "application/vnd.amazon.eventstream"
    line = log.one("/invoke-with-response-stream")
    assert (line["cache_read_tokens"], line["output_tokens"]) == (5120, 7), line
    assert line["turn_captured"] is True and line["reasoning_seen"] == 2, line
    # The agent sends the turn back without its thinking: the proxy restores it.
    kept = [b.model_dump(exclude_none=True) for b in final.content if b.type not in ("thinking", "redacted_thinking")]
    client.messages.create(
        model=CLAUDE_BEDROCK,
        max_tokens=64,
        messages=[{"role": "user", "content": "Hi."}, {"role": "assistant", "content": kept}, {"role": "user", "content": "Again."}],
    )
    sent = cloud.last("POST", "/invoke").json()
    assert [b["type"] for b in sent["messages"][1]["content"]][:2] == ["thinking", "redacted_thinking"]


# ---------------------------------------------------------------------------------------------
# Re-signing: the proxy's own AWS credentials (`[routes.aws]`, docs/providers.md#signing-bedrock-requests)
# ---------------------------------------------------------------------------------------------

OTHER_KEY_ID, OTHER_SECRET = "AKIAOTHERCLIENTEXAMPLE", "otherClientSecretEXAMPLE/abc+def"


@pytest.fixture(scope="module")
def signing_proxy(cloud: CloudMock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """A proxy with AWS credentials of its own (the mock's key, in its environment): route
    `/bedrock` re-signs what was signed with that key; route `/gateway` (`sign_all`) signs
    every request."""
    routes = f"""
[[routes]]
name = "bedrock"
prefix = "/bedrock"
upstream = "{cloud.url}"
provider = "bedrock"
[routes.aws]
region = "{AWS_REGION}"

[[routes]]
name = "gateway"
prefix = "/gateway"
upstream = "{cloud.url}"
provider = "bedrock"
[routes.aws]
region = "{AWS_REGION}"
sign_all = true
"""
    env = {"AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET_ACCESS_KEY}
    with launch_proxy(tmp_path_factory.mktemp("bedrock-signing"), routes, env_extra=env) as p:
        yield p


def other_boto3(proxy: Proxy, prefix: str) -> Any:
    """boto3 signing with credentials the proxy does not hold (the mock knows them)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=f"{proxy.base_url}{prefix}",
        aws_access_key_id=OTHER_KEY_ID,
        aws_secret_access_key=OTHER_SECRET,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=30),
    )


def test_boto3_signed_with_the_proxy_s_key_is_rewritten_and_resigned(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """boto3 signs for the proxy's host and `/bedrock/model/…` with the key the proxy holds: the
    proxy checks that signature, retires the old screenshots, and signs the rewritten body for
    the upstream's host and path; the mock's check (botocore's, as AWS does it) passes. The
    same for the streamed InvokeModel, Converse and ConverseStream."""
    cloud.requests.clear()
    log = signing_proxy.request_log()
    client = boto3_bedrock(signing_proxy, "/bedrock")
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": anthropic_session(21, LARGE)})
    resp = client.invoke_model(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
    assert json.loads(resp["body"].read())["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
    rec = cloud.last("POST", "/invoke")
    assert rec.signature_verified is True, rec.auth_error
    assert rec.path == "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
    sent = rec.json()
    assert_retired_text(sent["messages"][anthropic_carrier_index(0)]["content"][0]["content"][1]["text"])
    assert rec.header("host") == cloud.url.removeprefix("http://")
    line = log.one("/invoke")
    assert (line["body"], line["upstream_auth"], line["images_retired"]) == ("rewritten", "resigned", 11)

    stream = client.invoke_model_with_response_stream(modelId=CLAUDE_BEDROCK, body=body, contentType="application/json")
    kinds = [json.loads(e["chunk"]["bytes"])["type"] for e in stream["body"] if "chunk" in e]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert cloud.last("POST", "/invoke-with-response-stream").signature_verified is True
    assert log.one("/invoke-with-response-stream")["upstream_auth"] == "resigned"

    messages = [{"role": "user", "content": [{"text": "Say hello."}]}]
    converse = client.converse(modelId=CLAUDE_BEDROCK, messages=messages)
    assert converse["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    assert cloud.last("POST", "/converse").signature_verified is True
    events = client.converse_stream(modelId=CLAUDE_BEDROCK, messages=messages)["stream"]
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
    assert text == DEFAULT_REPLY
    assert cloud.last("POST", "/converse-stream").signature_verified is True
    assert [l["upstream_auth"] for l in log.wait("/converse", 1) + log.wait("/converse-stream", 1)] == ["resigned"] * 2


def test_the_one_retry_is_signed_again(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """Bedrock refuses `service_tier` (`extraneous key [service_tier] is not permitted`): the
    proxy learns it and retries once without it, and the retry's new body carries a new
    signature that verifies."""
    cloud.requests.clear()
    log = signing_proxy.request_log()
    cloud.reject_fields = {"service_tier"}
    try:
        client = boto3_bedrock(signing_proxy, "/bedrock")
        body = json.dumps(
            {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "service_tier": "auto", "messages": [{"role": "user", "content": "hi"}]}
        )
        resp = client.invoke_model(modelId="anthropic.claude-haiku-4-5-20251001-v1:0", body=body, contentType="application/json")
        assert json.loads(resp["body"].read())["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
    finally:
        cloud.reject_fields = set()
    first, retry = [r for r in cloud.requests if r.path.endswith("/invoke")]
    assert first.signature_verified is True and retry.signature_verified is True
    assert "service_tier" in first.json() and "service_tier" not in retry.json()
    assert first.header("authorization") != retry.header("authorization")
    line = log.one("/invoke")
    assert (line["retried_without"], line["upstream_auth"]) == ("param:service_tier", "resigned")


def test_other_credentials_go_upstream_as_signed(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """Signed with a key the proxy does not hold: the proxy cannot check the signature, so it
    lends nothing; the request goes as signed (its host, its bytes), and AWS's check of the
    cut path refuses it. A `sign_all` route signs it with the proxy's key instead."""
    import botocore.exceptions

    cloud.requests.clear()
    cloud.aws_credentials[OTHER_KEY_ID] = (OTHER_SECRET, None)
    log = signing_proxy.request_log()
    messages = [{"role": "user", "content": [{"text": "hi"}]}]
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            other_boto3(signing_proxy, "/bedrock").converse(modelId=CLAUDE_BEDROCK, messages=messages)
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        rec = cloud.last("POST", "/converse")
        assert rec.signature_verified is False
        assert rec.header("authorization").startswith(f"AWS4-HMAC-SHA256 Credential={OTHER_KEY_ID}/")
        assert log.one("/converse")["upstream_auth"] == "as_signed"
        assert "signed with other AWS credentials than the proxy's" in signing_proxy.logs()

        other_boto3(signing_proxy, "/gateway").converse(modelId=CLAUDE_BEDROCK, messages=messages)
        rec = cloud.last("POST", "/converse")
        assert rec.signature_verified is True
        assert rec.header("authorization").startswith(f"AWS4-HMAC-SHA256 Credential={AWS_ACCESS_KEY_ID}/")
    finally:
        del cloud.aws_credentials[OTHER_KEY_ID]


def test_unsigned_requests_are_signed_on_a_sign_all_route_only(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """An InvokeModel with no Authorization at all (Claude Code with
    `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`): on the `sign_all` route the proxy signs it with its own
    key, after the passes; on the other route it goes as sent and AWS refuses it (403)."""
    cloud.requests.clear()
    log = signing_proxy.request_log()
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": anthropic_session(21, LARGE)}).encode()
    path = f"/model/{CLAUDE_BEDROCK}/invoke"
    host = signing_proxy.base_url.removeprefix("http://")
    for prefix, status in (("/gateway", 200), ("/bedrock", 403)):
        conn = http.client.HTTPConnection(host, timeout=30)
        conn.request("POST", prefix + path, body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.status == status, prefix
    signed, unsigned = [r for r in cloud.requests if r.path.endswith("/invoke")]
    assert signed.signature_verified is True and signed.auth_scheme == "sigv4"
    assert_retired_text(signed.json()["messages"][anthropic_carrier_index(0)]["content"][0]["content"][1]["text"])
    assert unsigned.header("authorization") is None
    lines = log.wait("/invoke", 2)
    assert [(l["route"], l["upstream_auth"]) for l in lines] == [("gateway", "signed_by_proxy"), ("bedrock", "")]


def test_a_stale_signature_is_not_lent_the_proxy_s_key(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """A request signed with the proxy's key 10 minutes ago (captured and sent again): AWS
    would refuse it, and so the proxy does not sign it anew; it goes as signed and is refused."""
    import datetime
    from unittest import mock

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    cloud.requests.clear()
    log = signing_proxy.request_log()
    host = signing_proxy.base_url.removeprefix("http://")
    path = "/bedrock/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = AWSRequest(method="POST", url=f"http://{host}{path}", data=body, headers={"content-type": "application/json"})
    then = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(minutes=10)
    with mock.patch("botocore.auth.get_current_datetime", return_value=then):
        SigV4Auth(Credentials(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), "bedrock", AWS_REGION).add_auth(req)
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.request("POST", path, body=body, headers=dict(req.headers.items()))
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 403
    assert cloud.last("POST", "/invoke").signature_verified is False
    assert log.one("/invoke")["upstream_auth"] == "as_signed"
    assert "from the proxy's clock" in signing_proxy.logs()


# ---------------------------------------------------------------------------------------------
# Vertex AI with the proxy's own token (`[routes.google] service_account`)
# ---------------------------------------------------------------------------------------------

SA_EMAIL = "cachekeeper-e2e@my-proj.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def vertex_sa_proxy(cloud: CloudMock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """Route `/vertex-sa` adds the token of a service account the mock's token endpoint knows;
    route `/vertex-stranger` one it does not (no token can be had)."""
    tmp = tmp_path_factory.mktemp("vertex-sa")
    write_google_service_account(tmp / "sa.json", SA_EMAIL, cloud, known=True)
    write_google_service_account(tmp / "stranger.json", "stranger@other.iam.gserviceaccount.com", cloud, known=False)
    routes = f"""
[[routes]]
name = "vertex-sa"
prefix = "/vertex-sa"
upstream = "{cloud.url}"
provider = "vertex"
[routes.google]
service_account = "sa.json"

[[routes]]
name = "vertex-stranger"
prefix = "/vertex-stranger"
upstream = "{cloud.url}"
provider = "vertex"
[routes.google]
service_account = "stranger.json"
"""
    with launch_proxy(tmp, routes) as p:
        yield p


def _raw_predict(proxy: Proxy, prefix: str, headers: dict[str, str]) -> tuple[int, bytes]:
    path = f"{prefix}/v1/projects/{VERTEX_PROJECT}/locations/{VERTEX_LOCATION}/publishers/anthropic/models/{CLAUDE_VERTEX}:rawPredict"
    body = json.dumps({"anthropic_version": "vertex-2023-10-16", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi."}]})
    conn = http.client.HTTPConnection(proxy.base_url.removeprefix("http://"), timeout=30)
    conn.request("POST", path, body=body, headers={"content-type": "application/json", **headers})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def test_vertex_requests_without_a_credential_get_the_route_s_token(vertex_sa_proxy: Proxy, cloud: CloudMock) -> None:
    """An agent told to skip its auth (Claude Code with `CLAUDE_CODE_SKIP_VERTEX_AUTH=1`) sends no
    credential: the route's service account's token (fetched once at startup through the
    JWT-bearer grant the mock checks) goes with it. A request with its own token keeps it. A
    route whose account gets no token answers the proxy's 503, saying why."""
    cloud.requests.clear()
    log = vertex_sa_proxy.request_log()
    issued = cloud.google_tokens_issued
    assert issued >= 1, "the token is fetched at startup"
    for _ in range(2):
        status, data = _raw_predict(vertex_sa_proxy, "/vertex-sa", {})
        assert status == 200, data
        rec = cloud.last("POST", ":rawPredict")
        assert rec.header("authorization") == f"Bearer {VERTEX_ACCESS_TOKEN}"
    assert cloud.google_tokens_issued == issued, "kept, not fetched per request"
    assert [l["upstream_auth"] for l in log.wait(":rawPredict", 2)] == ["proxy_token"] * 2

    status, _ = _raw_predict(vertex_sa_proxy, "/vertex-sa", {"authorization": f"Bearer {VERTEX_ACCESS_TOKEN}"})
    assert status == 200
    assert log.wait(":rawPredict", 3)[-1]["upstream_auth"] == ""

    status, data = _raw_predict(vertex_sa_proxy, "/vertex-stranger", {})
    assert status == 503
    err = json.loads(data)["error"]
    assert "adds its own Google access token" in err["message"] and "token request failed" in err["message"], err
    # The token endpoint's refusal is in the proxy's log (gcp_auth's warning), for the operator.
    assert "invalid_grant" in vertex_sa_proxy.logs()
    # The proxy's logs hold no token and no key.
    assert VERTEX_ACCESS_TOKEN not in vertex_sa_proxy.logs()
    assert "PRIVATE KEY" not in vertex_sa_proxy.logs()


def test_vertex_token_is_renewed_before_it_expires_and_never_sent_expired(tmp_path: Path) -> None:
    """Tokens that live 4 s: each is renewed halfway through its life by a fetch of its own (an
    account asked again would answer the token it keeps until under 20 s remain), so requests
    keep getting through. When the token endpoint stops knowing the account, the kept token is
    sent until it expires, then never: requests without a credential get the 503 `no_token`."""
    import time

    mock = CloudMock().start()
    try:
        mock.google_token_expires_in = 4
        write_google_service_account(tmp_path / "sa.json", SA_EMAIL, mock, known=True)
        routes = f"""
[[routes]]
name = "vertex-sa"
prefix = "/vertex-sa"
upstream = "{mock.url}"
provider = "vertex"
[routes.google]
service_account = "sa.json"
"""
        with launch_proxy(tmp_path, routes) as p:
            deadline = time.monotonic() + 10
            while mock.google_tokens_issued < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert mock.google_tokens_issued >= 3, p.logs()
            status, data = _raw_predict(p, "/vertex-sa", {})
            assert status == 200, data

            mock.google_service_accounts.clear()
            time.sleep(4.5)
            status, data = _raw_predict(p, "/vertex-sa", {})
            assert status == 503, data
            err = json.loads(data)["error"]
            assert "the token expired and renewing it failed" in err["message"], err
            # The token endpoint's refusal is in the proxy's log (gcp_auth's warning).
            assert "invalid_grant" in p.logs()
    finally:
        mock.stop()


def test_signed_converse_is_rewritten_resigned_and_retried_signed(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """boto3's SigV4-signed `converse` with 21 screenshots, with the key the proxy holds: the
    Converse passes retire the 11 oldest and place cache points, the rewritten body is signed
    again and verifies; a key of `additionalModelRequestFields` the model refuses earns the one
    retry, signed again over its own body."""
    from test_converse import SYSTEM, TOOLS, carrier, session

    from helpers import fake_png

    cloud.requests.clear()
    log = signing_proxy.request_log()
    client = boto3_bedrock(signing_proxy, "/bedrock")
    shots = [fake_png(*LARGE, seed=i) for i in range(21)]
    resp = client.converse(modelId=CLAUDE_BEDROCK, system=SYSTEM, toolConfig=TOOLS, messages=session(shots))
    assert resp["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    rec = cloud.last("POST", "/converse")
    assert rec.signature_verified is True, rec.auth_error
    assert_retired_text(carrier(rec.json(), 0)[1]["text"])
    line = log.one("/converse")
    assert (line["dialect"], line["body"], line["images_retired"], line["upstream_auth"]) == ("converse", "rewritten", 11, "resigned")

    cloud.reject_fields = {"service_tier"}
    try:
        log.mark()
        cloud.requests.clear()
        fields = {"service_tier": "auto"}
        client.converse(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "hi"}]}], additionalModelRequestFields=fields)
    finally:
        cloud.reject_fields = set()
    first, retry = [r for r in cloud.requests if r.path.endswith("/converse")]
    assert first.signature_verified is True and retry.signature_verified is True
    assert "service_tier" in first.json()["additionalModelRequestFields"]
    assert "service_tier" not in retry.json().get("additionalModelRequestFields", {})
    assert log.one("/converse")["retried_without"] == "param:service_tier"


def test_an_unchecked_signature_scopes_nothing(signing_proxy: Proxy, cloud: CloudMock) -> None:
    """A client signed with the proxy's key has a Converse turn with reasoning; its
    reasoningContent is captured under its access key id. A request with a made-up signature
    naming that same key id, on the `sign_all` route, is signed by the proxy (its signature
    cannot be checked, so its key id is only a claim): it is scoped as carrying no credential,
    and the first client's reasoning is not restored into it. The first client's own echo is."""
    from test_converse import with_headers

    cloud.requests.clear()
    log = signing_proxy.request_log()
    client = with_headers(boto3_bedrock(signing_proxy, "/bedrock"), {"x-mock-reasoning": "1"})
    question = [{"role": "user", "content": [{"text": "Which file is largest?"}]}]
    first = client.converse(modelId=CLAUDE_BEDROCK, messages=question)
    assert "reasoningContent" in first["output"]["message"]["content"][0]
    assert log.one("/converse")["turn_captured"] is True
    echoed = question + [
        {"role": "assistant", "content": [{"text": DEFAULT_REPLY}]},
        {"role": "user", "content": [{"text": "And again."}]},
    ]

    # The forger: the victim's key id, a signature of zeros, on the route that signs all.
    host = signing_proxy.base_url.removeprefix("http://")
    import datetime

    amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    forged = (
        f"AWS4-HMAC-SHA256 Credential={AWS_ACCESS_KEY_ID}/{amz_date[:8]}/{AWS_REGION}/bedrock/aws4_request, "
        f"SignedHeaders=content-type;host;x-amz-date, Signature={'0' * 64}"
    )
    body = json.dumps({"messages": echoed}).encode()
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.request(
        "POST",
        f"/gateway/model/{CLAUDE_BEDROCK}/converse",
        body=body,
        headers={"content-type": "application/json", "x-amz-date": amz_date, "authorization": forged},
    )
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 200
    rec = cloud.last("POST", "/converse")
    assert rec.signature_verified is True  # signed by the proxy
    assert [list(b) for b in rec.json()["messages"][1]["content"]] == [["text"]], "nothing restored"
    line = log.wait("/converse", 2)[-1]
    assert (line["route"], line["upstream_auth"], line["restored_thinking"]) == ("gateway", "signed_by_proxy", 0)

    # The key's own client sends the turn back: its reasoning is restored.
    client.converse(modelId=CLAUDE_BEDROCK, messages=echoed)
    restored = cloud.last("POST", "/converse").json()["messages"][1]["content"]
    assert [next(iter(b)) for b in restored] == ["reasoningContent", "reasoningContent", "text"], restored
