//! The request log: one JSON line per request, with how it ended, and never a credential —
//! at any level. Its own test binary, because it installs the global subscriber.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use common::*;

fn request_lines(buf: &Buf) -> Vec<serde_json::Value> {
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "cachekeeper::request")
        .collect()
}

#[tokio::test]
async fn one_line_per_request_with_outcome_and_no_credentials_at_any_level() {
    let buf = logs();

    let handler: Handler = Arc::new(|r: &Recorded| {
        if r.path_and_query.contains("stream") {
            sse_response(full("data: {\"candidates\":[]}\n\n"))
        } else {
            json_response(200, r#"{"ok":true}"#)
        }
    });
    let mock = start_mock(handler).await;
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;
    let c = client();
    send(
        &c,
        &proxy.url("/anthropic/v1/messages"),
        &[("x-api-key", "sk-ant-SECRET-1")],
        r#"{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    send(
        &c,
        &proxy.url("/openai/v1/chat/completions"),
        &[("authorization", "Bearer sk-SECRET-2")],
        r#"{"model":"gpt-x","messages":[]}"#,
    )
    .await;
    send(
        &c,
        &proxy.url(
            "/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=AIzaSECRET3",
        ),
        &[("x-goog-api-key", "AIzaSECRET4")],
        r#"{"contents":[]}"#,
    )
    .await;
    proxy.stop().await;
    // The failing input: a request refused for a missing client token logged route "-".
    let guarded = start_proxy(&config_for(
        &mock.url(),
        "[server]\nclient_token = \"t0k\"\n",
    ))
    .await;
    let (status, _, _) = send(
        &c,
        &guarded.url("/anthropic/v1/messages"),
        &[("x-api-key", "sk-ant-SECRET-1")],
        "{}",
    )
    .await;
    assert_eq!(status, 401);
    guarded.stop().await;

    let all = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    for secret in ["SECRET-1", "SECRET-2", "SECRET3", "SECRET4"] {
        assert!(!all.contains(secret), "{secret} leaked into the logs");
    }
    let lines = request_lines(buf);
    assert_eq!(lines.len(), 4, "{all}");
    let refused = &lines[3];
    assert_eq!(refused["status"], 401);
    assert_eq!(refused["route"], "anthropic", "{refused}");
    assert_eq!(refused["outcome"], "proxy_error");
    for l in &lines[..3] {
        assert_eq!(l["outcome"], "complete", "{l}");
        assert_eq!(l["status"], 200);
        assert!(l["total_ms"].is_u64());
        assert!(l["ttfb_ms"].is_u64());
    }
    assert_eq!(lines[0]["route"], "anthropic");
    assert_eq!(lines[0]["dialect"], "anthropic");
    assert_eq!(lines[0]["model"], "claude-x");
    assert_eq!(lines[0]["body"], "unchanged");
    assert_eq!(lines[1]["model"], "gpt-x");
    assert_eq!(lines[2]["query"], "alt=sse&key=REDACTED");
    assert_eq!(lines[2]["dialect"], "gemini");
    assert_eq!(lines[2]["model"], "gemini-2.5-pro");

    // A body the proxy cannot decode goes as sent, and the log says why (the failing input
    // of a fresh-user pass: one wording, no reason, for a bomb, corrupt data and an unknown
    // coding alike).
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;
    for (encoding, reason) in [
        (
            "gzip, gzip",
            "stacked content-encoding \"gzip, gzip\" (more than one coding)",
        ),
        ("x-foo", "unsupported content-encoding \"x-foo\""),
    ] {
        let (status, _, _) = send(
            &c,
            &proxy.url("/anthropic/v1/messages"),
            &[("content-encoding", encoding)],
            "not really encoded",
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(mock.last().body, b"not really encoded".as_slice());
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let line = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == "body could not be decoded; left unchanged")
            .find(|v| v["encoding"] == encoding)
            .unwrap_or_else(|| panic!("no decode line for {encoding}: {text}"));
        assert_eq!(line["reason"], reason, "{line}");
    }
    proxy.stop().await;
}
