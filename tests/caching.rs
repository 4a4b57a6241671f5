//! Prompt-cache breakpoints and prefix stabilisers through the real proxy, against a mock
//! upstream (`docs/caching.md`). Its own test binary, because it installs the global log
//! subscriber to read the reason lines back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use common::*;
use serde_json::Value;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/agents/claude_code/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn log_lines(buf: &Buf) -> Vec<Value> {
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Every `cache_control` value in the body, in tools → system → messages order.
fn markers(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let blocks = v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(v["system"].as_array().into_iter().flatten())
        .chain(
            v["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["content"].as_array().into_iter().flatten()),
        );
    for b in blocks {
        if let Some(cc) = b.get("cache_control") {
            out.push(cc.clone());
        }
    }
    out
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
async fn breakpoints_and_the_billing_line_stabiliser_through_the_proxy() {
    let buf = Buf::default();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_max_level(tracing::Level::INFO)
        .with_writer(buf.clone())
        .init();
    let mock = start_mock(Arc::new(|_r: &Recorded| {
        json_response(200, r#"{"ok":true}"#)
    }))
    .await;
    let state = tempfile::tempdir().unwrap().keep().join("state.db");
    let config = format!(
        r#"
[state]
path = {state:?}

[[routes]]
name = "kimi-cc"
prefix = "/kimi"
upstream = "{upstream}"
provider = "kimi"
dialect = "anthropic"
cache_breakpoints = "auto"
cache_ttl = "1h"

[[routes]]
name = "anthropic-cc"
prefix = "/anthropic"
upstream = "{upstream}"
provider = "anthropic"
"#,
        state = state.display().to_string(),
        upstream = mock.url(),
    );
    let proxy = start_proxy(&config).await;
    let c = client();

    // 1. Claude Code's tool round without its own markers, on a third-party route.
    let recorded = fixture("direct-5-tools-turn3.json");
    let unmarked = recorded.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
    let (status, headers, _) = send(
        &c,
        &proxy.url("/kimi/v1/messages?beta=true"),
        &[
            ("x-api-key", "sk-test"),
            ("anthropic-beta", "client-beta-1"),
        ],
        unmarked.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        rewrites.contains("breakpoints_added=4; stabilized=1;"),
        "{rewrites}"
    );
    let up = mock.last();
    let sent: Value = serde_json::from_slice(&up.body).unwrap();
    let text = String::from_utf8(up.body.to_vec()).unwrap();
    assert!(!text.contains("x-anthropic-billing-header"));
    let hour = serde_json::json!({"type": "ephemeral", "ttl": "1h"});
    assert_eq!(markers(&sent), vec![hour; 4]);
    assert_eq!(
        up.headers["anthropic-beta"],
        "client-beta-1,extended-cache-ttl-2025-04-11"
    );
    // Nothing else changed: the client's body minus system[0] plus the markers.
    let mut want: Value = serde_json::from_str(&unmarked).unwrap();
    want["system"].as_array_mut().unwrap().remove(0);
    let mut got = sent.clone();
    strip_markers(&mut got);
    assert_eq!(got, want);

    // 2. The same conversation as recorded (Claude Code set its own markers): the stabiliser
    // still runs, the breakpoints stand down; the client's markers go as sent.
    let (_, headers, _) = send(
        &c,
        &proxy.url("/kimi/v1/messages?beta=true"),
        &[("x-api-key", "sk-test")],
        recorded.clone(),
    )
    .await;
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        rewrites.contains("breakpoints_added=0; stabilized=1;"),
        "{rewrites}"
    );
    let up = mock.last();
    let sent: Value = serde_json::from_slice(&up.body).unwrap();
    let mut want: Value = serde_json::from_str(&recorded).unwrap();
    want["system"].as_array_mut().unwrap().remove(0);
    assert_eq!(sent, want);
    assert!(up.headers.get("anthropic-beta").is_none());

    // 3. The anthropic route: Anthropic handles the billing line; byte-identical.
    let (_, headers, _) = send(
        &c,
        &proxy.url("/anthropic/v1/messages?beta=true"),
        &[("x-api-key", "sk-test")],
        recorded.clone(),
    )
    .await;
    assert!(headers["x-cachekeeper-rewrites"]
        .to_str()
        .unwrap()
        .ends_with("body=unchanged"));
    assert_eq!(mock.last().body, recorded.as_bytes());
    proxy.stop().await;

    // The log: one reason line per rewrite, and the counters on the request lines.
    let lines = log_lines(&buf);
    let reasons: Vec<&str> = lines
        .iter()
        .filter(|l| l["target"] == "cachekeeper::rewrite")
        .filter_map(|l| l["reason"].as_str())
        .collect();
    let stabilised = reasons
        .iter()
        .filter(|r| {
            r.starts_with("stabilize: removed Claude Code's billing line from system[0]")
                && r.ends_with("on kimi)")
        })
        .count();
    assert_eq!(stabilised, 2, "{reasons:#?}");
    assert!(
        reasons.contains(
            &"cache_breakpoints: 4 cache_control marker(s) added (1h; the client set none) at \
              tools[23], system[2], messages[3].content[0], messages[5].content[0]"
        ),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|r| r.starts_with(
            "cache_breakpoints: the client set its own cache_control (system[1]); none added"
        )),
        "{reasons:#?}"
    );
    let requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "cachekeeper::request")
        .collect();
    let counts: Vec<(u64, u64)> = requests
        .iter()
        .map(|l| {
            (
                l["breakpoints_added"].as_u64().unwrap(),
                l["stabilized"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, [(4, 1), (0, 1), (0, 0)]);
}

fn strip_markers(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("cache_control");
            m.values_mut().for_each(strip_markers);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_markers),
        _ => {}
    }
}
