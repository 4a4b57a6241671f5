//! The listener's reserved paths (`/healthz`, `/metrics`, `/_cachekeeper/…`), the client
//! token's three forms, `check`'s shadowing warning, `x-cachekeeper-overhead-ms`, and
//! `/metrics` after real requests. Its own test binary: it installs the global log
//! subscriber, to read the request lines.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

/// A GET with extra headers: status, headers, body.
async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, Bytes) {
    let mut b = http::Request::get(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = client()
        .request(b.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

fn overhead_ms(headers: &http::HeaderMap) -> f64 {
    let v = headers
        .get("x-cachekeeper-overhead-ms")
        .expect("x-cachekeeper-overhead-ms on every response")
        .to_str()
        .unwrap();
    let (_, decimals) = v.split_once('.').expect("ms with decimals");
    assert_eq!(decimals.len(), 3, "{v}");
    let ms: f64 = v.parse().unwrap();
    assert!((0.0..60_000.0).contains(&ms), "{v}");
    ms
}

fn echo_ok() -> Handler {
    Arc::new(|_r: &Recorded| json_response(200, r#"{"ok":true}"#))
}

/// A route with prefix `/` to `upstream`, plus `extra` TOML.
fn catch_all(upstream: &str, extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap().keep();
    format!(
        "{extra}\n[state]\npath = {:?}\n\n[[routes]]\nname = \"anthropic\"\nprefix = \"/anthropic\"\nupstream = \"{upstream}\"\n\n[[routes]]\nname = \"all\"\nprefix = \"/\"\nupstream = \"{upstream}\"\n",
        dir.join("state.db").display().to_string()
    )
}

#[tokio::test]
async fn reserved_paths_win_over_a_slash_route() {
    logs();
    let mock = start_mock(echo_ok()).await;
    let proxy = start_proxy(&catch_all(&mock.url(), "")).await;
    let (status, h, body) = get(&proxy.url("/healthz"), &[]).await;
    assert_eq!((status, &body[..]), (200, &b"ok\n"[..]));
    overhead_ms(&h);
    let (status, h, body) = get(&proxy.url("/metrics"), &[]).await;
    assert_eq!(status, 200);
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(&format!(
            "cachekeeper_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    overhead_ms(&h);
    let (status, _, _) = get(&proxy.url("/_cachekeeper/api/sessions"), &[]).await;
    assert_eq!(status, 200);
    // Without its slash, the dashboard redirects relatively (a /t/<token>/ prefix is kept).
    let (status, h, _) = get(&proxy.url("/_cachekeeper"), &[]).await;
    assert_eq!(status, 308);
    assert_eq!(h["location"], "_cachekeeper/");
    let (status, _, _) = send(&client(), &proxy.url("/metrics"), &[], "{}").await;
    assert_eq!(status, 405, "reserved for every method");
    assert_eq!(mock.count(), 0, "no reserved path reached the route");
    // Every other path still goes to the `/` route.
    let (status, _, _) = get(&proxy.url("/metricsx"), &[]).await;
    assert_eq!(status, 200);
    let (status, _, _) = get(&proxy.url("/t/x/v1/models"), &[]).await;
    assert_eq!(status, 200, "without client_token, /t/ is an ordinary path");
    assert_eq!(mock.last().path_and_query, "/t/x/v1/models");
    assert_eq!(mock.count(), 2);
    proxy.stop().await;
}

const TOKEN: &str = "tok-Q7zK9";

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
async fn the_client_token_in_its_three_forms() {
    logs();
    let mock = start_mock(echo_ok()).await;
    let extra = format!("[server]\nclient_token = \"{TOKEN}\"\n");
    let proxy = start_proxy(&catch_all(&mock.url(), &extra)).await;
    let bearer = format!("Bearer {TOKEN}");

    // /healthz never needs it.
    assert_eq!(get(&proxy.url("/healthz"), &[]).await.0, 200);
    // /metrics: header, bearer or segment; nothing or a wrong one is 401.
    assert_eq!(get(&proxy.url("/metrics"), &[]).await.0, 401);
    let (status, h, _) = get(&proxy.url("/metrics"), &[("authorization", "Bearer nope")]).await;
    assert_eq!(status, 401);
    overhead_ms(&h);
    assert_eq!(
        get(&proxy.url("/metrics"), &[("x-cachekeeper-token", TOKEN)])
            .await
            .0,
        200
    );
    assert_eq!(
        get(&proxy.url("/metrics"), &[("authorization", &bearer)])
            .await
            .0,
        200
    );
    let (status, _, body) = get(&proxy.url(&format!("/t/{TOKEN}/metrics")), &[]).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("cachekeeper_"));
    assert_eq!(get(&proxy.url("/t/wrong/metrics"), &[]).await.0, 401);
    // The token is checked before the method (the failing input: a POST without it got 405),
    // and the 401 names every form.
    let (status, _, body) = send(&client(), &proxy.url("/metrics"), &[], "{}").await;
    assert_eq!(status, 401);
    assert!(
        String::from_utf8_lossy(&body).contains("Authorization: Bearer"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, _, _) = send(
        &client(),
        &proxy.url("/metrics"),
        &[("x-cachekeeper-token", TOKEN)],
        "{}",
    )
    .await;
    assert_eq!(status, 405, "with the token, a POST is still refused");
    // The dashboard takes the same forms, its API under the segment too (relative URLs).
    assert_eq!(get(&proxy.url("/_cachekeeper/"), &[]).await.0, 401);
    let (status, h, page) = get(&proxy.url(&format!("/t/{TOKEN}/_cachekeeper/")), &[]).await;
    assert_eq!(status, 200);
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(String::from_utf8_lossy(&page).contains("src=\"app.js\""));
    let (status, h, api) = get(
        &proxy.url(&format!("/t/{TOKEN}/_cachekeeper/api/sessions")),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&api));
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    overhead_ms(&h);
    let (status, _, _) = get(
        &proxy.url("/_cachekeeper/api/sessions"),
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 0);

    // Proxied routes: the segment is stripped, never forwarded, never logged.
    let path = format!("/t/{TOKEN}/anthropic/v1/messages?beta=true");
    let body = r#"{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, h, _) = send(
        &client(),
        &proxy.url(&path),
        &[("x-api-key", "sk-ant-k")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    overhead_ms(&h);
    let seen = mock.last();
    assert_eq!(seen.path_and_query, "/v1/messages?beta=true");
    assert!(seen.headers.get("x-cachekeeper-token").is_none());
    // The failing input: a base URL holding the segment, given it again, left one copy of the
    // token in the logged (and forwarded) path.
    let doubled = format!("/t/{TOKEN}/t/{TOKEN}/anthropic/v1/messages");
    let (status, _, _) = send(
        &client(),
        &proxy.url(&doubled),
        &[("x-api-key", "sk-ant-k")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.last().path_and_query, "/v1/messages");
    // A wrong segment is the same 401 as a wrong header, and goes nowhere.
    let (status, _, wrong) = send(
        &client(),
        &proxy.url("/t/wrong-Q7zK9/anthropic/v1/messages"),
        &[],
        body,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, wrong_header) = send(
        &client(),
        &proxy.url("/anthropic/v1/messages"),
        &[("x-cachekeeper-token", "wrong")],
        body,
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(wrong, wrong_header);
    // On proxied routes `Authorization` is the provider's credential, not the token.
    let (status, _, _) = send(
        &client(),
        &proxy.url("/anthropic/v1/messages"),
        &[("authorization", &bearer)],
        body,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, _) = send(
        &client(),
        &proxy.url("/anthropic/v1/messages"),
        &[
            ("x-cachekeeper-token", TOKEN),
            ("authorization", "Bearer sk-provider"),
        ],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.last().headers["authorization"], "Bearer sk-provider");
    assert_eq!(mock.count(), 3);
    proxy.stop().await;

    let all = log_text();
    assert!(!all.contains(TOKEN), "the token leaked into the logs");
    assert!(
        !all.contains("wrong-Q7zK9"),
        "a wrong token leaked into the logs"
    );
    let line: Value = all
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v["target"] == "cachekeeper::request"
                && v["path"] == "/anthropic/v1/messages"
                && v["query"] == "beta=true"
        })
        .expect("the stripped request's line");
    assert_eq!(line["status"], 200);
}

#[tokio::test]
async fn check_warns_of_prefixes_shadowed_by_reserved_paths() {
    let toml = r#"
[server]
client_token = "x"

[[routes]]
name = "m"
prefix = "/metrics"
upstream = "http://127.0.0.1:1"

[[routes]]
name = "d"
prefix = "/_cachekeeper/x"
upstream = "http://127.0.0.1:1"

[[routes]]
name = "t"
prefix = "/t"
upstream = "http://127.0.0.1:1"

[[routes]]
name = "all"
prefix = "/"
upstream = "http://127.0.0.1:1"
"#;
    let (_, warnings) = cachekeeper::config::Config::from_toml(toml).unwrap();
    assert_eq!(
        warnings,
        vec![
            "route \"m\": prefix \"/metrics\" is shadowed by the reserved path /metrics: the \
             proxy answers those requests itself and never forwards them",
            "route \"d\": prefix \"/_cachekeeper/x\" is shadowed by the reserved path \
             /_cachekeeper/…: the proxy answers those requests itself and never forwards them",
            "route \"t\": prefix \"/t\" is shadowed by the /t/<token>/ segment (client_token is \
             set): the proxy answers those requests itself and never forwards them",
        ]
    );
    // Without a client token, `/t` is an ordinary prefix.
    let (_, warnings) =
        cachekeeper::config::Config::from_toml(&toml.replace("client_token = \"x\"", "")).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");

    // `cachekeeper check` prints them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(toml.as_bytes())
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "warning: route \"m\": prefix \"/metrics\" is shadowed by the reserved path /metrics"
        ),
        "{stdout}"
    );
}

#[tokio::test]
async fn the_overhead_header_on_errors_and_retried_responses() {
    logs();
    // No route.
    let mock = start_mock(echo_ok()).await;
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;
    let (status, h, _) = send(&client(), &proxy.url("/nope"), &[], "{}").await;
    assert_eq!(status, 404);
    overhead_ms(&h);
    let (status, h, _) = send(&client(), &proxy.url("/anthropic/v1/messages"), &[], "{}").await;
    assert_eq!(status, 200);
    overhead_ms(&h);
    proxy.stop().await;

    // Upstream down.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = down.local_addr().unwrap();
    drop(down);
    let proxy = start_proxy(&config_for(&format!("http://{addr}"), "")).await;
    let (status, h, _) = send(&client(), &proxy.url("/anthropic/v1/messages"), &[], "{}").await;
    assert_eq!(status, 502);
    overhead_ms(&h);
    proxy.stop().await;

    // Retried: the first attempt is refused for an unknown parameter, the retry succeeds.
    let strict: Handler = Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if v.get("reasoning").is_some() {
            json_response(
                400,
                r#"{"error":{"message":"Unknown parameter: 'reasoning'.","type":"invalid_request_error","param":"reasoning","code":"unknown_parameter"}}"#,
            )
        } else {
            json_response(
                200,
                r#"{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#,
            )
        }
    });
    let mock = start_mock(strict).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[state]\npath = {:?}\n\n[[routes]]\nname = \"strict\"\nprefix = \"/v\"\nupstream = \"{}\"\nprovider = \"local\"\n",
        dir.path().join("s.db").display().to_string(),
        mock.url()
    );
    let proxy = start_proxy(&cfg).await;
    let body = json!({"model": "qwen3", "reasoning": {"effort": "high"},
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, h, _) = send(
        &client(),
        &proxy.url("/v/v1/chat/completions"),
        &[("authorization", "Bearer sk-test")],
        body.to_string(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    assert!(h["x-cachekeeper-rewrites"]
        .to_str()
        .unwrap()
        .contains("retried_without=param:reasoning"));
    overhead_ms(&h);
    let (_, _, text) = get(&proxy.url("/metrics"), &[]).await;
    let text = String::from_utf8(text.to_vec()).unwrap();
    assert!(
        text.contains(r#"cachekeeper_retries_total{route="strict",reason="unknown_field"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"cachekeeper_uncached_input_tokens_total{route="strict",model="qwen3"} 5"#),
        "{text}"
    );
    assert!(
        text.contains(r#"cachekeeper_output_tokens_total{route="strict",model="qwen3"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"cachekeeper_request_overhead_seconds_count{route="strict"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"cachekeeper_requests_total{route="strict",dialect="openai",status_class="2xx",outcome="complete"} 1"#),
        "{text}"
    );
    proxy.stop().await;
}

/// An Anthropic body: system, tools and `n` messages, message `i` = `"m{i}"` unless `edit`
/// names it; the marker on the newest message, as Claude Code places it.
fn turn_body(n: usize, edit: Option<usize>) -> String {
    let msgs: Vec<Value> = (0..n)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let text = if edit == Some(i) {
                format!("edited {i}")
            } else {
                format!("m{i}")
            };
            let mut block = json!({"type": "text", "text": text});
            if i + 1 == n {
                block["cache_control"] = json!({"type": "ephemeral"});
            }
            json!({"role": role, "content": [block]})
        })
        .collect();
    json!({"model": "claude-x", "max_tokens": 16, "system": "S", "tools": [{"name": "bash"}],
           "messages": msgs})
    .to_string()
}

#[tokio::test]
async fn a_prefix_collapse_is_counted_by_cause_with_its_write_tokens() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| {
        json_response(
            200,
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":500,"cache_read_input_tokens":40,"output_tokens":1}}"#,
        )
    }))
    .await;
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;
    let session = "sess-metrics-secret";
    for body in [
        turn_body(1, None),
        turn_body(3, None),
        turn_body(5, Some(1)),
    ] {
        let (status, _, _) = send(
            &client(),
            &proxy.url("/anthropic/v1/messages"),
            &[
                ("x-api-key", "sk-ant-m"),
                ("x-cachekeeper-session", session),
            ],
            body,
        )
        .await;
        assert_eq!(status, 200);
    }
    let (_, _, text) = get(&proxy.url("/metrics"), &[]).await;
    let text = String::from_utf8(text.to_vec()).unwrap();
    assert!(
        text.contains(
            r#"cachekeeper_prefix_collapses_total{route="anthropic",cause="client_history"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"cachekeeper_collapse_write_tokens_total{route="anthropic",cause="client_history"} 500"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"cachekeeper_cache_write_tokens_total{route="anthropic",model="claude-x"} 1500"#
        ),
        "{text}"
    );
    assert!(!text.contains(session));
    proxy.stop().await;
}

/// An empty or blank `x-cachekeeper-session` is treated as absent (a fresh-user test's B6: it
/// made a session named "" that the dashboard could not open, and every client whose
/// `x-cachekeeper-session: $VAR` expanded to nothing was lumped into it): each such request
/// gets its derived session.
#[tokio::test]
async fn an_empty_session_header_is_no_session_name() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| {
        json_response(
            200,
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#,
        )
    }))
    .await;
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;
    for (value, text) in [("", "first"), ("   ", "second"), ("named-b6", "third")] {
        let body = format!(
            r#"{{"model":"claude-x","max_tokens":1,"messages":[{{"role":"user","content":"{text}"}}]}}"#
        );
        let (status, _, _) = send(
            &client(),
            &proxy.url("/anthropic/v1/messages"),
            &[("x-api-key", "sk-ant-b6"), ("x-cachekeeper-session", value)],
            body,
        )
        .await;
        assert_eq!(status, 200);
    }
    // The turns reach the store through its writer: wait for all three.
    let mut names = Vec::new();
    for _ in 0..100 {
        let (status, _, body) = get(&proxy.url("/_cachekeeper/api/sessions"), &[]).await;
        assert_eq!(status, 200);
        let list: Value = serde_json::from_slice(&body).unwrap();
        names = list
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session"].as_str().unwrap().to_owned())
            .collect();
        if names.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.contains(&"named-b6".to_owned()), "{names:?}");
    for n in names.iter().filter(|n| *n != "named-b6") {
        assert!(
            n.len() == 16 && n.chars().all(|c| c.is_ascii_hexdigit()),
            "a derived session, not the empty name: {names:?}"
        );
    }
    proxy.stop().await;
}
