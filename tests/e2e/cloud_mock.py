"""Cloud-provider mock upstreams for cachekeeper's end-to-end tests (issue 29): Amazon Bedrock
(bedrock-runtime), Google Vertex AI and Azure OpenAI, each speaking its cloud's wire.

``CloudMock`` is a :class:`mock_upstream.MockUpstream` (same start/stop, same recording in
``CloudMock.requests``: method, path, query, headers, raw body, and the response as written) whose
handler answers these routes before the plain ones:

Amazon Bedrock runtime (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_Operations_Amazon_Bedrock_Runtime.html;
shapes: botocore's ``bedrock-runtime`` service model, the authority the tests check against)

- ``POST /model/{modelId}/converse`` -- Converse JSON: ``output.message.content``, ``stopReason``,
  ``usage`` (``BEDROCK_CONVERSE_USAGE``: inputTokens, outputTokens, totalTokens,
  cacheReadInputTokens, cacheWriteInputTokens, cacheDetails), ``metrics.latencyMs``.
- ``POST /model/{modelId}/converse-stream`` -- ``application/vnd.amazon.eventstream`` frames:
  messageStart, contentBlockDelta..., contentBlockStop, messageStop, metadata (usage, metrics).
- ``POST /model/{modelId}/invoke`` -- with an Anthropic body (``anthropic_version:
  "bedrock-2023-05-31"``): an Anthropic Messages response JSON, and the
  ``X-Amzn-Bedrock-*-Token-Count`` headers.
- ``POST /model/{modelId}/invoke-with-response-stream`` -- event-stream ``chunk`` frames whose
  payload is ``{"bytes": base64(Anthropic stream event JSON)}``; the ``message_stop`` event
  carries ``amazon-bedrock-invocationMetrics``.

``modelId`` may be URL-encoded (an ARN, an inference profile id); ``RecordedRequest.model_id``
holds it decoded and ``RecordedRequest.operation`` the operation (``converse``, ...). Every event
frame carries the ``p`` padding member the real service adds. The frames go out one HTTP chunk
each, with the mock's ``sse_delay`` between them, so a buffering proxy is observable.

Auth: ``Authorization: Bearer <key>`` is accepted when the key is one of ``bedrock_api_keys``
(Bedrock API keys); a SigV4 ``AWS4-HMAC-SHA256`` request is verified exactly as AWS does, with
botocore's own signer (:func:`verify_sigv4`): the canonical request is rebuilt from the request as
received -- its path as sent, its query, the values of the headers it names in ``SignedHeaders``
(``host`` among them, with the Host header it really carried), the SHA-256 of its raw body -- and
signed again with the known secret at its ``X-Amz-Date``. ``RecordedRequest.auth_scheme`` says
which (``sigv4`` / ``bearer``), ``signature_verified`` whether the signature matched. Refusals are
AWS's: 403 ``InvalidSignatureException`` (the message, then the canonical string and string to
sign AWS would have used), ``MissingAuthenticationTokenException``,
``UnrecognizedClientException``, ``IncompleteSignatureException``.

Google Vertex AI (https://cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/use-claude,
https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.publishers.models)

- ``POST /{v1|v1beta1}/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict`` /
  ``:streamRawPredict`` -- Anthropic Messages (body without ``model``, with ``anthropic_version:
  "vertex-2023-10-16"``): Anthropic JSON / SSE as ``mock_upstream`` writes them;
  ``.../models/count-tokens:rawPredict`` answers ``{"input_tokens": N}``.
- ``.../publishers/google/models/{m}:generateContent`` / ``:streamGenerateContent`` -- Gemini;
  a stream is SSE with ``?alt=sse``, else one JSON array written element by element;
  ``usageMetadata`` with ``cachedContentTokenCount`` (``mock_upstream.GEMINI_USAGE``).

Auth: ``Authorization: Bearer <token>`` with a token in ``vertex_tokens``; otherwise 401 in
Google's error shape (``UNAUTHENTICATED``).

Azure OpenAI (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/reference,
https://learn.microsoft.com/en-us/azure/ai-foundry/openai/api-version-lifecycle)

- ``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (and
  ``/responses``) -- the ``api-version`` query is required (404 without it, as Azure);
- ``POST /openai/v1/chat/completions``, ``POST /openai/v1/responses`` -- the v1 API.

Bodies as ``mock_upstream`` writes OpenAI's, plus Azure's content-filter annotations
(``prompt_filter_results`` / ``content_filter_results``; a chat stream starts with Azure's extra
chunk with empty ``choices``). Auth: ``api-key: <key>`` or ``Authorization: Bearer <key or Entra
token>``; otherwise 401 in Azure's shape.

Knobs (request headers, as ``mock_upstream``'s, which say more):

- ``x-mock-status: CODE`` -- answer that status in the cloud's error shape (Bedrock: the
  exception its service model gives that status, ``BEDROCK_ERROR_TYPES``, with
  ``x-amzn-ErrorType``; Vertex: Google's or Anthropic's shape; Azure: OpenAI's). Auth is checked
  first, as the clouds do.
- ``x-mock-reply``, ``x-mock-usage: none``, ``x-mock-gate``, ``x-mock-split``,
  ``x-mock-reset-after`` / ``x-mock-reset-cut``, ``x-mock-garbage: not_json`` -- as in
  ``mock_upstream``, on every cloud route (event streams too; the SSE-text knobs ``x-mock-crlf``,
  ``x-mock-sse-extras`` do not apply to binary event streams); ``x-mock-cache: exact-prefix`` on
  the Anthropic-bodied routes.
- ``x-mock-reasoning: 1`` -- reasoning carriers: Converse ``reasoningContent`` blocks (a
  ``reasoningText`` with its ``signature``, and a ``redactedContent``; streamed as
  ``reasoningContent`` text / signature / redactedContent deltas); Anthropic ``thinking`` +
  ``redacted_thinking`` blocks on InvokeModel and Vertex rawPredict; Gemini's signed parallel
  function calls on Vertex; ``reasoning_content`` / a reasoning item on Azure.
- ``x-mock-stream-error: NAME`` -- (Bedrock event streams) half the frames, then an ``exception``
  frame for that member of the stream union (``modelStreamErrorException``,
  ``throttlingException``, ``internalServerException``...), as Bedrock reports a failure once
  the 200 is sent.
- ``x-mock-reject-fields: a,b`` -- as the mock-wide ``CloudMock.reject_fields``: refuse a body
  that has any of these fields with the cloud's real unknown-field error: Bedrock InvokeModel
  (top-level keys of the Anthropic body) and Converse (keys of ``additionalModelRequestFields``)
  answer 400 ``ValidationException`` "Malformed input request: ... extraneous key [a] is not
  permitted, please reformat your input and try again."; Vertex Anthropic answers Anthropic's
  "a: Extra inputs are not permitted"; Vertex Gemini Google's "Invalid JSON payload received.
  Unknown name ..."; Azure "Unrecognized request argument supplied: a".

Run standalone (for trying a client by hand)::

    python tests/e2e/cloud_mock.py --port 9200
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import re
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote

from mock_upstream import (
    ANTHROPIC_SIGNATURE,
    MockUpstream,
    RecordedRequest,
    _error_body,
    _Handler,
    _pieces,
    _rough_tokens,
)

# ---------------------------------------------------------------------------------------------
# Test credentials (not real; the mock accepts exactly these by default)
# ---------------------------------------------------------------------------------------------

# AWS's own documented example key pair (https://docs.aws.amazon.com/IAM/latest/UserGuide/security-creds.html
# and every SigV4 example in the AWS General Reference), so no scanner mistakes it for a leak.
AWS_ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_REGION = "us-east-1"
# The SigV4 signing name of bedrock-runtime (botocore service model metadata `signingName`;
# https://docs.aws.amazon.com/bedrock/latest/userguide/security-iam.html): the credential scope's service.
BEDROCK_SIGNING_NAME = "bedrock"
# A Bedrock API key, sent as `Authorization: Bearer` (https://docs.aws.amazon.com/bedrock/latest/userguide/api-keys-use.html;
# boto3 reads it from AWS_BEARER_TOKEN_BEDROCK). Real keys start with "ABSK" and a base64 body.
BEDROCK_API_KEY = "ABSK" + base64.b64encode(b"e2e-test-bedrock-api-key").decode()
# An OAuth 2 access token as google-auth hands it to the SDKs (real ones start with "ya29.").
VERTEX_ACCESS_TOKEN = "ya29.e2e-test-vertex-access-token"
VERTEX_PROJECT = "e2e-project"
VERTEX_LOCATION = "us-east5"  # a region Anthropic models are served from on Vertex
# Azure OpenAI: a resource key (32 hex digits, as the portal shows them), an Entra ID token, and
# the GA data-plane API version (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/api-version-lifecycle).
AZURE_API_KEY = "0e2e0a2e0b2e0c2e0d2e0e2e0f2e0a2e"
AZURE_AD_TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJub25lIn0.e2e-test-entra-token."
AZURE_API_VERSION = "2024-10-21"

# ---------------------------------------------------------------------------------------------
# Response figures
# ---------------------------------------------------------------------------------------------

# Converse usage (TokenUsage in the service model; https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html),
# the same figures as mock_upstream.ANTHROPIC_USAGE: `inputTokens` is only the uncached input
# ("total input tokens = inputTokens + cacheReadInputTokens + cacheWriteInputTokens",
# https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html, quoted in
# crmne/ruby_llm#832), `totalTokens` adds all four (tensorzero/tensorzero#5688, Claude Haiku 4.5:
# inputTokens 18 + outputTokens 386 + cacheWriteInputTokens 7502 = totalTokens 7906),
# `cacheDetails` the writes by TTL, 1h before 5m as the service model documents.
BEDROCK_CONVERSE_USAGE = {
    "inputTokens": 12,
    "outputTokens": 7,
    "totalTokens": 12 + 7 + 5120 + 248,
    "cacheReadInputTokens": 5120,
    "cacheWriteInputTokens": 248,
    "cacheDetails": [{"ttl": "1h", "inputTokens": 100}, {"ttl": "5m", "inputTokens": 148}],
}
BEDROCK_LATENCY_MS = 321  # Converse `metrics.latencyMs`, InvokeModel's invocation latency
BEDROCK_FIRST_BYTE_MS = 123  # invocationMetrics.firstByteLatency
# the reasoning the carriers hold (the same sentence mock_upstream's Anthropic writer uses)
REASONING_TEXT = "The user wants a greeting; answer briefly."
# Converse `redactedContent` is a blob: base64 in the JSON wire
BEDROCK_REDACTED = base64.b64encode(b"mock redacted reasoning 0001").decode()
# The `p` member Bedrock adds to every stream event (random-length padding against
# length side channels; seen in aws/aws-sdk-js-v3#6919: `messageStart: { p: 'abcdefghijklmnopqrstuvwxyzABCDEFGH', role: ... }`).
_PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

EVENTSTREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"

# HTTP status -> the bedrock-runtime exception the service model declares with it (the tests
# check each against botocore's model). The `x-amzn-ErrorType` header carries the name and the
# service namespace, e.g. "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"
# (seen in fumito-ito/AnthropicSwiftSDK#19); botocore keeps what precedes the first ':'.
BEDROCK_ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
BEDROCK_ERROR_NAMESPACE = ":http://internal.amazon.com/coral/com.amazon.bedrock/"

# AWS's auth refusals (403, `{"message": ...}`, x-amzn-ErrorType without a namespace).
# The signature mismatch, word for word as bedrock-runtime answers it (BerriAI/litellm#14763, a
# converse-stream call; aws/aws-sdk-js#168): AWS appends the canonical string and the string to
# sign it computed, which the mock does too.
AWS_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)
# No Authorization at all (common-voice/common-voice#1599, pingidentity/pingone-sample-custom-signon#103).
AWS_MISSING_TOKEN = "Missing Authentication Token"
# An access key AWS does not know (langchain-ai/langchain#19677: InvokeModel; Arize-ai/openinference#2358).
AWS_UNRECOGNIZED_CLIENT = "The security token included in the request is invalid."
# A Bedrock API key that is not valid: 403 with a capitalised `Message` member and no
# x-amzn-ErrorType that the reports show (anomalyco/opencode#47073, ai4s-research/open-science#53).
BEDROCK_BAD_API_KEY = "Authentication failed: Please make sure your API Key is valid."

# Vertex AI 401s (Google's error shape, https://cloud.google.com/apis/design/errors): no credential
# (GoogleCloudPlatform/generative-ai#454, google-github-actions/run-gemini-cli#123: aiplatform) and
# a credential that is not valid (googleapis/java-aiplatform#1056).
VERTEX_MISSING_CREDENTIAL = (
    "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie "
    "or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
VERTEX_INVALID_CREDENTIAL = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
# Azure OpenAI's 401 for a missing or wrong key (SciSharp/BotSharp#386 shows the whole body;
# microsoft/semantic-kernel#10337).
AZURE_ACCESS_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key "
    "for an active subscription and use a correct regional API endpoint for your resource."
)
# Azure's content-filter annotations (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/concepts/content-filter).
AZURE_FILTER_RESULTS = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
    "sexual": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": False, "severity": "safe"},
}


def bedrock_extraneous_keys_message(keys: Iterable[str], converse: bool = False) -> str:
    """Bedrock's 400 ValidationException message for unknown fields.

    InvokeModel with an Anthropic (Messages) body, word for word with the keys in body order
    (fumito-ito/AnthropicSwiftSDK#19: ``...{"required":["messages"]}#: extraneous key [stream] is
    not permitted#: extraneous key [model] is not permitted, please reformat your input and try
    again.``; BerriAI/litellm#9106, Claude 3.5 Sonnet v2; langgenius/dify#3326). On Converse the
    model's refusal is wrapped in "The model returned the following errors: " (zed-industries/zed#31815,
    lastmile-ai/mcp-agent#126); for keys of ``additionalModelRequestFields`` the JSON pointer is
    ``#``, as for the InvokeModel body they are merged into."""
    parts = "".join(f"#: extraneous key [{k}] is not permitted" for k in keys)
    if converse:
        return f"The model returned the following errors: Malformed input request: {parts}, please reformat your input and try again."
    return (
        'Malformed input request: #: subject must not be valid against schema {"required":["messages"]}'
        f"{parts}, please reformat your input and try again."
    )


# ---------------------------------------------------------------------------------------------
# application/vnd.amazon.eventstream
# ---------------------------------------------------------------------------------------------
# Framing (https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream,
# https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html): a 12-byte prelude
# (total length, headers length, both big-endian u32, and the CRC32 of those 8 bytes), the
# headers, the payload, and the CRC32 of everything before it. A header: name length (u8), name,
# value type (u8; 7 = string), value length (u16), value.

_HEADER_STRING = 7


def _eventstream_header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack(">B", len(n)) + n + struct.pack(">BH", _HEADER_STRING, len(v)) + v


def eventstream_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers."""
    hb = b"".join(_eventstream_header(k, v) for k, v in headers.items())
    total = 12 + len(hb) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hb))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + hb + payload
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)


def event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """An ``event`` message: ``:event-type`` names the member of the stream's union."""
    return eventstream_message(
        {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"},
        json.dumps(payload, separators=(",", ":")).encode(),
    )


def exception_frame(exception_type: str, message: str) -> bytes:
    """An ``exception`` message (a modeled error mid-stream, e.g. ``modelStreamErrorException``)."""
    return eventstream_message(
        {":exception-type": exception_type, ":content-type": "application/json", ":message-type": "exception"},
        json.dumps({"message": message}, separators=(",", ":")).encode(),
    )


def _padded(payload: dict[str, Any], i: int) -> dict[str, Any]:
    """``payload`` with the ``p`` padding member, its length varying with ``i`` (deterministic)."""
    return {**payload, "p": _PADDING[: 8 + (i * 7) % (len(_PADDING) - 8)]}


# ---------------------------------------------------------------------------------------------
# SigV4 verification, with botocore's signer
# ---------------------------------------------------------------------------------------------

_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<cred>[^,\s]+)\s*,\s*SignedHeaders=(?P<signed>[^,\s]+)\s*,\s*Signature=(?P<sig>[0-9a-fA-F]+)\s*$"
)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
MAX_CLOCK_SKEW_S = 300  # AWS refuses a signature more than 5 minutes off its clock


