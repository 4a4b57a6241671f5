//! Amazon Bedrock Converse through the proxy (issue 29): a route with `provider = "bedrock"`
//! to a mock upstream on Bedrock's paths (`/model/{modelId}/converse`, `/converse-stream`).
//! With a Bedrock API key (`Authorization: Bearer`) the Converse passes run: images retired,
//! `cachePoint` breakpoints for the models that cache, usage read from the JSON body and from
//! the event stream, dropped `reasoningContent` restored, an unknown key of
//! `additionalModelRequestFields` learned and retried without. A SigV4-signed request goes
//! upstream as signed.
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

/// A Bedrock API key, as `AWS_BEARER_TOKEN_BEDROCK` sends it.
const BEDROCK_KEY: (&str, &str) = ("authorization", "Bearer ABSKQmVkcm9ja0FQSUtleQ==");
/// A SigV4 `Authorization` as boto3 sends one (the signature is not checked here).
const SIGV4: (&str, &str) = (
    "authorization",
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, \
     SignedHeaders=content-type;host;x-amz-date, \
     Signature=0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd",
);
/// Claude on Bedrock, by its cross-region inference profile id.
const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

/// A fixture under `tests/fixtures/responses/`.
fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/responses/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A proxy with one Bedrock route on `/bedrock` to `upstream`, with `extra` route keys and
/// `top` lines before the route (e.g. a `[reasoning]` section).
async fn bedrock(upstream: &str, extra: &str, top: &str) -> Proxy {
    let dir = tempfile::tempdir().unwrap().keep();
    let toml = format!(
        "{top}\n[state]\npath = {:?}\n\n[[routes]]\nname = \"bedrock\"\nprefix = \"/bedrock\"\n\
         upstream = \"{upstream}\"\nprovider = \"bedrock\"\n{extra}",
        dir.join("state.db").display().to_string(),
    );
    start_proxy(&toml).await
}

fn path(model: &str, operation: &str) -> String {
    format!("/bedrock/model/{model}/{operation}")
}

/// A Converse body with `n` tool-result screenshots of `w`×`h`, a system prompt and a tool.
fn screenshots(n: usize, w: u32, h: u32) -> Value {
    let mut messages = vec![json!({"role": "user", "content": [{"text": "go"}]})];
    for i in 0..n {
        messages.push(json!({"role": "assistant", "content": [
            {"toolUse": {"toolUseId": format!("tooluse_{i}"), "name": "screenshot", "input": {}}}]}));
        messages.push(json!({"role": "user", "content": [
            {"toolResult": {"toolUseId": format!("tooluse_{i}"), "content": [
                {"text": format!("frame {i}")},
                {"image": {"format": "png", "source": {"bytes": fake_png_b64(w, h, 64 + i)}}}]}}]}));
    }
    json!({"system": [{"text": "You drive a browser."}],
        "toolConfig": {"tools": [{"toolSpec": {"name": "screenshot",
            "inputSchema": {"json": {"type": "object"}}}}]},
        "inferenceConfig": {"maxTokens": 512},
        "messages": messages})
}

fn ok() -> Handler {
    Arc::new(|_r: &Recorded| {
        json_response(
            200,
            &String::from_utf8(fixture("converse_body.json")).unwrap(),
        )
    })
}

/// Every `cachePoint` block's place in `v`: `system[i]`, `tools[i]`, `messages[i][j]`.
fn points(v: &Value) -> Vec<String> {
    let is_point = |b: &Value| b.get("cachePoint").is_some();
    let mut out = Vec::new();
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    for (i, b) in list(&v["system"]).iter().enumerate() {
        if is_point(b) {
            out.push(format!("system[{i}]"));
        }
    }
    for (i, b) in list(&v["toolConfig"]["tools"]).iter().enumerate() {
        if is_point(b) {
            out.push(format!("tools[{i}]"));
        }
    }
    for (i, m) in list(&v["messages"]).iter().enumerate() {
        for (j, b) in list(&m["content"]).iter().enumerate() {
            if is_point(b) {
                out.push(format!("messages[{i}][{j}]"));
            }
        }
    }
    out
}

