//! The clouds' routes through the proxy (issue 29): Claude and Gemini on Google Vertex AI,
//! Azure OpenAI deployments with the route's `models` table, Claude in Microsoft Foundry.
//! Each request goes to a mock upstream on the cloud's own paths; the assertions read what
//! the mock received. Amazon Bedrock: Claude's InvokeModel with an API key, signed requests
//! forwarded as signed when the proxy has no AWS credentials, betas in the body array (the
//! Converse wire: `tests/converse.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use common::*;
use serde_json::{json, Value};

/// Vertex AI's path prefix for a project and region.
const VERTEX: &str = "/vertex/v1/projects/my-proj/locations/us-east5/publishers";
/// An OAuth access token as `gcloud auth print-access-token` prints one.
const GOOGLE_TOKEN: (&str, &str) = ("authorization", "Bearer ya29.a0-test-token");

/// A SigV4 `Authorization` as boto3 sends one (the signature is not checked here).
const SIGV4: (&str, &str) = (
    "authorization",
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, \
     SignedHeaders=content-type;host;x-amz-date, \
     Signature=0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd",
);
/// A Bedrock API key, as Claude Code sends `AWS_BEARER_TOKEN_BEDROCK`.
const BEDROCK_KEY: (&str, &str) = ("authorization", "Bearer ABSKQmVkcm9ja0FQSUtleQ==");

/// A proxy with one route `name` on `/{name}` to `upstream`, on provider row `provider`, with
/// `extra` route keys (TOML lines).
async fn one_route(upstream: &str, name: &str, provider: &str, extra: &str) -> Proxy {
    let route = format!(
        "[[routes]]\nname = \"{name}\"\nprefix = \"/{name}\"\nupstream = \"{{upstream}}\"\n\
         provider = \"{provider}\"\n{extra}"
    );
    start_proxy(&config(upstream, &route)).await
}

/// [`anthropic_screenshots`] as a cloud sends it: no `model` (the path names it), the cloud's
/// `anthropic_version`.
fn cloud_screenshots(anthropic_version: &str) -> Value {
    let mut body: Value = serde_json::from_str(&anthropic_screenshots(21, 2400, 1350)).unwrap();
    let obj = body.as_object_mut().unwrap();
    obj.remove("model");
    obj.insert("anthropic_version".into(), json!(anthropic_version));
    body
}

fn config(upstream: &str, routes: &str) -> String {
    let dir = tempfile::tempdir().unwrap().keep();
    format!(
        "[state]\npath = {:?}\n\n{}",
        dir.join("state.db").display().to_string(),
        routes.replace("{upstream}", upstream)
    )
}

