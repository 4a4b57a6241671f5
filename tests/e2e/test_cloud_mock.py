"""The cloud mocks (cloud_mock.py) driven DIRECTLY by the official clients, no proxy: boto3's
bedrock-runtime client, anthropic's AnthropicBedrock / AnthropicVertex, openai's AzureOpenAI and
the v1 API, google-genai on Vertex AI. What the clients parse proves the mock speaks each cloud's
wire; what the mock recorded proves what the clients sent (and that SigV4 verified).

No proxy and no cachekeeper binary are needed: these tests run with the rest of the suite
(``pytest tests/e2e``) and alone (``pytest tests/e2e/test_cloud_mock.py``).
"""

from __future__ import annotations

import base64
import datetime
import http.client
import json
from typing import Any, Iterator

import pytest
from anthropic._constants import ANTHROPIC_API_VERSION

import cloud_mock
from cloud_mock import (
    AWS_ACCESS_KEY_ID,
    AWS_MISSING_TOKEN,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    AWS_SIGNATURE_MISMATCH,
    AWS_UNRECOGNIZED_CLIENT,
    AZURE_ACCESS_DENIED,
    AZURE_AD_TOKEN,
    AZURE_API_KEY,
    AZURE_API_VERSION,
    AZURE_FILTER_RESULTS,
    BEDROCK_API_KEY,
    BEDROCK_BAD_API_KEY,
    BEDROCK_CONVERSE_USAGE,
    BEDROCK_ERROR_NAMESPACE,
    BEDROCK_ERROR_TYPES,
    BEDROCK_LATENCY_MS,
    REASONING_TEXT,
    VERTEX_ACCESS_TOKEN,
    VERTEX_INVALID_CREDENTIAL,
    VERTEX_LOCATION,
    VERTEX_MISSING_CREDENTIAL,
    VERTEX_PROJECT,
    CloudMock,
    bedrock_extraneous_keys_message,
)
from mock_upstream import (
    ANTHROPIC_REDACTED,
    ANTHROPIC_SIGNATURE,
    ANTHROPIC_USAGE,
    DEFAULT_REPLY,
    GEMINI_USAGE,
    OPENAI_USAGE,
    RESPONSES_USAGE,
    _pieces,
)

CLAUDE_BEDROCK = "anthropic.claude-sonnet-4-5-20250929-v1:0"
# an application inference profile ARN: '/' and ':' inside the path segment
CLAUDE_PROFILE_ARN = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/e2eprofile01"
CLAUDE_VERTEX = "claude-sonnet-4-5@20250929"
GEMINI_MODEL = "gemini-2.5-flash"
AZURE_DEPLOYMENT = "gpt-4o-e2e"
ANTHROPIC_BEDROCK_VERSION = "bedrock-2023-05-31"  # https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages.html
USER_TURN = [{"role": "user", "content": "Say hello."}]
REPLY_PIECES = 3  # mock_upstream streams the reply in 3 deltas


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cloud_server() -> Iterator[CloudMock]:
    mock = CloudMock().start()
    yield mock
    mock.stop()


@pytest.fixture
def cloud(cloud_server: CloudMock, monkeypatch: pytest.MonkeyPatch) -> CloudMock:
    """The cloud mock, emptied, with no scripted rejections; the environment cleared of what
    would send the clients elsewhere or change their credentials."""
    for var in (
        "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
        "AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL",
        "GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION",
        "OPENAI_BASE_URL", "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent-e2e-aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent-e2e-aws-credentials")
    cloud_server.clear()
    cloud_server.reject_fields.clear()
    return cloud_server


def bedrock(cloud: CloudMock, headers: dict[str, str] | None = None, **creds: Any) -> Any:
    """boto3's bedrock-runtime client on the mock, SigV4 with the test credentials, one attempt."""
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {
        "aws_access_key_id": AWS_ACCESS_KEY_ID,
        "aws_secret_access_key": AWS_SECRET_ACCESS_KEY,
    }
    kwargs.update(creds)
    client = boto3.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=cloud.url,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=30),
        **kwargs,
    )
    if headers:
        add_headers(client, headers)
    return client


def add_headers(client: Any, headers: dict[str, str]) -> None:
    """Add request headers (the mock's knobs) before signing, as any header a caller adds."""

    def add(request: Any, **_: Any) -> None:
        for k, v in headers.items():
            request.headers[k] = v

    client.meta.events.register_first("before-sign.bedrock-runtime.*", add)