@dataclass
class SigV4Result:
    ok: bool
    error_type: str | None = None  # the x-amzn-ErrorType of the refusal
    message: str | None = None
    canonical_request: str | None = None
    string_to_sign: str | None = None


def verify_sigv4(
    method: str,
    raw_path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    credentials: dict[str, tuple[str, str | None]],
    region: str,
    service: str = BEDROCK_SIGNING_NAME,
    now: datetime.datetime | None = None,
    max_skew_s: float = MAX_CLOCK_SKEW_S,
) -> SigV4Result:
    """Verify a SigV4-signed request as AWS does, with botocore's ``SigV4Auth``
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html).

    ``raw_path`` and ``query`` as they arrived (not decoded: the canonical URI encodes the path
    as sent again, as AWS does for every service but S3); ``headers`` in arrival order (repeated
    headers are joined with ','); ``credentials`` maps access key id -> (secret, session token or
    None). The signed headers are exactly those ``SignedHeaders`` names, with the values the
    request carried (so ``host`` is the Host header it really had), and the payload hash is the
    SHA-256 of ``body``."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest, HTTPHeaders
    from botocore.credentials import Credentials

    def header_all(name: str) -> list[str]:
        return [v for k, v in headers if k.lower() == name]

    auth = (header_all("authorization") or [""])[0]
    m = _AUTH_RE.match(auth.strip())
    if not m:
        # the mock's wording, after AWS's "Authorization header requires 'X' parameter."
        return SigV4Result(
            False,
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.",
        )
    scope = m["cred"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return SigV4Result(False, "IncompleteSignatureException", "Credential should be scoped to a valid region. ")
    access_key, scope_date, scope_region, scope_service, _ = scope
    if access_key not in credentials:
        return SigV4Result(False, "UnrecognizedClientException", AWS_UNRECOGNIZED_CLIENT)
    secret, token = credentials[access_key]
    if token is not None and (header_all("x-amz-security-token") or [None])[0] != token:
        return SigV4Result(False, "UnrecognizedClientException", AWS_UNRECOGNIZED_CLIENT)
    # scope checks, in AWS's words (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-troubleshooting.html)
    if scope_service != service:
        return SigV4Result(False, "InvalidSignatureException", f"Credential should be scoped to correct service: '{service}'. ")
    if scope_region != region:
        return SigV4Result(False, "InvalidSignatureException", "Credential should be scoped to a valid region. ")
    signed = m["signed"].split(";")
    if "host" not in signed:
        return SigV4Result(
            False, "InvalidSignatureException", "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization."
        )
    amz_date = (header_all("x-amz-date") or [None])[0]
    if amz_date is None:
        return SigV4Result(
            False,
            "IncompleteSignatureException",
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        )
    try:
        when = datetime.datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return SigV4Result(False, "IncompleteSignatureException", f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'.")
    if scope_date != amz_date[:8]:
        return SigV4Result(
            False,
            "InvalidSignatureException",
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"'{scope_date}' != '{amz_date[:8]}', from '{amz_date}'.",
        )
    now = now or datetime.datetime.now(datetime.timezone.utc)
    skew = datetime.timedelta(seconds=max_skew_s)
    fmt = lambda d: d.strftime(_AMZ_DATE)  # noqa: E731
    # the clock-skew refusals (aws/aws-sdk-js-v3#5811: "Signature expired: 20240312T141610Z is now earlier than ...")
    if when < now - skew:
        return SigV4Result(
            False,
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than {fmt(now - skew)} ({fmt(now)} - 5 min.)",
        )
    if when > now + skew:
        return SigV4Result(
            False,
            "InvalidSignatureException",
            f"Signature not yet current: {amz_date} is still later than {fmt(now + skew)} ({fmt(now)} + 5 min.)",
        )

    class _Verifier(SigV4Auth):
        def headers_to_sign(self, request: Any) -> Any:
            hm = HTTPHeaders()
            for name in signed:
                for v in request.headers.get_all(name) or []:
                    hm[name] = v
            return hm

        def _should_sha256_sign_payload(self, request: Any) -> bool:
            return True  # the hash of the body bytes as received

    request = AWSRequest(method=method.upper(), url=f"http://mock{raw_path}" + (f"?{query}" if query else ""), data=body)
    request.headers = HTTPHeaders()
    for k, v in headers:
        request.headers[k] = v  # HTTPMessage appends: repeated headers all stay
    request.context["timestamp"] = amz_date
    signer = _Verifier(Credentials(access_key, secret, token), scope_service, scope_region)
    canonical = signer.canonical_request(request)
    sts = signer.string_to_sign(request, canonical)
    expected = signer.signature(sts, request)
    content_sha = (header_all("x-amz-content-sha256") or [None])[0]
    body_ok = content_sha in (None, "UNSIGNED-PAYLOAD") or content_sha == hashlib.sha256(body).hexdigest()
    if hmac.compare_digest(expected, m["sig"].lower()) and body_ok:
        return SigV4Result(True, canonical_request=canonical, string_to_sign=sts)
    message = (
        f"{AWS_SIGNATURE_MISMATCH}\n\nThe Canonical String for this request should have been\n'{canonical}'\n\n"
        f"The String-to-Sign should have been\n'{sts}'\n"
    )
    return SigV4Result(False, "InvalidSignatureException", message, canonical, sts)


# ---------------------------------------------------------------------------------------------
# The mock
# ---------------------------------------------------------------------------------------------

# Where the mock's Google OAuth token endpoint answers (a service account's `token_uri`).
GOOGLE_TOKEN_PATH = "/token"

def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _verified_jwt(assertion: str, keys: dict[str, str], audience: str) -> dict[str, Any] | None:
    """The claims of an RS256 JWT (RFC 7519) whose ``iss`` is a key of ``keys`` (public key PEMs),
    signed with that key, for ``audience``, not expired; ``None`` otherwise. (cryptography only:
    the agents' runner has no google-auth.)"""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    try:
        head, body, sig = assertion.split(".")
        header, claims = json.loads(_b64url(head)), json.loads(_b64url(body))
        if header.get("alg") != "RS256" or claims.get("iss") not in keys or claims.get("aud") != audience:
            return None
        key = serialization.load_pem_public_key(keys[claims["iss"]].encode())
        key.verify(_b64url(sig), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr]
    except (ValueError, KeyError, InvalidSignature, json.JSONDecodeError):
        return None
    if not isinstance(claims.get("exp"), int) or claims["exp"] < time.time():
        return None
    return claims


def write_google_service_account(path: Path, email: str, mock: "CloudMock", known: bool = True) -> None:
    """A service-account key file as the Google Cloud console downloads it, for a fresh RSA key
    whose ``token_uri`` is ``mock``'s token endpoint; ``known``: the endpoint knows the account
    (its public key registered), else it refuses it (``invalid_grant``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": VERTEX_PROJECT,
                "private_key_id": "0123456789abcdef",
                "private_key": private.decode(),
                "client_email": email,
                "client_id": "100000000000000000000",
                "token_uri": f"{mock.url}{GOOGLE_TOKEN_PATH}",
            }
        )
    )
    if known:
        mock.google_service_accounts[email] = public.decode()


_BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream|invoke|invoke-with-response-stream)$")
_VERTEX_PATH = re.compile(
    r"^/(?P<version>v1|v1beta1)/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
    r"/publishers/(?P<publisher>anthropic|google)/models/(?P<model>[^/:]+)"
    r":(?P<method>rawPredict|streamRawPredict|generateContent|streamGenerateContent|countTokens)$"
)
_AZURE_DEPLOYMENT_PATH = re.compile(r"^/openai/deployments/(?P<deployment>[^/]+)/(?P<op>chat/completions|responses)$")
_AZURE_V1_PATH = re.compile(r"^/openai/v1/(?P<op>chat/completions|responses)$")


class CloudMock(MockUpstream):
    """:class:`MockUpstream` plus the Bedrock, Vertex AI and Azure OpenAI routes.

    ``aws_credentials``: access key id -> (secret, session token or None) that SigV4 requests may
    be signed with (default: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``); ``aws_region``
    the region their scope must name; ``bedrock_api_keys``, ``vertex_tokens``, ``azure_api_keys``
    and ``azure_bearer_tokens`` the bearer credentials accepted; ``reject_fields`` the fields
    refused with the cloud's unknown-field error (a set, changeable between requests);
    ``max_clock_skew_s`` how far ``X-Amz-Date`` may be from the mock's clock."""

    def __init__(
        self,
        *args: Any,
        aws_credentials: dict[str, tuple[str, str | None]] | None = None,
        aws_region: str = AWS_REGION,
        bedrock_api_keys: Iterable[str] = (BEDROCK_API_KEY,),
        vertex_tokens: Iterable[str] = (VERTEX_ACCESS_TOKEN,),
        azure_api_keys: Iterable[str] = (AZURE_API_KEY,),
        azure_bearer_tokens: Iterable[str] = (AZURE_API_KEY, AZURE_AD_TOKEN),
        reject_fields: Iterable[str] = (),
        max_clock_skew_s: float = MAX_CLOCK_SKEW_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.aws_credentials = dict(aws_credentials or {AWS_ACCESS_KEY_ID: (AWS_SECRET_ACCESS_KEY, None)})
        self.aws_region = aws_region
        self.bedrock_api_keys = set(bedrock_api_keys)
        self.vertex_tokens = set(vertex_tokens)
        self.azure_api_keys = set(azure_api_keys)
        self.azure_bearer_tokens = set(azure_bearer_tokens)
        self.reject_fields: set[str] = set(reject_fields)
        self.max_clock_skew_s = max_clock_skew_s
        # Google service accounts the token endpoint knows: client_email -> public key PEM.
        self.google_service_accounts: dict[str, str] = {}
        self.google_tokens_issued = 0
        # The `expires_in` (seconds) of the tokens the endpoint issues; Google's are an hour.
        self.google_token_expires_in = 3599

    @classmethod
    def handler_base(cls) -> type[_Handler]:
        return _CloudHandler

    @property
    def vertex_base_url(self) -> str:
        """What ``AnthropicVertex(base_url=...)`` takes (the default is ``https://{region}-aiplatform.googleapis.com/v1``)."""
        return f"{self.url}/v1"


class _CloudHandler(_Handler):
    upstream: CloudMock

    # stream shapes for the writers inherited from mock_upstream: None (SSE), "bedrock-chunks"
    # (Anthropic SSE events re-wrapped as event-stream `chunk` frames), "json-array" (Gemini
    # without alt=sse), "binary" (frames already built)
    _stream_mode: str | None = None
    _azure_chat = False  # add Azure's content-filter annotations to OpenAI Chat bodies
    _bedrock_invoke = False  # add InvokeModel's token-count headers to the JSON response

    def _route(self, path: str) -> None:
        # one handler serves every request of a keep-alive connection: reset the per-request state
        self._stream_mode, self._azure_chat, self._bedrock_invoke = None, False, False
        if self.command == "POST":
            m = _BEDROCK_PATH.match(path)
            if m:
                return self._bedrock(unquote(m["model"]), m["op"])
            m = _VERTEX_PATH.match(path)
            if m:
                return self._vertex(m)
            m = _AZURE_DEPLOYMENT_PATH.match(path)
            if m:
                return self._azure(m["op"], m["deployment"])
            m = _AZURE_V1_PATH.match(path)
            if m:
                return self._azure(m["op"], None)
            if path == GOOGLE_TOKEN_PATH:
                return self._google_token()
        return super()._route(path)

    # -- Google's OAuth token endpoint ---------------------------------------------------------
    def _google_token(self) -> None:
        """The JWT-bearer grant of a service account
        (https://developers.google.com/identity/protocols/oauth2/service-account#httprest): the
        form's ``assertion`` is an RS256 JWT whose ``iss`` is a known ``client_email``, signed with
        that account's key, ``aud`` this endpoint, ``scope`` naming cloud-platform. Answers
        ``VERTEX_ACCESS_TOKEN`` for ``google_token_expires_in`` seconds (an hour); refusals as Google words them (``invalid_grant``)."""
        from urllib.parse import parse_qs

        form = {k: v[0] for k, v in parse_qs(self.rec.body.decode("utf-8", "replace")).items()}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" or "assertion" not in form:
            return self._send_json(400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"})
        claims = _verified_jwt(form["assertion"], self.upstream.google_service_accounts, f"{self.upstream.url}{GOOGLE_TOKEN_PATH}")
        if claims is None:
            return self._send_json(400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
        if "https://www.googleapis.com/auth/cloud-platform" not in str(claims.get("scope", "")).split():
            return self._send_json(400, {"error": "invalid_scope", "error_description": "Invalid OAuth scope."})
        self.upstream.google_tokens_issued += 1
        return self._send_json(200, {"access_token": VERTEX_ACCESS_TOKEN, "expires_in": self.upstream.google_token_expires_in, "token_type": "Bearer"})

    # -- shared ------------------------------------------------------------------------------
    def _request_id(self) -> str:
        return f"00000000-0000-4000-8000-{self.upstream.next_id():012d}"

    def _rejected(self, obj: Any) -> list[str]:
        """The fields of ``obj`` (a dict, in its order) refused by the mock's rule or the knob."""
        wanted = set(self.upstream.reject_fields)
        knob = self.knob("reject-fields")
        if knob:
            wanted |= {f.strip() for f in knob.split(",") if f.strip()}
        if not wanted or not isinstance(obj, dict):
            return []
        return [k for k in obj if k in wanted]

    def _start_stream(self, content_type: str, extra_headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        if self._gzip_wanted():
            self.send_header("content-encoding", "gzip")
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()

    def _start_sse(self, extra_headers: dict[str, str] | None = None) -> None:
        if self._stream_mode == "bedrock-chunks":
            hdrs = dict(extra_headers or {})
            hdrs.pop("request-id", None)
            hdrs.update({"x-amzn-RequestId": self._request_id(), "X-Amzn-Bedrock-Content-Type": "application/json"})
            return self._start_stream(EVENTSTREAM_CONTENT_TYPE, hdrs)
        if self._stream_mode == "json-array":
            return self._start_stream("application/json; charset=UTF-8", extra_headers)
        super()._start_sse(extra_headers)

    def _shape_events(self, events: list[bytes]) -> list[bytes]:
        if self._stream_mode in ("bedrock-chunks", "binary", "json-array"):
            if self._garbage() in ("not_json", "not_sse"):
                return super()._shape_events(events)
            return events  # the SSE-text knobs have no meaning here
        return super()._shape_events(events)

    def _send_events(self, events: list[bytes]) -> None:
        if self._stream_mode == "bedrock-chunks":
            self._stream_mode = "binary"
            events = self._anthropic_chunks(events)
        if self._stream_mode == "binary":
            return super()._send_events(self._stream_error(events))
        if self._stream_mode == "json-array":
            objs = [_sse_json(ev) for ev in events]
            pieces = [
                ("[" if i == 0 else ",\r\n").encode() + json.dumps(o, indent=2).encode() + b"\n" for i, o in enumerate(objs)
            ]
            pieces.append(b"]")
            return super()._send_events(pieces)
        if self._azure_chat and events and events[0].startswith(b"data: "):
            # Azure's first chunk: the prompt's filter results, empty `choices`
            events = [
                _sse(
                    {
                        "choices": [],
                        "created": 0,
                        "id": "",
                        "model": "",
                        "object": "",
                        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": AZURE_FILTER_RESULTS}],
                    }
                )
            ] + events
        return super()._send_events(events)

    def _send_json(self, status: int, obj: Any, extra_headers: dict[str, str] | None = None) -> None:
        hdrs = dict(extra_headers or {})
        if status == 200 and self._azure_chat and isinstance(obj, dict) and "choices" in obj:
            obj = dict(obj)
            obj["prompt_filter_results"] = [{"prompt_index": 0, "content_filter_results": AZURE_FILTER_RESULTS}]
            obj["choices"] = [dict(c, content_filter_results=AZURE_FILTER_RESULTS) for c in obj["choices"]]
        if self._bedrock_invoke:
            hdrs.pop("request-id", None)
            hdrs["x-amzn-RequestId"] = self._request_id()
            usage = obj.get("usage") if status == 200 and isinstance(obj, dict) else None
            if isinstance(usage, dict):
                # InvokeModel's response headers (https://docs.aws.amazon.com/bedrock/latest/userguide/inference-invoke.html;
                # the cache pair as reported for prompt caching, e.g. BerriAI/litellm's Bedrock handler)
                hdrs["X-Amzn-Bedrock-Input-Token-Count"] = str(usage.get("input_tokens", 0))
                hdrs["X-Amzn-Bedrock-Output-Token-Count"] = str(usage.get("output_tokens", 0))
                hdrs["X-Amzn-Bedrock-Invocation-Latency"] = str(BEDROCK_LATENCY_MS)
                hdrs["X-Amzn-Bedrock-Cache-Read-Input-Token-Count"] = str(usage.get("cache_read_input_tokens", 0))
                hdrs["X-Amzn-Bedrock-Cache-Write-Input-Token-Count"] = str(usage.get("cache_creation_input_tokens", 0))
        super()._send_json(status, obj, hdrs)

    # -- Bedrock -----------------------------------------------------------------------------
    def _stream_error(self, frames: list[bytes]) -> list[bytes]:
        """``x-mock-stream-error: NAME``: the first half of the frames, then an ``exception``
        frame of that member of the stream union (``modelStreamErrorException``,
        ``throttlingException``, ``internalServerException``, ...), and the stream ends."""
        name = self.knob("stream-error")
        if not name:
            return frames
        # `:exception-type` is the union member's name: botocore looks the shape up by it
        return frames[: len(frames) // 2] + [exception_frame(name, f"mock upstream: {name} mid-stream")]

    def _aws_error(self, status: int, error_type: str | None, message: str, member: str = "message") -> None:
        hdrs = {"x-amzn-RequestId": self._request_id()}
        if error_type:
            hdrs["x-amzn-ErrorType"] = error_type
        data = json.dumps({member: message}, separators=(",", ":")).encode()
        self._send_body(status, data, "application/json", hdrs)

    def _bedrock_error(self, status: int, message: str | None = None) -> None:
        kind = BEDROCK_ERROR_TYPES.get(status, "InternalServerException" if status >= 500 else "ValidationException")
        self._aws_error(status, kind + BEDROCK_ERROR_NAMESPACE, message or f"mock upstream: forced status {status}")

    def _bedrock_auth(self) -> bool:
        rec, up = self.rec, self.upstream
        auth = rec.header("authorization")
        if auth is None:
            rec.auth_error = AWS_MISSING_TOKEN
            self._aws_error(403, "MissingAuthenticationTokenException", AWS_MISSING_TOKEN)
            return False
        if auth[:7].lower() == "bearer ":
            rec.auth_scheme = "bearer"
            if auth[7:].strip() in up.bedrock_api_keys:
                return True
            rec.auth_error = BEDROCK_BAD_API_KEY
            self._aws_error(403, None, BEDROCK_BAD_API_KEY, member="Message")
            return False
        rec.auth_scheme = "sigv4"
        result = verify_sigv4(
            self.command,
            rec.path,  # as sent: urlsplit keeps the percent-encoding
            rec.query,
            rec.headers,
            rec.body,
            up.aws_credentials,
            up.aws_region,
            max_skew_s=up.max_clock_skew_s,
        )
        rec.signature_verified = result.ok
        if result.ok:
            return True
        rec.auth_error = result.message
        self._aws_error(403, result.error_type, result.message or "")
        return False

    def _bedrock(self, model_id: str, op: str) -> None:
        rec = self.rec
        rec.operation, rec.model_id = op, model_id
        if not self._bedrock_auth():
            return
        forced = self.knob("status")
        if forced:
            return self._bedrock_error(int(forced))
        req = self._json_body()
        if op in ("converse", "converse-stream"):
            extra = self._rejected(req.get("additionalModelRequestFields"))
            if extra:
                return self._bedrock_error(400, bedrock_extraneous_keys_message(extra, converse=True))
            return self._converse(req, model_id, stream=op == "converse-stream")
        if "anthropic_version" not in req:
            # the schema's refusal of a body without it (the same wording family:
            # "#: required key [requests] not found", BerriAI/litellm#30314)
            return self._bedrock_error(
                400, "Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again."
            )
        extra = self._rejected(req)
        if extra:
            return self._bedrock_error(400, bedrock_extraneous_keys_message(extra))
        body = dict(req, model=model_id, stream=op == "invoke-with-response-stream")
        if body["stream"]:
            self._stream_mode = "bedrock-chunks"
        else:
            self._bedrock_invoke = True
        self._claude(body)

    def _claude(self, body: dict[str, Any]) -> None:
        """A Claude body on a cloud path (InvokeModel, Vertex ``rawPredict``): the strict
        ``anthropic`` mode's answer when the mock is strict (``auto`` too: the path is a cloud's,
        the wire Anthropic's), else the plain Anthropic answer; either goes out in the cloud's
        framing (event-stream ``chunk`` frames for InvokeModel)."""
        strict = (self.knob("strict") or self.upstream.strict_default or "").lower()
        if strict in ("auto", "anthropic"):
            return self._strict("anthropic", "/v1/messages", body)
        return self._anthropic(body)

    def _anthropic_chunks(self, events: list[bytes]) -> list[bytes]:
        """Anthropic SSE events -> InvokeModelWithResponseStream ``chunk`` frames (no ``ping``:
        Bedrock sends none), ``message_stop`` with ``amazon-bedrock-invocationMetrics``
        (field names as Bedrock sends them, e.g. ``{"type":"message_stop","amazon-bedrock-invocationMetrics":
        {"inputTokenCount":7,"outputTokenCount":126,"invocationLatency":4069,"firstByteLatency":1117,
        "cacheReadInputTokenCount":14486,"cacheWriteInputTokenCount":2238}}``)."""
        objs = [_sse_json(ev) for ev in events]
        usage: dict[str, Any] = {}
        for o in objs:
            if o.get("type") == "message_start":
                usage.update((o.get("message") or {}).get("usage") or {})
            if o.get("type") == "message_delta":
                usage.update(o.get("usage") or {})
        frames = []
        for o in objs:
            if o.get("type") == "ping":
                continue
            if o.get("type") == "message_stop" and usage:
                o = dict(o)
                o["amazon-bedrock-invocationMetrics"] = {
                    "inputTokenCount": usage.get("input_tokens", 0),
                    "outputTokenCount": usage.get("output_tokens", 0),
                    "invocationLatency": BEDROCK_LATENCY_MS,
                    "firstByteLatency": BEDROCK_FIRST_BYTE_MS,
                    "cacheReadInputTokenCount": usage.get("cache_read_input_tokens", 0),
                    "cacheWriteInputTokenCount": usage.get("cache_creation_input_tokens", 0),
                }
            raw = json.dumps(o, separators=(",", ":")).encode()
            frames.append(event_frame("chunk", _padded({"bytes": base64.b64encode(raw).decode()}, len(frames))))
        return frames

    def _converse(self, req: dict[str, Any], model_id: str, stream: bool) -> None:
        text = self._reply_text()
        usage = None if self._usage_variant() == "none" else json.loads(json.dumps(BEDROCK_CONVERSE_USAGE))
        reasoning = self._reasoning()
        hdrs = {"x-amzn-RequestId": self._request_id()}
        if not stream:
            content: list[dict[str, Any]] = []
            if reasoning:
                content += [
                    {"reasoningContent": {"reasoningText": {"text": REASONING_TEXT, "signature": ANTHROPIC_SIGNATURE}}},
                    {"reasoningContent": {"redactedContent": BEDROCK_REDACTED}},
                ]
            content.append({"text": text})
            out: dict[str, Any] = {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": "end_turn",
                "metrics": {"latencyMs": BEDROCK_LATENCY_MS},
            }
            if usage is not None:
                out["usage"] = usage
            return self._send_json(200, out, hdrs)
        payloads: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
        index = 0
        if reasoning:
            # Text and reasoning blocks have no contentBlockStart (only toolUse / toolResult /
            # image do: ContentBlockStart in the model); the first delta opens them.
            payloads += [
                ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": p}}})
                for p in _pieces(REASONING_TEXT, 2)
            ]
            payloads += [
                ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": ANTHROPIC_SIGNATURE}}}),
                ("contentBlockStop", {"contentBlockIndex": 0}),
                ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"reasoningContent": {"redactedContent": BEDROCK_REDACTED}}}),
                ("contentBlockStop", {"contentBlockIndex": 1}),
            ]
            index = 2
        payloads += [("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": p}}) for p in _pieces(text)]
        payloads += [("contentBlockStop", {"contentBlockIndex": index}), ("messageStop", {"stopReason": "end_turn"})]
        meta: dict[str, Any] = {"metrics": {"latencyMs": BEDROCK_LATENCY_MS}}
        if usage is not None:
            meta["usage"] = usage
        payloads.append(("metadata", meta))
        frames = [event_frame(kind, _padded(p, i)) for i, (kind, p) in enumerate(payloads)]
        self._stream_mode = "binary"
        self._start_stream(EVENTSTREAM_CONTENT_TYPE, hdrs)
        self._send_events(frames)

    # -- Vertex AI ---------------------------------------------------------------------------
    def _vertex(self, m: re.Match[str]) -> None:
        rec = self.rec
        rec.operation, rec.model_id = m["method"], m["model"]
        anthropic = m["publisher"] == "anthropic"
        auth = rec.header("authorization")
        if auth is None or auth[:7].lower() != "bearer ":
            rec.auth_error = VERTEX_MISSING_CREDENTIAL
            return self._send_json(401, _google_error(401, VERTEX_MISSING_CREDENTIAL, "UNAUTHENTICATED"))
        rec.auth_scheme = "bearer"
        if auth[7:].strip() not in self.upstream.vertex_tokens:
            rec.auth_error = VERTEX_INVALID_CREDENTIAL
            return self._send_json(401, _google_error(401, VERTEX_INVALID_CREDENTIAL, "UNAUTHENTICATED"))
        forced = self.knob("status")
        if forced:
            status = int(forced)
            if anthropic:
                return self._send_json(status, _error_body("anthropic", status))
            return self._send_json(status, _google_error(status, f"mock upstream: forced status {status}", _google_status(status)))
        req = self._json_body()
        extra = self._rejected(req)
        method = m["method"]
        if anthropic:
            if m["model"] == "count-tokens" and method == "rawPredict":
                return self._send_json(200, {"input_tokens": _rough_tokens(rec.body)})
            if extra:
                # Anthropic's own refusal (anthropics/claude-code#4378: "...: Extra inputs are not permitted")
                msg = "\n".join(f"{k}: Extra inputs are not permitted" for k in extra)
                return self._send_json(400, _error_body("anthropic", 400, msg))
            if method not in ("rawPredict", "streamRawPredict"):
                return self._send_json(404, _google_error(404, f"mock upstream: no {method} for anthropic", "NOT_FOUND"))
            body = dict(req, stream=method == "streamRawPredict")
            body.setdefault("model", m["model"])
            return self._claude(body)
        if extra:
            # Google's JSON-mapping refusal (https://cloud.google.com/apis/design/errors;
            # e.g. google-gemini/gemini-cli reports 'Invalid JSON payload received. Unknown name "x": Cannot find field.')
            msg = "\n".join(f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.' for k in extra)
            return self._send_json(400, _google_error(400, msg, "INVALID_ARGUMENT"))
        if method == "countTokens":
            return self._send_json(200, {"totalTokens": _rough_tokens(rec.body)})
        if method == "generateContent":
            return self._gemini(req, rec.path, stream=False)
        if method == "streamGenerateContent":
            if "sse" not in rec.query_params.get("alt", []):
                self._stream_mode = "json-array"
            return self._gemini(req, rec.path, stream=True)
        return self._send_json(404, _google_error(404, f"mock upstream: no {method} for google", "NOT_FOUND"))

    # -- Azure OpenAI ------------------------------------------------------------------------
    def _azure(self, op: str, deployment: str | None) -> None:
        rec, up = self.rec, self.upstream
        rec.operation, rec.model_id = op, deployment
        key = rec.header("api-key")
        auth = rec.header("authorization")
        if key is not None:
            rec.auth_scheme = "api-key"
            ok = key.strip() in up.azure_api_keys
        elif auth is not None and auth[:7].lower() == "bearer ":
            rec.auth_scheme = "bearer"
            ok = auth[7:].strip() in up.azure_bearer_tokens
        else:
            ok = False
        if not ok:
            rec.auth_error = AZURE_ACCESS_DENIED
            return self._send_json(401, {"error": {"code": "401", "message": AZURE_ACCESS_DENIED}})
        if deployment is not None and not rec.query_params.get("api-version"):
            # a deployment route without api-version is not found (Azure's 404 body)
            return self._send_json(404, {"error": {"code": "404", "message": "Resource not found"}})
        forced = self.knob("status")
        if forced:
            return self._send_json(int(forced), _error_body("openai", int(forced)))
        req = self._json_body()
        extra = self._rejected(req)
        if extra:
            # older Azure API versions' refusal of an unknown parameter (coroot/coroot#698)
            msg = f"Unrecognized request argument supplied: {', '.join(extra)}"
            return self._send_json(400, {"error": {"message": msg, "type": "invalid_request_error", "param": None, "code": None}})
        if deployment is not None:
            req.setdefault("model", deployment)
        if op == "chat/completions":
            self._azure_chat = True
            return self._openai_chat(req)
        return self._responses(req)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _sse(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


def _sse_json(event: bytes) -> dict[str, Any]:
    """The JSON of an SSE event's ``data:`` line. Lines end at CR or LF only (the SSE spec):
    ``str.splitlines`` would also split inside a JSON string at U+2028 or U+0085, which the
    strict mock's texts carry."""
    for line in event.decode().replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line.startswith("data:"):
            return json.loads(line[5:].strip())
    raise ValueError(f"no data line in {event!r}")


_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _google_status(status: int) -> str:
    """The google.rpc.Code name for an HTTP status (https://cloud.google.com/apis/design/errors#handling_errors)."""
    return _GOOGLE_STATUS.get(status, "UNKNOWN")


def _google_error(status: int, message: str, status_name: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": status_name}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9200)
    ap.add_argument("--sse-delay", type=float, default=0.02, help="seconds between stream events")
    args = ap.parse_args(argv)

    def on_request(rec: RecordedRequest) -> None:
        print(f"[cloud-mock] {rec.method} {rec.path}{'?' + rec.query if rec.query else ''} ({len(rec.body)} bytes)", file=sys.stderr, flush=True)

    mock = CloudMock(args.host, args.port, sse_delay=args.sse_delay, on_request=on_request).start()
    print(f"cloud mock listening on {mock.url}", file=sys.stderr, flush=True)
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
