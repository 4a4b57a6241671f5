//! Rejected `anthropic-beta` values (docs/reasoning.md#beta-headers), through the proxy against
//! mock upstreams: a value the proxy added is learned and left out after one retry (with the
//! body field it enables); a client's own value only when it is on `droppable_betas`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::io::Cursor;
use std::sync::Arc;

use base64::Engine as _;
use cachekeeper::reasoning::BINDING_BETA;
use common::*;
use serde_json::{json, Value};

const OK_MESSAGE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}"#;

/// Anthropic's wording for a value it does not know (the shape of the API's 400).
fn unexpected(value: &str) -> String {
    format!(
        r#"{{"type":"error","error":{{"type":"invalid_request_error","message":"Unexpected value(s) `{value}` for the `anthropic-beta` header. Please consult our documentation at docs.anthropic.com or try again without the header."}},"request_id":"req_1"}}"#
    )
}

fn beta_values(r: &Recorded) -> Vec<String> {
    r.headers
        .get_all("anthropic-beta")
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

fn has_block_binding(r: &Recorded) -> bool {
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    v["thinking"].get("block_binding").is_some()
}

/// A mock that rejects any request carrying `value` in `anthropic-beta` with Anthropic's
/// wording, and (like the API) a `block_binding` sent without the binding beta.
fn rejecting(value: &'static str) -> Handler {
    rejecting_with(value, None)
}

/// [`rejecting`], answering `wording` (a whole error body) when given.
fn rejecting_with(value: &'static str, wording: Option<&'static str>) -> Handler {
    Arc::new(move |r: &Recorded| {
        let betas = beta_values(r);
        if betas.iter().any(|b| b == value) {
            return json_response(
                400,
                &wording.map_or_else(|| unexpected(value), str::to_owned),
            );
        }
        if has_block_binding(r) && !betas.iter().any(|b| b == BINDING_BETA) {
            return json_response(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"thinking.block_binding: requires the thinking-binding-controls beta"}}"#,
            );
        }
        json_response(200, OK_MESSAGE)
    })
}

fn config(mock: &Mock, state: &std::path::Path, extra: &str) -> String {
    format!(
        r#"
{extra}

[state]
path = {state:?}

[[routes]]
name = "claude"
prefix = "/a"
upstream = "{}"
provider = "anthropic"
"#,
        mock.url(),
        state = state.display().to_string()
    )
}

/// A 16×16 PNG, base64.
fn png_b64() -> String {
    let img = image::RgbImage::from_fn(16, 16, |x, y| image::Rgb([x as u8 * 16, y as u8 * 16, 7]));
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(out.into_inner())
}

/// A conversation with a signed thinking block after an image the proxy repairs (a PNG
/// declared as JPEG): the repair changes the block's binding prefix, so the proxy sets
/// `thinking.block_binding` and adds [`BINDING_BETA`].
fn bound_body(model: &str) -> String {
    json!({
        "model": model,
        "max_tokens": 64,
        "thinking": {"type": "adaptive"},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "what is on the screen?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": png_b64()}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look at it.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
                {"type": "text", "text": "A square."}]},
            {"role": "user", "content": "and now?"}
        ]
    })
    .to_string()
}

fn plain_body(model: &str) -> String {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
}

async fn post(
    proxy: &Proxy,
    body: &str,
    beta: Option<&str>,
) -> (u16, http::HeaderMap, bytes::Bytes) {
    let mut headers = vec![
        ("x-api-key", "sk-ant-test"),
        ("anthropic-version", "2023-06-01"),
    ];
    if let Some(b) = beta {
        headers.push(("anthropic-beta", b));
    }
    send(
        &client(),
        &proxy.url("/a/v1/messages"),
        &headers,
        body.to_owned(),
    )
    .await
}

