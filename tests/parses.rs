//! Issue 27 (one pipeline, one parse): how many times the proxy parses a request body, counted
//! at the proxy level with the process-wide parse counter ([`cachekeeper::json_parses`]). This
//! file is its own test binary with one test, so nothing else parses in the process while it
//! counts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use common::*;

const REPLY: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3}}"#;

/// An Anthropic Messages body of one conversation: `turns` user/assistant rounds, the last
/// user message `last`.
fn conversation(system: &str, turns: usize, last: &str) -> String {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": format!("question {i}")}));
        messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {i}")}));
    }
    messages.push(serde_json::json!({"role": "user", "content": last}));
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": system,
        "messages": messages,
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_is_parsed_once() {
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, REPLY))).await;
    let extra = format!(
        r#"
[[routes]]
name = "auto"
prefix = "/auto"
upstream = "{}"
provider = "anthropic"
cache_breakpoints = "auto"
"#,
        mock.url()
    );
    let proxy = start_proxy(&config_for(&mock.url(), &extra)).await;
    let c = client();
    let key = [
        ("x-api-key", "sk-parses"),
        ("anthropic-version", "2023-06-01"),
    ];

    // Each case: the path, the body, whether the proxy rewrites it.
    let big_system = "You are a careful assistant. ".repeat(4_000); // ~112 KB: the text lane
    let cases = [
        // A new session (its record is wanted, loaded, and the passes run again on the
        // same parse), nothing to change.
        (
            "/anthropic/v1/messages",
            conversation("Be brief.", 0, "hi"),
            false,
        ),
        // Its next turn (the record now in memory), nothing to change.
        (
            "/anthropic/v1/messages",
            conversation("Be brief.", 1, "and then?"),
            false,
        ),
        // A body over the inline bound, run on the blocking pool.
        (
            "/anthropic/v1/messages",
            conversation(&big_system, 2, "go on"),
            false,
        ),
        // A body the proxy rewrites (automatic cache breakpoints): the forwarded positions
        // come from the edits, not from a parse of the forwarded bytes.
        (
            "/auto/v1/messages",
            conversation("Be brief.", 3, "more"),
            true,
        ),
    ];
    for (path, body, rewritten) in cases {
        let before = cachekeeper::json_parses();
        let (status, _, _) = send(&c, &proxy.url(path), &key, body.clone()).await;
        let parses = cachekeeper::json_parses() - before;
        assert_eq!(status, 200);
        let sent = mock.last().body;
        assert_eq!(
            sent == body.as_bytes(),
            !rewritten,
            "{path}: rewritten {rewritten}"
        );
        assert_eq!(
            parses,
            1,
            "{path} ({} bytes): parses per request",
            body.len()
        );
    }
}