fn ok() -> Handler {
    Arc::new(|_r: &Recorded| json_response(200, r#"{"ok":true}"#))
}

/// Every `cache_control` value of `v`'s system blocks and message blocks, in order.
fn markers(v: &Value) -> Vec<Value> {
    let system = v["system"].as_array().into_iter().flatten();
    let blocks = v["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten());
    system
        .chain(blocks)
        .filter_map(|b| b.get("cache_control").cloned())
        .collect()
}

/// Claude on Vertex AI (`:rawPredict`, no `model` in the body): the Anthropic passes run —
/// image eviction, automatic breakpoints with a 1-hour TTL (no beta header: Vertex takes
/// `"ttl": "1h"` as is) — and the model is the path's.
#[tokio::test]
async fn claude_on_vertex_gets_the_anthropic_passes() {
    let mock = start_mock(ok()).await;
    let proxy = one_route(
        &mock.url(),
        "vertex",
        "vertex",
        "cache_breakpoints = \"auto\"\ncache_ttl = \"1h\"\n",
    )
    .await;
    let mut body = cloud_screenshots("vertex-2023-10-16");
    body.as_object_mut().unwrap().insert(
        "system".into(),
        json!([{"type": "text", "text": "You drive a browser."}]),
    );
    let path = format!("{VERTEX}/anthropic/models/claude-sonnet-4-5@20250929:rawPredict");
    let (status, headers, _) = send(
        &client(),
        &proxy.url(&path),
        &[GOOGLE_TOKEN],
        body.to_string(),
    )
    .await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.contains("images_retired=11;"), "{rewrites}");
    assert!(rewrites.contains("breakpoints_added=3;"), "{rewrites}");
    let up = mock.last();
    assert_eq!(
        up.path_and_query,
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    );
    assert_eq!(up.headers["authorization"], "Bearer ya29.a0-test-token");
    assert!(up.headers.get("anthropic-beta").is_none());
    let sent: Value = serde_json::from_slice(&up.body).unwrap();
    assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
    assert!(sent.get("model").is_none());
    let hour = json!({"type": "ephemeral", "ttl": "1h"});
    assert_eq!(markers(&sent), vec![hour; 3]);
    let retired = cachekeeper::texts::RETIRED_IMAGE;
    assert_eq!(
        sent["messages"][2]["content"][0]["content"][1]["text"],
        retired
    );
    assert_eq!(
        sent["messages"][42]["content"][0]["content"][1]["type"],
        "image"
    );
    proxy.stop().await;
}

/// A request with no credential on a Vertex AI route (Claude Code with
/// `CLAUDE_CODE_SKIP_VERTEX_AUTH=1` and no token source): the proxy's own 401, in the
/// Anthropic shape for a Claude path and Gemini's for a Gemini path, saying what to send;
/// nothing goes upstream. An express-mode API key is a credential.
#[tokio::test]
async fn vertex_without_a_credential_is_told_what_to_send() {
    let mock = start_mock(ok()).await;
    let proxy = one_route(&mock.url(), "vertex", "vertex", "").await;
    let c = client();
    let claude = format!("{VERTEX}/anthropic/models/claude-opus-4-1:streamRawPredict");
    let (status, _, body) = send(&c, &proxy.url(&claude), &[], "{}").await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("cachekeeper: route vertex forwards to vertex, which needs a credential"),
        "{message}"
    );
    assert!(
        message.contains("CLAUDE_CODE_SKIP_VERTEX_AUTH=1"),
        "{message}"
    );
    assert!(
        message.contains("gcloud auth print-access-token"),
        "{message}"
    );
    let gemini = format!("{VERTEX}/google/models/gemini-2.5-pro:generateContent");
    let (status, _, body) = send(&c, &proxy.url(&gemini), &[], "{}").await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], 401);
    assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
    assert!(mock.requests.lock().unwrap().is_empty());
    // A bearer token or an API key goes through.
    for auth in [GOOGLE_TOKEN, ("x-goog-api-key", "AIza-express")] {
        let (status, _, _) = send(&c, &proxy.url(&gemini), &[auth], r#"{"contents":[]}"#).await;
        assert_eq!(status, 200);
    }
    assert_eq!(mock.requests.lock().unwrap().len(), 2);
    proxy.stop().await;
}

/// Gemini 3 on Vertex AI: the model is read from the path (the body names none), and a
/// function call replayed without its thought signature gets the documented placeholder, as
/// on Google's own API (Vertex validates signatures too).
#[tokio::test]
async fn gemini_on_vertex_reads_the_model_from_the_path() {
    let mock = start_mock(ok()).await;
    let proxy = one_route(&mock.url(), "vertex", "vertex", "").await;
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "weather in Paris?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 18}}}]}
    ]});
    let path = format!("{VERTEX}/google/models/gemini-3-pro-preview:streamGenerateContent?alt=sse");
    let (status, headers, _) = send(
        &client(),
        &proxy.url(&path),
        &[GOOGLE_TOKEN],
        body.to_string(),
    )
    .await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        rewrites.contains("restored_placeholder_signature=1;"),
        "{rewrites}"
    );
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(
        sent["contents"][1]["parts"][0]["thoughtSignature"],
        "skip_thought_signature_validator"
    );
    proxy.stop().await;
}