#[tokio::test]
async fn a_rejected_binding_beta_is_learned_with_one_retry_and_never_sent_again() {
    let mock = start_mock(rejecting(BINDING_BETA)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg_text = config(&mock, &dir.path().join("state.db"), "");
    let cfg_path = dir.path().join("proxy.toml");
    std::fs::write(&cfg_path, &cfg_text).unwrap();
    let proxy = start_proxy(&cfg_text).await;
    let client_beta = "interleaved-thinking-2025-05-14";

    let (status, headers, body) =
        post(&proxy, &bound_body("claude-fable-5-1"), Some(client_beta)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(mock.count(), 2, "exactly one retry");
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(beta_values(&reqs[0]), [client_beta, BINDING_BETA]);
    assert!(has_block_binding(&reqs[0]));
    assert_eq!(
        beta_values(&reqs[1]),
        [client_beta],
        "the client's beta stays"
    );
    assert!(!has_block_binding(&reqs[1]));
    // The image repair still applies on the retry.
    let v: Value = serde_json::from_slice(&reqs[1].body).unwrap();
    assert_eq!(
        v["messages"][0]["content"][1]["source"]["media_type"],
        "image/png"
    );
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        h.contains(&format!("retried_without=beta:{BINDING_BETA}")),
        "{h}"
    );

    // Later requests to this (host, model): neither the beta nor block_binding, no retry.
    let (status, headers, _) =
        post(&proxy, &bound_body("claude-fable-5-1"), Some(client_beta)).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3);
    let last = mock.last();
    assert_eq!(beta_values(&last), [client_beta]);
    assert!(!has_block_binding(&last));
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(!h.contains("retried_without"), "{h}");
    // Another model on the same host still gets the binding (and is refused, then learns).
    post(&proxy, &bound_body("claude-fable-5-2"), None).await;
    assert_eq!(mock.count(), 5);

    // `verdicts` lists the value; `--clear` forgets it.
    let bin = env!("CARGO_BIN_EXE_cachekeeper");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(bin)
            .arg("verdicts")
            .arg("--config")
            .arg(&cfg_path)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let mut listed = String::new();
    for _ in 0..50 {
        listed = cli(&[]);
        if listed.contains("claude-fable-5-2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let host = mock.url().trim_start_matches("http://").to_owned();
    assert!(
        listed.starts_with(&format!(
            "{host}\tclaude-fable-5-1\tbeta:{BINDING_BETA}\t20"
        )),
        "{listed}"
    );
    assert!(listed.contains("Unexpected value(s)"), "{listed}");
    let cleared = cli(&["--clear", &host, "claude-fable-5-1"]);
    assert!(cleared.contains("removed 1 verdict"), "{cleared}");
    assert!(!cli(&[]).contains("claude-fable-5-1"));
    proxy.stop().await;
}

#[tokio::test]
async fn a_clients_own_beta_is_never_dropped_unless_listed() {
    const FOO: &str = "foo-beta-2025-01-01";
    let mock = start_mock(rejecting(FOO)).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "")).await;

    let (status, headers, body) = post(&proxy, &plain_body("claude-opus-4-5"), Some(FOO)).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        unexpected(FOO).as_bytes(),
        "the provider's 4xx, untouched"
    );
    assert_eq!(mock.count(), 1, "no retry");
    assert!(!headers["x-cachekeeper-rewrites"]
        .to_str()
        .unwrap()
        .contains("retried_without"));
    // Not learned: the next request carries it again.
    let (status, _, _) = post(&proxy, &plain_body("claude-opus-4-5"), Some(FOO)).await;
    assert_eq!(status, 400);
    assert_eq!(mock.count(), 2);
    assert_eq!(beta_values(&mock.last()), [FOO]);
    proxy.stop().await;
}

#[tokio::test]
async fn a_listed_client_beta_is_learned_and_removed_from_its_header() {
    const FOO: &str = "foo-beta-2025-01-01";
    let mock = start_mock(rejecting(FOO)).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("[reasoning]\ndroppable_betas = [\"{FOO}\"]");
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), &extra)).await;

    let header = format!("{FOO},keep-2025-02-02");
    let (status, headers, _) = post(&proxy, &plain_body("claude-opus-4-5"), Some(&header)).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2, "one retry");
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(beta_values(&reqs[0]), [FOO, "keep-2025-02-02"]);
    assert_eq!(beta_values(&reqs[1]), ["keep-2025-02-02"]);
    // The body is the client's, byte for byte, on both attempts.
    assert_eq!(reqs[1].body, plain_body("claude-opus-4-5").as_bytes());
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains(&format!("retried_without=beta:{FOO}")), "{h}");
    // Later requests: removed up front.
    let (status, _, _) = post(&proxy, &plain_body("claude-opus-4-5"), Some(&header)).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3);
    assert_eq!(beta_values(&mock.last()), ["keep-2025-02-02"]);

    // The only value: the header itself goes.
    let (status, _, _) = post(&proxy, &plain_body("claude-sonnet-4-5"), Some(FOO)).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 5);
    assert!(mock.last().headers.get("anthropic-beta").is_none());
    proxy.stop().await;
}