/// With an API key: 21 screenshots, the oldest retired in a batch (their `toolUseId` and text
/// kept, `{"text": …}` in place of the image), and four cache points after the tool, the
/// system prompt and the last two user messages. The usage of the JSON body is read
/// (`inputTokens` is the uncached input). The same body signed with SigV4 goes as signed.
#[tokio::test]
async fn converse_images_evicted_and_cache_points_placed() {
    let mock = start_mock(ok()).await;
    let proxy = bedrock(&mock.url(), "cache_breakpoints = \"auto\"\n", "").await;
    let body = screenshots(21, 2400, 1350).to_string();
    let c = client();
    let (status, headers, _) = send(
        &c,
        &proxy.url(&path(CLAUDE, "converse")),
        &[BEDROCK_KEY],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.contains("images_retired=11;"), "{rewrites}");
    assert!(rewrites.contains("breakpoints_added=4;"), "{rewrites}");
    let up = mock.last();
    assert_eq!(up.path_and_query, format!("/model/{CLAUDE}/converse"));
    assert_eq!(up.headers["authorization"], BEDROCK_KEY.1);
    let sent: Value = serde_json::from_slice(&up.body).unwrap();
    let retired = &sent["messages"][2]["content"][0]["toolResult"];
    assert_eq!(retired["toolUseId"], "tooluse_0");
    assert_eq!(retired["content"][0]["text"], "frame 0");
    assert_eq!(
        retired["content"][1],
        json!({"text": cachekeeper::texts::RETIRED_IMAGE})
    );
    let kept = &sent["messages"][42]["content"][0]["toolResult"]["content"][1];
    assert_eq!(kept["image"]["format"], "png");
    assert_eq!(
        points(&sent),
        [
            "system[1]",
            "tools[1]",
            "messages[40][1]",
            "messages[42][1]"
        ]
    );
    let model = format!("route=\"bedrock\",model=\"{CLAUDE}\"");
    let read = metric(
        &proxy,
        &format!("cachekeeper_cache_read_tokens_total{{{model}}}"),
    )
    .await;
    assert_eq!(read, Some(5120.0));
    let uncached = format!("cachekeeper_uncached_input_tokens_total{{{model}}}");
    assert_eq!(metric(&proxy, &uncached).await, Some(12.0));

    let (status, headers, _) = send(
        &c,
        &proxy.url(&path(CLAUDE, "converse")),
        &[SIGV4],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.ends_with("body=signed"), "{rewrites}");
    assert_eq!(mock.last().body, body.as_bytes());
    proxy.stop().await;
}