/// Azure OpenAI: the deployment in the path is the request's model, mapped by the route's
/// `models` table. A deployment serving DeepSeek-R1 (a must-echo model) gets the
/// `reasoning_content` pad on its tool-call turn; the same request to an unmapped deployment
/// name does not (the name says nothing), and the `api-key` header goes upstream untouched.
#[tokio::test]
async fn azure_deployments_map_to_their_models() {
    let mock = start_mock(ok()).await;
    let proxy = one_route(
        &mock.url(),
        "azure",
        "azure-openai",
        "models = { \"prod-r1\" = \"deepseek-r1\" }\n",
    )
    .await;
    let body = json!({"messages": [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}
    ]})
    .to_string();
    let c = client();
    let key = ("api-key", "azure-key-1");
    let mapped = "/azure/openai/deployments/prod-r1/chat/completions?api-version=2024-10-21";
    let (status, _, _) = send(&c, &proxy.url(mapped), &[key], body.clone()).await;
    assert_eq!(status, 200);
    let up = mock.last();
    assert_eq!(
        up.path_and_query,
        "/openai/deployments/prod-r1/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(up.headers["api-key"], "azure-key-1");
    let sent: Value = serde_json::from_slice(&up.body).unwrap();
    assert_eq!(sent["messages"][1]["reasoning_content"], " ");
    let other = "/azure/openai/deployments/prod-x/chat/completions?api-version=2024-10-21";
    let (status, _, _) = send(&c, &proxy.url(other), &[key], body.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(mock.last().body, body.as_bytes());
    proxy.stop().await;
}

/// Amazon Bedrock, Claude's InvokeModel (the model in the path, an Anthropic body): a request
/// signed with SigV4 goes upstream exactly as the client signed it — its bytes and its `host`
/// — when the proxy cannot sign it again (no AWS credentials of its own here, or other ones:
/// `body=signed`, no retry; re-signing is tests/e2e/test_clouds.py's); the same request with
/// a Bedrock API key (`Bearer`) gets the Anthropic passes (images retired).
#[tokio::test]
async fn bedrock_invoke_model_signed_untouched_api_key_rewritten() {
    let mock = start_mock(ok()).await;
    let proxy = one_route(&mock.url(), "bedrock", "bedrock", "").await;
    let body = cloud_screenshots("bedrock-2023-05-31").to_string();
    let c = client();
    let invoke = "/bedrock/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke";
    let (status, headers, _) = send(&c, &proxy.url(invoke), &[SIGV4], body.clone()).await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.contains("images_retired=11;"), "{rewrites}");
    assert!(rewrites.ends_with("body=signed"), "{rewrites}");
    let up = mock.last();
    assert_eq!(up.body, body.as_bytes());
    // The host the client signed: the proxy's own address, not the upstream's.
    assert_eq!(up.headers["host"], proxy.addr.to_string());
    assert_eq!(
        up.path_and_query,
        "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
    );

    let (status, headers, _) = send(&c, &proxy.url(invoke), &[BEDROCK_KEY], body.clone()).await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.ends_with("body=rewritten"), "{rewrites}");
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(
        sent["messages"][2]["content"][0]["content"][1]["text"],
        cachekeeper::texts::RETIRED_IMAGE
    );
    assert_ne!(mock.last().headers["host"], proxy.addr.to_string());
    proxy.stop().await;
}

/// Bedrock's 400 for a key Claude on Bedrock does not take (`extraneous key [service_tier]`):
/// with a Bedrock API key the proxy learns it and retries once without it; a SigV4-signed
/// request the proxy does not sign again is never retried changed, so the client gets the 400
/// as Bedrock sent it.
#[tokio::test]
async fn bedrock_unknown_key_retried_with_an_api_key_not_when_signed() {
    let mock = start_mock(Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if v.get("service_tier").is_some() {
            json_response(
                400,
                r#"{"message":"Malformed input request: #: extraneous key [service_tier] is not permitted, please reformat your input and try again."}"#,
            )
        } else {
            json_response(200, r#"{"ok":true}"#)
        }
    }))
    .await;
    let proxy = one_route(&mock.url(), "bedrock", "bedrock", "").await;
    let body = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9,
        "service_tier": "auto", "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let c = client();
    let invoke = "/bedrock/model/anthropic.claude-haiku-4-5-20251001-v1:0/invoke";
    let (status, _, answer) = send(&c, &proxy.url(invoke), &[SIGV4], body.clone()).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&answer).contains("extraneous key [service_tier]"));
    assert_eq!(mock.requests.lock().unwrap().len(), 1);

    let (status, headers, _) = send(&c, &proxy.url(invoke), &[BEDROCK_KEY], body.clone()).await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        rewrites.ends_with("retried_without=param:service_tier"),
        "{rewrites}"
    );
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert!(sent.get("service_tier").is_none());
    assert_eq!(mock.requests.lock().unwrap().len(), 3);
    proxy.stop().await;
}