/// Bedrock's wording names no value: the one value the proxy added is to blame, the client's
/// own stays.
#[tokio::test]
async fn bedrock_invalid_beta_flag_blames_the_one_added_value() {
    const BEDROCK: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"invalid beta flag"}}"#;
    let mock = start_mock(rejecting_with(BINDING_BETA, Some(BEDROCK))).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "")).await;
    let client_beta = "interleaved-thinking-2025-05-14";
    let (status, _, _) = post(&proxy, &bound_body("claude-fable-5-1"), Some(client_beta)).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(beta_values(&reqs[0]), [client_beta, BINDING_BETA]);
    assert_eq!(beta_values(&reqs[1]), [client_beta]);
    assert!(!has_block_binding(&reqs[1]));
    proxy.stop().await;
}

/// The 1-hour cache TTL beta (added with 1-hour markers on a third-party Anthropic-wire row):
/// a host that rejects it is learned after one retry, which carries 5-minute markers and no
/// beta; later requests too.
#[tokio::test]
async fn a_rejected_ttl_beta_falls_back_to_five_minute_markers() {
    const TTL: &str = "extended-cache-ttl-2025-04-11";
    let mock = start_mock(rejecting(TTL)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"
[state]
path = {:?}

[[routes]]
name = "kimi-cc"
prefix = "/a"
upstream = "{}"
provider = "kimi"
dialect = "anthropic"
cache_breakpoints = "auto"
cache_ttl = "1h"
"#,
        dir.path().join("s.db").display().to_string(),
        mock.url()
    );
    let proxy = start_proxy(&cfg).await;
    let body = json!({
        "model": "kimi-k2.6", "max_tokens": 64,
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "read main.rs"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": "now test it"}]}
        ]
    })
    .to_string();
    let hour = |r: &Recorded| String::from_utf8_lossy(&r.body).contains(r#""ttl":"1h""#);
    let marked = |r: &Recorded| String::from_utf8_lossy(&r.body).contains("cache_control");

    let (status, headers, _) = post(&proxy, &body, Some("client-beta-1")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2, "one retry");
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(beta_values(&reqs[0]), ["client-beta-1", TTL]);
    assert!(hour(&reqs[0]));
    assert_eq!(beta_values(&reqs[1]), ["client-beta-1"]);
    assert!(!hour(&reqs[1]) && marked(&reqs[1]), "5-minute markers");
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains(&format!("retried_without=beta:{TTL}")), "{h}");

    let (status, _, _) = post(&proxy, &body, None).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3, "no retry");
    let last = mock.last();
    assert!(last.headers.get("anthropic-beta").is_none());
    assert!(!hour(&last) && marked(&last));
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_beta_sent_as_several_lines_keeps_every_value_when_the_proxy_adds_one() {
    // The failing input of a fresh-user pass: `-H anthropic-beta:a-1 -H anthropic-beta:b-2` on
    // a route that adds the 1h TTL beta reached the upstream as `a-1,extended-cache-ttl-…`.
    const TTL: &str = "extended-cache-ttl-2025-04-11";
    let mock = start_mock(rejecting("never-sent")).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[state]\npath = {:?}\n\n[[routes]]\nname = \"kimi-cc\"\nprefix = \"/a\"\nupstream = \"{}\"\nprovider = \"kimi\"\ndialect = \"anthropic\"\ncache_breakpoints = \"auto\"\ncache_ttl = \"1h\"\n",
        dir.path().join("s.db").display().to_string(),
        mock.url()
    );
    let proxy = start_proxy(&cfg).await;
    let body = json!({
        "model": "kimi-k2.6", "max_tokens": 64, "system": "S",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "r"}]}]
    })
    .to_string();
    let (status, _, _) = send(
        &client(),
        &proxy.url("/a/v1/messages"),
        &[
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "a-1"),
            ("anthropic-beta", "b-2"),
        ],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(beta_values(&mock.last()), ["a-1", "b-2", TTL]);
    proxy.stop().await;
}
