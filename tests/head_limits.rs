//! Request-head limits (`cachekeeper::wire::limits`), raw over TCP through the in-process
//! harness of `tests/common`:
//!
//! - a request with more header fields than hyper's default (100) but within the proxy's limit
//!   goes upstream with every field;
//! - over the proxy's limits (fields or bytes) the answer is `431` in the route's dialect;
//! - over hyper's raised parser caps, hyper's own bare `431`; a request target over hyper's
//!   fixed 65,534 bytes, hyper's `414`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use cachekeeper::wire::limits::MAX_HEADER_FIELDS;
use common::*;

/// [`raw`], the status and the response body.
async fn send_raw(addr: std::net::SocketAddr, head: &str, body: &str) -> (u16, String) {
    let (status, text) = raw(addr, head, body).await;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `n` header fields `x-f<i>: <value>` after the request line and host.
fn head(path: &str, n: usize, value: &str) -> String {
    let mut h = format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json");
    for i in 0..n {
        h.push_str(&format!("\r\nx-f{i}: {value}"));
    }
    h
}

const BODY: &str =
    r#"{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test]
async fn header_limits_answer_in_the_dialects_shape() {
    let mock = start_mock(Arc::new(|_r: &Recorded| {
        json_response(200, r#"{"ok":true}"#)
    }))
    .await;
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;

    // 300 fields: past hyper's default of 100, within the proxy's 500. Every one arrives.
    let (status, body) =
        send_raw(proxy.addr, &head("/anthropic/v1/messages", 300, "v"), BODY).await;
    assert_eq!(status, 200, "{body}");
    let rec = mock.last();
    assert_eq!(rec.headers.get("x-f299").unwrap(), "v");
    assert_eq!(
        rec.headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-f"))
            .count(),
        300
    );

    // Too many fields: 431 in each dialect's shape, and nothing goes upstream.
    let before = mock.count();
    let n = MAX_HEADER_FIELDS + 10;
    let (status, body) = send_raw(proxy.addr, &head("/anthropic/v1/messages", n, "v"), BODY).await;
    assert_eq!(status, 431, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("cachekeeper: the request headers are too large: 514 fields"),
        "{msg}"
    );
    assert!(
        msg.contains("the limits are 500 fields and 262144 bytes"),
        "{msg}"
    );

    let (status, body) = send_raw(
        proxy.addr,
        &head("/openai/v1/chat/completions", n, "v"),
        BODY,
    )
    .await;
    assert_eq!(status, 431);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "headers_too_large");

    let gemini = "/gemini/v1beta/models/gemini-2.5-flash:generateContent";
    let (status, body) = send_raw(proxy.addr, &head(gemini, n, "v"), BODY).await;
    assert_eq!(status, 431);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], 431);
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");

    // Too many bytes in few fields: 3 × 100 KiB.
    let value = "v".repeat(100 * 1024);
    let (status, body) =
        send_raw(proxy.addr, &head("/anthropic/v1/messages", 3, &value), BODY).await;
    assert_eq!(status, 431, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    // host (9) + content-type (32) + 3 × x-f<i> (102,408) + content-length (20) + connection (19).
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("7 fields, 307304 bytes"), "{msg}");
    assert_eq!(mock.count(), before, "a refused request went upstream");

    // Past hyper's parser caps: hyper's own 431 (no body of ours), still nothing upstream.
    let (status, body) =
        send_raw(proxy.addr, &head("/anthropic/v1/messages", 1100, "v"), BODY).await;
    assert_eq!(status, 431);
    assert!(!body.contains("cachekeeper"), "{body}");
    let big = "v".repeat(1100 * 1024);
    let (status, _) = send_raw(proxy.addr, &head("/anthropic/v1/messages", 1, &big), BODY).await;
    assert_eq!(status, 431);
    // A request target over 65,534 bytes: hyper's 414.
    let long = format!("/anthropic/v1/messages?q={}", "a".repeat(70_000));
    let (status, _) = send_raw(proxy.addr, &head(&long, 0, ""), BODY).await;
    assert_eq!(status, 414);
    assert_eq!(mock.count(), before);
    proxy.stop().await;
}