def raw_post(cloud: CloudMock, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", cloud.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"content-type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def decode_frames(data: bytes) -> list[Any]:
    """botocore's own event-stream decoder over a whole body."""
    from botocore.eventstream import EventStreamBuffer

    buf = EventStreamBuffer()
    buf.add_data(data)
    return list(buf)


def anthropic_text(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


# ---------------------------------------------------------------------------------------------
# the event-stream encoder, against botocore's decoder
# ---------------------------------------------------------------------------------------------


def test_eventstream_frames_decode_with_botocore() -> None:
    from botocore.eventstream import EventStreamBuffer

    ev = cloud_mock.event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hé"}})
    exc = cloud_mock.exception_frame("modelStreamErrorException", "stream broke")
    buf = EventStreamBuffer()
    # fed in awkward pieces: the prelude, headers and payload each split across feeds
    whole = ev + exc
    for i in range(0, len(whole), 7):
        buf.add_data(whole[i : i + 7])
    first, second = list(buf)
    assert first.headers == {":event-type": "contentBlockDelta", ":content-type": "application/json", ":message-type": "event"}
    assert json.loads(first.payload) == {"contentBlockIndex": 0, "delta": {"text": "Hé"}}
    assert first.prelude.total_length == len(ev)
    assert first.prelude.headers_length == len(ev) - 12 - len(first.payload) - 4
    assert second.headers == {
        ":exception-type": "modelStreamErrorException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    assert json.loads(second.payload) == {"message": "stream broke"}
    # a flipped payload byte fails botocore's message CRC check
    from botocore.eventstream import ChecksumMismatch

    bad = bytearray(ev)
    bad[-6] ^= 0x01
    broken = EventStreamBuffer()
    broken.add_data(bytes(bad))
    with pytest.raises(ChecksumMismatch):
        list(broken)


def test_bedrock_error_types_are_the_service_models() -> None:
    """Each status the mock maps is the HTTP status botocore's bedrock-runtime model gives that
    exception, and every such exception is one Converse or InvokeModel declares."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    declared = {e.name for op in ("Converse", "InvokeModel") for e in model.operation_model(op).error_shapes}
    for status, name in BEDROCK_ERROR_TYPES.items():
        shape = model.shape_for(name)
        assert shape.metadata["error"]["httpStatusCode"] == status, name
        assert name in declared, name


# ---------------------------------------------------------------------------------------------
# Bedrock: boto3
# ---------------------------------------------------------------------------------------------


def test_boto3_converse(cloud: CloudMock) -> None:
    client = bedrock(cloud)
    resp = client.converse(
        modelId=CLAUDE_BEDROCK,
        messages=[{"role": "user", "content": [{"text": "Say hello."}]}],
        inferenceConfig={"maxTokens": 64},
    )
    assert resp["output"]["message"] == {"role": "assistant", "content": [{"text": DEFAULT_REPLY}]}
    assert resp["stopReason"] == "end_turn"
    assert resp["usage"] == BEDROCK_CONVERSE_USAGE
    assert resp["usage"]["totalTokens"] == 5387
    assert resp["metrics"] == {"latencyMs": BEDROCK_LATENCY_MS}

    rec = cloud.last("POST", "/converse")
    assert rec.path == "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"  # boto3 encodes ':'
    assert rec.model_id == CLAUDE_BEDROCK
    assert rec.operation == "converse"
    assert rec.auth_scheme == "sigv4"
    assert rec.signature_verified is True
    assert rec.header("host") == f"127.0.0.1:{cloud.port}"
    assert rec.header("authorization").startswith(
        f"AWS4-HMAC-SHA256 Credential={AWS_ACCESS_KEY_ID}/{rec.header('x-amz-date')[:8]}/{AWS_REGION}/bedrock/aws4_request, "
    )
    assert rec.json() == {
        "messages": [{"role": "user", "content": [{"text": "Say hello."}]}],
        "inferenceConfig": {"maxTokens": 64},
    }
    assert rec.response_header("x-amzn-RequestId") is not None


def test_boto3_converse_arn_model_id_verifies(cloud: CloudMock) -> None:
    """An ARN's '/' and ':' are percent-encoded in the path; SigV4's canonical URI encodes the
    path again (double encoding, as AWS does outside S3), and the mock's check agrees."""
    resp = bedrock(cloud).converse(modelId=CLAUDE_PROFILE_ARN, messages=[{"role": "user", "content": [{"text": "Hi"}]}])
    assert resp["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    rec = cloud.last("POST", "/converse")
    assert rec.path == (
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fe2eprofile01/converse"
    )
    assert rec.model_id == CLAUDE_PROFILE_ARN
    assert rec.signature_verified is True


def test_boto3_converse_reasoning_and_knobs(cloud: CloudMock) -> None:
    client = bedrock(cloud, {"x-mock-reasoning": "1", "x-mock-reply": "Bonjour."})
    resp = client.converse(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Hi"}]}])
    assert resp["output"]["message"]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": REASONING_TEXT, "signature": ANTHROPIC_SIGNATURE}}},
        {"reasoningContent": {"redactedContent": b"mock redacted reasoning 0001"}},
        {"text": "Bonjour."},
    ]
    # the knob headers were signed like any other header and the signature still verifies
    rec = cloud.last("POST", "/converse")
    assert "x-mock-reasoning" in rec.header("authorization").split("SignedHeaders=")[1].split(",")[0].split(";")
    assert rec.signature_verified is True

    none = bedrock(cloud, {"x-mock-usage": "none"}).converse(
        modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Hi"}]}]
    )
    assert "usage" not in none


def test_boto3_converse_stream(cloud: CloudMock) -> None:
    resp = bedrock(cloud, {"x-mock-gate": "converse-first"}).converse_stream(
        modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Say hello."}]}]
    )
    events: list[dict[str, Any]] = []
    for ev in resp["stream"]:
        if not events:
            # the mock holds the rest of the stream until the first event has reached the client
            cloud.gate("converse-first").set()
        events.append(ev)
    kinds = [next(iter(e)) for e in events]
    assert kinds == ["messageStart"] + ["contentBlockDelta"] * REPLY_PIECES + ["contentBlockStop", "messageStop", "metadata"]
    assert events[0]["messageStart"] == {"role": "assistant"}
    assert "".join(e["contentBlockDelta"]["delta"]["text"] for e in events[1:4]) == DEFAULT_REPLY
    assert all(e["contentBlockDelta"]["contentBlockIndex"] == 0 for e in events[1:4])
    assert events[4]["contentBlockStop"] == {"contentBlockIndex": 0}
    assert events[5]["messageStop"] == {"stopReason": "end_turn"}
    assert events[6]["metadata"] == {"usage": BEDROCK_CONVERSE_USAGE, "metrics": {"latencyMs": BEDROCK_LATENCY_MS}}

    rec = cloud.last("POST", "/converse-stream")
    assert cloud.wait_completed(rec)
    assert rec.gate_released is True
    assert rec.signature_verified is True
    assert rec.response_header("content-type") == "application/vnd.amazon.eventstream"
    assert rec.events_sent == 7  # one HTTP chunk per frame
    frames = decode_frames(bytes(rec.response_body))
    assert [f.headers[":event-type"] for f in frames] == kinds
    # every event carries the `p` padding member, which the client's parser drops
    assert all(isinstance(json.loads(f.payload)["p"], str) for f in frames)


def test_boto3_converse_stream_reasoning(cloud: CloudMock) -> None:
    resp = bedrock(cloud, {"x-mock-reasoning": "1"}).converse_stream(
        modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Hi"}]}]
    )
    deltas = [(e["contentBlockDelta"]["contentBlockIndex"], e["contentBlockDelta"]["delta"]) for e in resp["stream"] if "contentBlockDelta" in e]
    reasoning = [d["reasoningContent"] for i, d in deltas if i == 0]
    assert "".join(r.get("text", "") for r in reasoning) == REASONING_TEXT
    assert reasoning[-1] == {"signature": ANTHROPIC_SIGNATURE}
    assert [d for i, d in deltas if i == 1] == [{"reasoningContent": {"redactedContent": b"mock redacted reasoning 0001"}}]
    assert "".join(d["text"] for i, d in deltas if i == 2) == DEFAULT_REPLY


def test_boto3_stream_knobs_split_and_mid_stream_exception(cloud: CloudMock) -> None:
    from botocore.exceptions import EventStreamError

    msgs = [{"role": "user", "content": [{"text": "Hi"}]}]
    # frames cut into 5-byte HTTP chunks regardless of frame boundaries: botocore reassembles them
    resp = bedrock(cloud, {"x-mock-split": "5"}).converse_stream(modelId=CLAUDE_BEDROCK, messages=msgs)
    events = list(resp["stream"])
    assert "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e) == DEFAULT_REPLY
    rec = cloud.last("POST", "/converse-stream")
    assert cloud.wait_completed(rec)
    assert rec.events_sent == -(-len(rec.response_body) // 5)

    # an exception frame after half the events (7 frames: 3 sent, then the exception)
    resp = bedrock(cloud, {"x-mock-stream-error": "modelStreamErrorException"}).converse_stream(
        modelId=CLAUDE_BEDROCK, messages=msgs
    )
    got: list[str] = []
    with pytest.raises(EventStreamError) as e:
        for ev in resp["stream"]:
            got.append(next(iter(ev)))
    assert got == ["messageStart", "contentBlockDelta", "contentBlockDelta"]
    assert e.value.response["Error"] == {
        "Code": "modelStreamErrorException",
        "Message": "mock upstream: modelStreamErrorException mid-stream",
    }
    frames = decode_frames(bytes(cloud.last("POST", "/converse-stream").response_body))
    assert frames[-1].headers[":message-type"] == "exception"


def test_boto3_invoke_model_anthropic(cloud: CloudMock) -> None:
    body = {"anthropic_version": ANTHROPIC_BEDROCK_VERSION, "max_tokens": 64, "messages": USER_TURN}
    resp = bedrock(cloud).invoke_model(modelId=CLAUDE_BEDROCK, body=json.dumps(body), contentType="application/json")
    msg = json.loads(resp["body"].read())
    assert msg["type"] == "message"
    assert msg["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
    assert msg["usage"] == ANTHROPIC_USAGE
    assert resp["contentType"] == "application/json"
    h = resp["ResponseMetadata"]["HTTPHeaders"]
    assert h["x-amzn-bedrock-input-token-count"] == "12"
    assert h["x-amzn-bedrock-output-token-count"] == "7"
    assert h["x-amzn-bedrock-cache-read-input-token-count"] == "5120"
    assert h["x-amzn-bedrock-cache-write-input-token-count"] == "248"
    rec = cloud.last("POST", "/invoke")
    assert rec.operation == "invoke" and rec.model_id == CLAUDE_BEDROCK
    assert rec.signature_verified is True
    assert rec.json() == body


def test_boto3_invoke_model_with_response_stream(cloud: CloudMock) -> None:
    body = {"anthropic_version": ANTHROPIC_BEDROCK_VERSION, "max_tokens": 64, "messages": USER_TURN}
    resp = bedrock(cloud).invoke_model_with_response_stream(modelId=CLAUDE_BEDROCK, body=json.dumps(body))
    events = [json.loads(e["chunk"]["bytes"]) for e in resp["body"]]
    assert [e["type"] for e in events] == (
        ["message_start", "content_block_start"] + ["content_block_delta"] * REPLY_PIECES
        + ["content_block_stop", "message_delta", "message_stop"]
    )  # no `ping`: Bedrock sends none
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == DEFAULT_REPLY
    assert events[0]["message"]["usage"]["cache_read_input_tokens"] == 5120
    assert events[-2]["usage"] == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 248,
        "cache_read_input_tokens": 5120,
        "output_tokens": 7,
    }
    assert events[-1]["amazon-bedrock-invocationMetrics"] == {
        "inputTokenCount": 12,
        "outputTokenCount": 7,
        "invocationLatency": BEDROCK_LATENCY_MS,
        "firstByteLatency": cloud_mock.BEDROCK_FIRST_BYTE_MS,
        "cacheReadInputTokenCount": 5120,
        "cacheWriteInputTokenCount": 248,
    }
    assert resp["contentType"] == "application/json"  # X-Amzn-Bedrock-Content-Type
    rec = cloud.last("POST", "/invoke-with-response-stream")
    assert cloud.wait_completed(rec)
    assert rec.signature_verified is True
    frames = decode_frames(bytes(rec.response_body))
    assert {f.headers[":event-type"] for f in frames} == {"chunk"}
    assert len(frames) == rec.events_sent == len(events)


# ---------------------------------------------------------------------------------------------
# Bedrock: auth refusals
# ---------------------------------------------------------------------------------------------


def test_body_changed_after_signing_is_refused(cloud: CloudMock) -> None:
    from botocore.exceptions import ClientError

    client = bedrock(cloud)

    def tamper(request: Any, **_: Any) -> None:
        # same length, other bytes: only the signed payload hash can tell
        request.body = request.body.replace(b"Say hello.", b"Say adieu.")

    client.meta.events.register("before-send.bedrock-runtime.Converse", tamper)
    with pytest.raises(ClientError) as e:
        client.converse(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Say hello."}]}])
    err = e.value.response
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert err["Error"]["Code"] == "InvalidSignatureException"
    assert err["Error"]["Message"].startswith(AWS_SIGNATURE_MISMATCH + "\n\nThe Canonical String for this request should have been\n'POST\n")
    assert err["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == "InvalidSignatureException"
    rec = cloud.last("POST", "/converse")
    assert b"Say adieu." in rec.body
    assert rec.signature_verified is False
    assert rec.auth_scheme == "sigv4"


def test_wrong_secret_and_unknown_key_are_refused(cloud: CloudMock) -> None:
    from botocore.exceptions import ClientError

    msgs = [{"role": "user", "content": [{"text": "Hi"}]}]
    with pytest.raises(ClientError) as e:
        bedrock(cloud, aws_secret_access_key="not-the-secret").converse(modelId=CLAUDE_BEDROCK, messages=msgs)
    assert e.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert cloud.last().signature_verified is False
    with pytest.raises(ClientError) as e:
        bedrock(cloud, aws_access_key_id="AKIAE2EUNKNOWNKEY000").converse(modelId=CLAUDE_BEDROCK, messages=msgs)
    assert e.value.response["Error"] == {"Code": "UnrecognizedClientException", "Message": AWS_UNRECOGNIZED_CLIENT}
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_missing_authentication(cloud: CloudMock) -> None:
    status, headers, body = raw_post(cloud, f"/model/{CLAUDE_BEDROCK}/converse", b'{"messages":[]}', {})
    assert status == 403
    assert headers["x-amzn-errortype"] == "MissingAuthenticationTokenException"
    assert json.loads(body) == {"message": AWS_MISSING_TOKEN}
    rec = cloud.last()
    assert rec.auth_scheme is None and rec.signature_verified is None and rec.auth_error == AWS_MISSING_TOKEN


def _signed_for_host(host: str, path: str, body: bytes) -> dict[str, str]:
    """Headers of a request signed by botocore for ``http://{host}{path}``."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="POST", url=f"http://{host}{path}", data=body, headers={"content-type": "application/json"})
    SigV4Auth(Credentials(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), "bedrock", AWS_REGION).add_auth(req)
    return {k: v for k, v in req.headers.items()}


def test_signature_is_checked_against_the_host_header_carried(cloud: CloudMock) -> None:
    """A request signed for the real endpoint verifies when it carries that Host (as one a proxy
    forwards untouched would), and is refused when it carries the mock's own: a proxy that
    changes the upstream host must sign again."""
    path = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}).encode()
    aws_host = "bedrock-runtime.us-east-1.amazonaws.com"
    headers = _signed_for_host(aws_host, path, body)

    status, _, out = raw_post(cloud, path, body, {**headers, "Host": aws_host})
    assert status == 200, out
    assert json.loads(out)["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    rec = cloud.last()
    assert rec.header("host") == aws_host and rec.signature_verified is True

    status, hdrs, out = raw_post(cloud, path, body, {**headers, "Host": f"127.0.0.1:{cloud.port}"})
    assert status == 403
    assert hdrs["x-amzn-errortype"] == "InvalidSignatureException"
    assert f"\nhost:127.0.0.1:{cloud.port}\n" in json.loads(out)["message"]
    assert cloud.last().signature_verified is False


def test_verify_sigv4_scope_and_clock() -> None:
    path = "/model/m/converse"
    body = b"{}"
    headers = _signed_for_host("h.example", path, body)
    creds = {AWS_ACCESS_KEY_ID: (AWS_SECRET_ACCESS_KEY, None)}
    items = list(headers.items()) + [("Host", "h.example")]
    when = datetime.datetime.strptime(headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)

    assert cloud_mock.verify_sigv4("POST", path, "", items, body, creds, AWS_REGION, now=when).ok
    late = cloud_mock.verify_sigv4("POST", path, "", items, body, creds, AWS_REGION, now=when + datetime.timedelta(minutes=6))
    assert not late.ok and late.error_type == "InvalidSignatureException"
    assert late.message.startswith(f"Signature expired: {headers['X-Amz-Date']} is now earlier than ")
    other_region = cloud_mock.verify_sigv4("POST", path, "", items, body, creds, "eu-west-1", now=when)
    assert (other_region.ok, other_region.message) == (False, "Credential should be scoped to a valid region. ")
    unsigned_host = [(k, v.replace(";host;", ";")) for k, v in items]
    assert cloud_mock.verify_sigv4("POST", path, "", unsigned_host, body, creds, AWS_REGION, now=when).message == (
        "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization."
    )


def test_bedrock_api_key(cloud: CloudMock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Bedrock API key is `Authorization: Bearer <key>`. boto3 reads AWS_BEARER_TOKEN_BEDROCK
    but sends a bearer token over HTTPS only, so against the plain-HTTP mock it refuses before
    sending; the key goes by a plain HTTP client here (and by AnthropicBedrock(api_key=) below)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import InvalidEndpointConfigurationError

    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", BEDROCK_API_KEY)
    client = boto3.client(
        "bedrock-runtime", region_name=AWS_REGION, endpoint_url=cloud.url, config=Config(retries={"max_attempts": 1})
    )
    with pytest.raises(InvalidEndpointConfigurationError, match="Bearer authorization requires an HTTPS endpoint"):
        client.converse(modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Hi"}]}])
    assert cloud.requests == []

    path = f"/model/{CLAUDE_BEDROCK}/converse"
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}).encode()
    status, _, out = raw_post(cloud, path, body, {"authorization": f"Bearer {BEDROCK_API_KEY}"})
    assert status == 200
    assert json.loads(out)["output"]["message"]["content"] == [{"text": DEFAULT_REPLY}]
    rec = cloud.last("POST", "/converse")
    assert rec.auth_scheme == "bearer" and rec.signature_verified is None and rec.auth_error is None

    status, headers, out = raw_post(cloud, path, body, {"authorization": "Bearer ABSKbm90LXRoZS1rZXk="})
    assert status == 403
    assert json.loads(out) == {"Message": BEDROCK_BAD_API_KEY}
    assert "x-amzn-errortype" not in headers


# ---------------------------------------------------------------------------------------------
# Bedrock: errors
# ---------------------------------------------------------------------------------------------


def test_unknown_field_validation_exception(cloud: CloudMock) -> None:
    from botocore.exceptions import ClientError

    cloud.reject_fields.add("context_management")
    body = {
        "anthropic_version": ANTHROPIC_BEDROCK_VERSION,
        "max_tokens": 64,
        "context_management": {"edits": []},
        "messages": USER_TURN,
    }
    with pytest.raises(ClientError) as e:
        bedrock(cloud, {"x-mock-reject-fields": "foo"}).invoke_model(modelId=CLAUDE_BEDROCK, body=json.dumps({**body, "foo": 1}))
    err = e.value.response
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert err["Error"]["Code"] == "ValidationException"
    assert err["Error"]["Message"] == (
        'Malformed input request: #: subject must not be valid against schema {"required":["messages"]}'
        "#: extraneous key [context_management] is not permitted#: extraneous key [foo] is not permitted, "
        "please reformat your input and try again."
    )
    assert err["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == "ValidationException" + BEDROCK_ERROR_NAMESPACE

    # Converse: the keys of additionalModelRequestFields, in the model's wrapping
    with pytest.raises(ClientError) as e:
        bedrock(cloud).converse(
            modelId=CLAUDE_BEDROCK,
            messages=[{"role": "user", "content": [{"text": "Hi"}]}],
            additionalModelRequestFields={"context_management": {"edits": []}},
        )
    assert e.value.response["Error"]["Message"] == bedrock_extraneous_keys_message(["context_management"], converse=True)
    assert e.value.response["Error"]["Message"].startswith(
        "The model returned the following errors: Malformed input request: #: extraneous key [context_management]"
    )

    # without the field the same request goes through
    ok = bedrock(cloud).invoke_model(modelId=CLAUDE_BEDROCK, body=json.dumps({k: v for k, v in body.items() if k != "context_management"}))
    assert json.loads(ok["body"].read())["content"][0]["text"] == DEFAULT_REPLY


def test_forced_status_is_the_modeled_exception(cloud: CloudMock) -> None:
    from botocore.exceptions import ClientError

    for status, name in ((429, "ThrottlingException"), (400, "ValidationException"), (503, "ServiceUnavailableException")):
        with pytest.raises(ClientError) as e:
            bedrock(cloud, {"x-mock-status": str(status)}).converse(
                modelId=CLAUDE_BEDROCK, messages=[{"role": "user", "content": [{"text": "Hi"}]}]
            )
        assert e.value.response["Error"]["Code"] == name
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        assert e.value.response["Error"]["Message"] == f"mock upstream: forced status {status}"


# ---------------------------------------------------------------------------------------------
# Bedrock: anthropic's AnthropicBedrock
# ---------------------------------------------------------------------------------------------


def anthropic_bedrock(cloud: CloudMock, **kw: Any) -> Any:
    from anthropic import AnthropicBedrock

    if "api_key" not in kw:
        kw.update(aws_access_key=AWS_ACCESS_KEY_ID, aws_secret_key=AWS_SECRET_ACCESS_KEY)
    return AnthropicBedrock(aws_region=AWS_REGION, base_url=cloud.url, max_retries=0, timeout=30.0, **kw)


def test_anthropic_bedrock_messages(cloud: CloudMock) -> None:
    client = anthropic_bedrock(cloud)
    msg = client.messages.create(model=CLAUDE_BEDROCK, max_tokens=64, messages=USER_TURN)
    assert anthropic_text(msg) == DEFAULT_REPLY
    assert msg.usage.input_tokens == 12
    assert msg.usage.cache_read_input_tokens == 5120
    assert msg.usage.cache_creation_input_tokens == 248
    rec = cloud.last("POST", "/invoke")
    assert rec.path == f"/model/{CLAUDE_BEDROCK}/invoke"  # this SDK keeps ':' unencoded
    assert rec.signature_verified is True
    sent = rec.json()
    # this SDK sends its own API version (anthropic._constants.ANTHROPIC_API_VERSION), not the
    # documented "bedrock-2023-05-31"; the mock takes any
    assert sent["anthropic_version"] == ANTHROPIC_API_VERSION
    assert "model" not in sent and "stream" not in sent
    assert sent["messages"] == USER_TURN


def test_anthropic_bedrock_stream_and_reasoning(cloud: CloudMock) -> None:
    client = anthropic_bedrock(cloud)
    with client.messages.stream(
        model=CLAUDE_PROFILE_ARN, max_tokens=64, messages=USER_TURN, extra_headers={"x-mock-reasoning": "1"}
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "redacted_thinking", "text"]
    assert final.content[0].thinking == REASONING_TEXT
    assert final.content[0].signature == ANTHROPIC_SIGNATURE
    assert final.content[1].data == ANTHROPIC_REDACTED
    assert final.content[2].text == DEFAULT_REPLY
    assert final.usage.output_tokens == 7 and final.usage.cache_read_input_tokens == 5120
    rec = cloud.last("POST", "/invoke-with-response-stream")
    assert rec.model_id == CLAUDE_PROFILE_ARN
    assert rec.signature_verified is True


def test_anthropic_bedrock_api_key_and_unknown_field(cloud: CloudMock) -> None:
    import anthropic

    client = anthropic_bedrock(cloud, api_key=BEDROCK_API_KEY)
    msg = client.messages.create(model=CLAUDE_BEDROCK, max_tokens=64, messages=USER_TURN)
    assert anthropic_text(msg) == DEFAULT_REPLY
    assert cloud.last().auth_scheme == "bearer"

    cloud.reject_fields.add("foo")
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=CLAUDE_BEDROCK, max_tokens=64, messages=USER_TURN, extra_body={"foo": 1})
    assert e.value.status_code == 400
    assert e.value.body == {"message": bedrock_extraneous_keys_message(["foo"])}


# ---------------------------------------------------------------------------------------------
# Vertex AI: AnthropicVertex, google-genai
# ---------------------------------------------------------------------------------------------


def anthropic_vertex(cloud: CloudMock, token: str = VERTEX_ACCESS_TOKEN) -> Any:
    from anthropic import AnthropicVertex

    return AnthropicVertex(
        region=VERTEX_LOCATION,
        project_id=VERTEX_PROJECT,
        access_token=token,
        base_url=cloud.vertex_base_url,
        max_retries=0,
        timeout=30.0,
    )


VERTEX_ANTHROPIC_PATH = f"/v1/projects/{VERTEX_PROJECT}/locations/{VERTEX_LOCATION}/publishers/anthropic/models/{CLAUDE_VERTEX}"


def test_anthropic_vertex_messages(cloud: CloudMock) -> None:
    client = anthropic_vertex(cloud)
    msg = client.messages.create(model=CLAUDE_VERTEX, max_tokens=64, messages=USER_TURN)
    assert anthropic_text(msg) == DEFAULT_REPLY
    assert msg.usage.cache_read_input_tokens == 5120
    rec = cloud.last("POST", ":rawPredict")
    assert rec.path == VERTEX_ANTHROPIC_PATH + ":rawPredict"
    assert rec.header("authorization") == f"Bearer {VERTEX_ACCESS_TOKEN}"
    sent = rec.json()
    assert sent["anthropic_version"] == ANTHROPIC_API_VERSION  # the SDK's, as on Bedrock
    assert "model" not in sent
    assert rec.model_id == CLAUDE_VERTEX and rec.operation == "rawPredict"

    thought = client.messages.create(
        model=CLAUDE_VERTEX, max_tokens=64, messages=USER_TURN, extra_headers={"x-mock-reasoning": "1"}
    )
    assert [b.type for b in thought.content] == ["thinking", "redacted_thinking", "text"]
    assert (thought.content[0].thinking, thought.content[0].signature) == (REASONING_TEXT, ANTHROPIC_SIGNATURE)

    with client.messages.stream(model=CLAUDE_VERTEX, max_tokens=64, messages=USER_TURN) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == DEFAULT_REPLY
    assert final.usage.output_tokens == 7
    rec = cloud.last("POST", ":streamRawPredict")
    assert rec.path == VERTEX_ANTHROPIC_PATH + ":streamRawPredict"
    assert rec.json()["stream"] is True
    assert rec.response_header("content-type").startswith("text/event-stream")


def test_anthropic_vertex_auth_and_unknown_field(cloud: CloudMock) -> None:
    import anthropic

    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic_vertex(cloud, token="ya29.not-the-token").messages.create(model=CLAUDE_VERTEX, max_tokens=64, messages=USER_TURN)
    assert e.value.status_code == 401
    assert e.value.body == {"error": {"code": 401, "message": VERTEX_INVALID_CREDENTIAL, "status": "UNAUTHENTICATED"}}

    status, _, body = raw_post(cloud, VERTEX_ANTHROPIC_PATH + ":rawPredict", b"{}", {})
    assert status == 401
    assert json.loads(body) == {"error": {"code": 401, "message": VERTEX_MISSING_CREDENTIAL, "status": "UNAUTHENTICATED"}}

    cloud.reject_fields.add("foo")
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_vertex(cloud).messages.create(model=CLAUDE_VERTEX, max_tokens=64, messages=USER_TURN, extra_body={"foo": 1})
    assert e.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": "foo: Extra inputs are not permitted"}}


def genai_vertex(cloud: CloudMock) -> Any:
    from google import genai
    from google.genai import types
    from google.oauth2.credentials import Credentials

    return genai.Client(
        vertexai=True,
        project=VERTEX_PROJECT,
        location=VERTEX_LOCATION,
        credentials=Credentials(token=VERTEX_ACCESS_TOKEN),
        http_options=types.HttpOptions(base_url=cloud.url + "/"),
    )


def test_genai_vertex_generate_content(cloud: CloudMock) -> None:
    client = genai_vertex(cloud)
    resp = client.models.generate_content(model=GEMINI_MODEL, contents="Say hello.")
    assert resp.text == DEFAULT_REPLY
    u = resp.usage_metadata
    assert (u.prompt_token_count, u.cached_content_token_count, u.candidates_token_count, u.total_token_count) == (
        GEMINI_USAGE["promptTokenCount"],
        GEMINI_USAGE["cachedContentTokenCount"],
        GEMINI_USAGE["candidatesTokenCount"],
        GEMINI_USAGE["totalTokenCount"],
    )
    rec = cloud.last("POST", ":generateContent")
    assert rec.path == f"/v1beta1/projects/{VERTEX_PROJECT}/locations/{VERTEX_LOCATION}/publishers/google/models/{GEMINI_MODEL}:generateContent"
    assert rec.header("authorization") == f"Bearer {VERTEX_ACCESS_TOKEN}"
    assert rec.json()["contents"] == [{"role": "user", "parts": [{"text": "Say hello."}]}]


def test_genai_vertex_generate_content_stream(cloud: CloudMock) -> None:
    client = genai_vertex(cloud)  # kept alive: the stream reads through the client's connection
    chunks = list(client.models.generate_content_stream(model=GEMINI_MODEL, contents="Say hello."))
    assert len(chunks) == REPLY_PIECES
    assert "".join(c.text for c in chunks) == DEFAULT_REPLY
    assert chunks[-1].usage_metadata.cached_content_token_count == 1920
    assert chunks[-1].usage_metadata.total_token_count == GEMINI_USAGE["totalTokenCount"]
    rec = cloud.last("POST", ":streamGenerateContent")
    assert rec.query_params["alt"] == ["sse"]
    assert rec.response_header("content-type").startswith("text/event-stream")


def test_vertex_gemini_stream_without_sse_is_a_json_array(cloud: CloudMock) -> None:
    path = f"/v1/projects/{VERTEX_PROJECT}/locations/{VERTEX_LOCATION}/publishers/google/models/{GEMINI_MODEL}:streamGenerateContent"
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}).encode()
    status, headers, out = raw_post(cloud, path, body, {"authorization": f"Bearer {VERTEX_ACCESS_TOKEN}"})
    assert status == 200
    assert headers["content-type"] == "application/json; charset=UTF-8"
    arr = json.loads(out)
    assert [c["candidates"][0]["content"]["parts"][0]["text"] for c in arr] == _pieces(DEFAULT_REPLY)
    assert "".join(_pieces(DEFAULT_REPLY)) == DEFAULT_REPLY
    assert arr[-1]["usageMetadata"] == GEMINI_USAGE
    assert cloud.last().events_sent == len(arr) + 1  # one chunk per element, then the closing ']'


# ---------------------------------------------------------------------------------------------
# Azure OpenAI
# ---------------------------------------------------------------------------------------------


def azure(cloud: CloudMock, api_key: str = AZURE_API_KEY) -> Any:
    from openai import AzureOpenAI

    return AzureOpenAI(
        azure_endpoint=cloud.url,
        api_key=api_key,
        api_version=AZURE_API_VERSION,
        azure_deployment=AZURE_DEPLOYMENT,
        max_retries=0,
        timeout=30.0,
    )


def test_azure_chat_completions(cloud: CloudMock) -> None:
    resp = azure(cloud).chat.completions.create(model="gpt-4o", messages=USER_TURN)
    assert resp.choices[0].message.content == DEFAULT_REPLY
    assert resp.usage.prompt_tokens == OPENAI_USAGE["prompt_tokens"]
    assert resp.usage.prompt_tokens_details.cached_tokens == 1920
    assert resp.model_extra["prompt_filter_results"] == [{"prompt_index": 0, "content_filter_results": AZURE_FILTER_RESULTS}]
    rec = cloud.last("POST", "/chat/completions")
    assert rec.path == f"/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions"
    assert rec.query_params == {"api-version": [AZURE_API_VERSION]}
    assert rec.header("api-key") == AZURE_API_KEY
    assert rec.auth_scheme == "api-key" and rec.model_id == AZURE_DEPLOYMENT


def test_azure_chat_completions_stream(cloud: CloudMock) -> None:
    chunks = list(
        azure(cloud).chat.completions.create(
            model="gpt-4o", messages=USER_TURN, stream=True, stream_options={"include_usage": True}
        )
    )
    # Azure's first chunk: empty choices, the prompt's filter results
    assert chunks[0].choices == []
    assert chunks[0].model_extra["prompt_filter_results"][0]["prompt_index"] == 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEFAULT_REPLY
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens_details.cached_tokens == 1920


def test_azure_v1_api_bearer(cloud: CloudMock) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{cloud.url}/openai/v1/", api_key=AZURE_API_KEY, max_retries=0, timeout=30.0)
    chat = client.chat.completions.create(model=AZURE_DEPLOYMENT, messages=USER_TURN)
    assert chat.choices[0].message.content == DEFAULT_REPLY
    rec = cloud.last("POST", "/chat/completions")
    assert rec.path == "/openai/v1/chat/completions"
    assert rec.auth_scheme == "bearer"

    entra = openai.OpenAI(base_url=f"{cloud.url}/openai/v1/", api_key=AZURE_AD_TOKEN, max_retries=0, timeout=30.0)
    resp = entra.responses.create(model=AZURE_DEPLOYMENT, input="Say hello.")
    assert resp.output_text == DEFAULT_REPLY
    assert resp.usage.input_tokens_details.cached_tokens == RESPONSES_USAGE["input_tokens_details"]["cached_tokens"]
    assert cloud.last("POST", "/responses").header("authorization") == f"Bearer {AZURE_AD_TOKEN}"


def test_azure_refusals(cloud: CloudMock) -> None:
    import openai

    with pytest.raises(openai.AuthenticationError) as e:
        azure(cloud, api_key="0" * 32).chat.completions.create(model="gpt-4o", messages=USER_TURN)
    assert e.value.status_code == 401
    assert e.value.body == {"code": "401", "message": AZURE_ACCESS_DENIED}  # the SDK unwraps `error`
    assert json.loads(cloud.last().response_body) == {"error": {"code": "401", "message": AZURE_ACCESS_DENIED}}

    status, _, body = raw_post(cloud, f"/openai/v1/chat/completions?api-version={AZURE_API_VERSION}", b"{}", {})
    assert (status, json.loads(body)) == (401, {"error": {"code": "401", "message": AZURE_ACCESS_DENIED}})
    assert cloud.last().auth_scheme is None

    status, _, body = raw_post(cloud, f"/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions", b"{}", {"api-key": AZURE_API_KEY})
    assert (status, json.loads(body)) == (404, {"error": {"code": "404", "message": "Resource not found"}})

    cloud.reject_fields.add("reasoning_effort")
    with pytest.raises(openai.BadRequestError) as e:
        azure(cloud).chat.completions.create(model="gpt-4o", messages=USER_TURN, reasoning_effort="low")
    assert e.value.body["message"] == "Unrecognized request argument supplied: reasoning_effort"


def test_plain_routes_still_answer(cloud: CloudMock) -> None:
    """The cloud mock is a MockUpstream: the plain dialects' routes are unchanged."""
    status, _, body = raw_post(cloud, "/v1/messages", json.dumps({"model": "m", "max_tokens": 8, "messages": USER_TURN}).encode(), {})
    assert status == 200
    assert json.loads(body)["content"] == [{"type": "text", "text": DEFAULT_REPLY}]
    assert cloud.last().operation is None and cloud.last().auth_scheme is None


def test_redacted_blob_is_base64() -> None:
    assert base64.b64decode(cloud_mock.BEDROCK_REDACTED) == b"mock redacted reasoning 0001"