/// Cache points only for the models whose cache takes them: Amazon Nova gets none on its
/// tools, a Llama model none at all (Bedrock caches no prompt for it).
#[tokio::test]
async fn cache_points_follow_the_model() {
    let mock = start_mock(ok()).await;
    let proxy = bedrock(&mock.url(), "cache_breakpoints = \"auto\"\n", "").await;
    let body = screenshots(1, 100, 100).to_string();
    let c = client();
    let nova = "us.amazon.nova-pro-v1:0";
    let (status, _, _) = send(
        &c,
        &proxy.url(&path(nova, "converse")),
        &[BEDROCK_KEY],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(
        points(&sent),
        ["system[1]", "messages[0][1]", "messages[2][1]"]
    );
    let llama = "us.meta.llama3-3-70b-instruct-v1:0";
    let (status, headers, _) = send(
        &c,
        &proxy.url(&path(llama, "converse")),
        &[BEDROCK_KEY],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.contains("breakpoints_added=0;"), "{rewrites}");
    assert!(rewrites.ends_with("body=unchanged"), "{rewrites}");
    assert_eq!(mock.last().body, body.as_bytes());
    proxy.stop().await;
}

/// ConverseStream: the mock answers the recorded event-stream frames
/// (`converse_tool.bin`); the client gets them byte for byte, the proxy reads the usage
/// from the `metadata` event and captures the turn. The next request, which echoes that turn
/// without its two `reasoningContent` blocks, gets them back before the `toolUse`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converse_stream_usage_read_and_reasoning_restored() {
    let frames = fixture("converse_tool.bin");
    let body_frames = frames.clone();
    let mock = start_mock(Arc::new(move |_r: &Recorded| {
        hyper::Response::builder()
            .status(200)
            .header("content-type", "application/vnd.amazon.eventstream")
            .body(full(body_frames.clone()))
            .unwrap()
    }))
    .await;
    let proxy = bedrock(&mock.url(), "", "").await;
    let c = client();
    let first = String::from_utf8(fixture("converse_request.json")).unwrap();
    let url = proxy.url(&path(CLAUDE, "converse-stream"));
    let (status, _, answer) = send(&c, &url, &[BEDROCK_KEY], first).await;
    assert_eq!(status, 200);
    assert_eq!(answer.to_vec(), frames, "the stream passes byte for byte");
    let model = format!("route=\"bedrock\",model=\"{CLAUDE}\"");
    let write = format!("cachekeeper_cache_write_tokens_total{{{model}}}");
    assert_eq!(metric(&proxy, &write).await, Some(248.0));
    let output = format!("cachekeeper_output_tokens_total{{{model}}}");
    assert_eq!(metric(&proxy, &output).await, Some(7.0));

    let full_next: Value = serde_json::from_slice(&fixture("converse_next_request.json")).unwrap();
    let mut dropped = full_next.clone();
    dropped["messages"][1]["content"]
        .as_array_mut()
        .unwrap()
        .drain(0..2);
    let mut restored = None;
    for _ in 0..20 {
        let (status, headers, _) = send(&c, &url, &[BEDROCK_KEY], dropped.to_string()).await;
        assert_eq!(status, 200);
        let rewrites = headers["x-cachekeeper-rewrites"]
            .to_str()
            .unwrap()
            .to_owned();
        if rewrites.contains("restored_thinking=1;") {
            restored = Some(rewrites);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let rewrites = restored.expect("the reasoning was restored");
    assert!(
        rewrites.contains("restored_redacted_thinking=1;"),
        "{rewrites}"
    );
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(sent["messages"][1], full_next["messages"][1]);
    proxy.stop().await;
}

/// An AWS event stream (ConverseStream here) is a stream, as SSE is: the response carries
/// `x-accel-buffering: no` and the turn is recorded `streamed` (what `report` and the
/// dashboard show). Unlike SSE, no error text may ever be appended to its binary frames, so
/// its `content-length` stays. The failing input: both were as for a JSON body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_event_stream_is_streamed_unbuffered_and_never_appended_to() {
    use http_body_util::BodyExt as _;

    let frames = fixture("converse_tool.bin");
    let body_frames = frames.clone();
    let mock = start_mock(Arc::new(move |_r: &Recorded| {
        hyper::Response::builder()
            .status(200)
            .header("content-type", "application/vnd.amazon.eventstream")
            .header("content-length", body_frames.len())
            .body(full(body_frames.clone()))
            .unwrap()
    }))
    .await;
    let proxy = bedrock(&mock.url(), "", "").await;
    let c = client();
    let request = String::from_utf8(fixture("converse_request.json")).unwrap();
    let url = proxy.url(&path(CLAUDE, "converse-stream"));
    let session = ("x-cachekeeper-session", "aws-event-stream");
    let (status, headers, answer) = send(&c, &url, &[BEDROCK_KEY, session], request).await;
    assert_eq!(status, 200);
    assert_eq!(answer.to_vec(), frames);
    assert_eq!(headers["x-accel-buffering"], "no");
    assert_eq!(headers["content-length"], frames.len().to_string().as_str());

    // The turn reaches the store through its writer.
    let api = proxy.url("/_cachekeeper/api/sessions/aws-event-stream");
    let mut detail = Value::Null;
    for _ in 0..100 {
        let req = http::Request::get(&api)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        let ok = resp.status() == 200;
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        if ok {
            detail = serde_json::from_slice(&body).unwrap();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(detail["turns"][0]["streamed"], true, "{detail}");
    proxy.stop().await;
}

/// Bedrock's 400 for a key of `additionalModelRequestFields` the model does not take
/// (`extraneous key [top_k]`, wrapped in "The model returned the following errors: "): with an
/// API key the proxy learns it (`top_k` on the route's `droppable_params`) and retries once
/// without it; the next request leaves it out up front.
#[tokio::test]
async fn unknown_model_field_retried_without_it() {
    let mock = start_mock(Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if v["additionalModelRequestFields"].get("top_k").is_some() {
            let mut resp = json_response(
                400,
                r#"{"message":"The model returned the following errors: Malformed input request: #: extraneous key [top_k] is not permitted, please reformat your input and try again."}"#,
            );
            resp.headers_mut()
                .insert("x-amzn-errortype", "ValidationException".parse().unwrap());
            resp
        } else {
            json_response(
                200,
                &String::from_utf8(fixture("converse_body.json")).unwrap(),
            )
        }
    }))
    .await;
    let proxy = bedrock(
        &mock.url(),
        "",
        "[reasoning]\ndroppable_params = [\"top_k\"]\n",
    )
    .await;
    let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "additionalModelRequestFields": {"top_k": 40, "thinking": {"type": "enabled", "budget_tokens": 1024}}})
    .to_string();
    let c = client();
    let url = proxy.url(&path(CLAUDE, "converse"));
    let (status, headers, _) = send(&c, &url, &[BEDROCK_KEY], body.clone()).await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        rewrites.contains("retried_without=param:top_k"),
        "{rewrites}"
    );
    let sent: Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(
        sent["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})
    );
    assert_eq!(mock.count(), 2);
    let (status, _, _) = send(&c, &url, &[BEDROCK_KEY], body).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3, "learned: no second 400");
    proxy.stop().await;
}

/// The proxy's own errors on a Converse path are Bedrock's `{"message": …}`.
#[tokio::test]
async fn the_proxy_s_own_errors_in_bedrock_s_shape() {
    let proxy = bedrock("http://127.0.0.1:9", "", "").await;
    let url = proxy.url(&path(CLAUDE, "converse"));
    let (status, _, body) = send(&client(), &url, &[BEDROCK_KEY], "{\"messages\":[]}").await;
    assert_eq!(status, 502);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let message = v["message"].as_str().unwrap();
    assert!(message.starts_with("cachekeeper:"), "{message}");
    assert_eq!(v.as_object().unwrap().len(), 1);
    proxy.stop().await;
}