/// Claude's InvokeModel on Bedrock carries betas in the body's `anthropic_beta` array, and
/// Bedrock refuses one it does not take with `invalid beta flag`, naming none (so the one
/// value a request carried is to blame): with that value on `[reasoning] droppable_betas`,
/// the proxy learns it from the array it sent, retries once without it (the member goes when
/// no value is left), and leaves it out of later arrays up front; the `anthropic-beta` header
/// plays no part.
#[tokio::test]
async fn bedrock_body_betas_are_learned_and_removed_from_the_array() {
    const FOO: &str = "foo-beta-2025-01-01";
    let mock = start_mock(Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let betas = v["anthropic_beta"].as_array().cloned().unwrap_or_default();
        if betas.iter().any(|b| b == FOO) {
            json_response(
                400,
                r#"{"message":"ValidationException: invalid beta flag"}"#,
            )
        } else {
            json_response(200, r#"{"ok":true}"#)
        }
    }))
    .await;
    let route = format!(
        "[[routes]]\nname = \"bedrock\"\nprefix = \"/bedrock\"\nupstream = \"{{upstream}}\"\n\
         provider = \"bedrock\"\n\n[reasoning]\ndroppable_betas = [\"{FOO}\"]\n"
    );
    let proxy = start_proxy(&config(&mock.url(), &route)).await;
    let body = |betas: Value| {
        json!({"anthropic_version": "bedrock-2023-05-31", "anthropic_beta": betas,
               "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
    };
    let c = client();
    let invoke = proxy.url("/bedrock/model/anthropic.claude-haiku-4-5-20251001-v1:0/invoke");
    let (status, headers, _) = send(&c, &invoke, &[BEDROCK_KEY], body(json!([FOO]))).await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        rewrites.ends_with(&format!("retried_without=beta:{FOO}")),
        "{rewrites}"
    );
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 2, "one retry");
    let sent: Value = serde_json::from_slice(&reqs[1].body).unwrap();
    assert!(sent.get("anthropic_beta").is_none(), "{sent}");
    assert!(reqs[1].headers.get("anthropic-beta").is_none());
    // Later requests: removed up front, the other values kept.
    let two = body(json!([FOO, "keep-2025-02-02"]));
    let (status, _, _) = send(&c, &invoke, &[BEDROCK_KEY], two).await;
    assert_eq!(status, 200);
    assert_eq!(mock.requests.lock().unwrap().len(), 3);
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(sent["anthropic_beta"], json!(["keep-2025-02-02"]));
    proxy.stop().await;
}

/// The proxy's own errors on a Bedrock route take Bedrock's shape on InvokeModel as on
/// Converse — `{"message"}` with the kind in `x-amzn-ErrorType` — so boto3 raises its modeled
/// exception and `AnthropicBedrock` reads the message. Here the upstream is down (502).
#[tokio::test]
async fn bedrock_proxy_errors_are_bedrock_shaped() {
    let closed = format!("http://127.0.0.1:{}", free_port());
    let proxy = one_route(&closed, "bedrock", "bedrock", "").await;
    let c = client();
    let model = "/bedrock/model/anthropic.claude-haiku-4-5-20251001-v1:0";
    let invoke = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9,
                        "messages": [{"role": "user", "content": "hi"}]});
    let converse = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    for (op, body) in [("invoke", invoke), ("converse", converse)] {
        let url = proxy.url(&format!("{model}/{op}"));
        let (status, headers, body) = send(&c, &url, &[BEDROCK_KEY], body.to_string()).await;
        assert_eq!(status, 502, "{op}");
        assert_eq!(
            headers["x-amzn-errortype"], "InternalServerException",
            "{op}"
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        let message = v["message"].as_str().unwrap();
        assert!(message.starts_with("cachekeeper: "), "{op}: {message}");
        assert_eq!(v.as_object().unwrap().len(), 1, "{op}: {v}");
    }
    proxy.stop().await;
}
