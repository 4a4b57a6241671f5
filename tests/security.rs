//! Security properties of the proxy, in-process (the harness of `tests/common`):
//!
//! - only configured upstreams are reachable: absolute-form request targets
//!   (`POST http://other-host/...` sent raw over TCP), `Host` / forwarding header tricks, and
//!   dot segments (`..`, `%2e%2e`, `..%2f`, backslashes) can neither reach another host nor
//!   climb out of the route's base path (refused with 400; a path that stays below it goes
//!   as sent);
//! - the listener binds loopback by default, and binding elsewhere without
//!   `[server] client_token` logs a warning;
//! - requests made with API keys and a client token leave neither in the logs (every level)
//!   nor in the state file (the SQLite bytes, with its `-wal` / `-shm` files).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use common::*;

fn ok() -> Handler {
    Arc::new(|_r: &Recorded| json_response(200, r#"{"ok":true}"#))
}

const BODY: &str =
    r#"{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;

/// Routes with a base path on the good upstream (`/base`), a route on `/` too.
fn config(good: &str, extra: &str) -> String {
    let toml = config_for(&format!("{good}/base"), extra);
    format!("{toml}\n[[routes]]\nname = \"root\"\nprefix = \"/\"\nupstream = \"{good}/rootbase\"\n")
}

#[tokio::test]
async fn absolute_form_targets_and_host_tricks_reach_only_the_configured_upstream() {
    logs();
    let good = start_mock(ok()).await;
    let other = start_mock(ok()).await;
    let proxy = start_proxy(&config(&good.url(), "")).await;
    let other_auth = other.url().trim_start_matches("http://").to_owned();
    let good_auth = good.url().trim_start_matches("http://").to_owned();
    let heads = [
        // Absolute-form targets naming the other host, with and without a matching Host.
        format!("POST http://{other_auth}/anthropic/v1/messages HTTP/1.1\r\nhost: {other_auth}"),
        format!("POST http://{other_auth}/v1/messages HTTP/1.1\r\nhost: {other_auth}"),
        format!("POST https://{other_auth}/anthropic/v1/messages HTTP/1.1\r\nhost: {other_auth}"),
        format!("POST http://{other_auth}/anthropic/v1/messages HTTP/1.1\r\nhost: {good_auth}"),
        // Origin-form with a Host, forwarding headers or a path that names the other host.
        format!("POST /anthropic/v1/messages HTTP/1.1\r\nhost: {other_auth}"),
        format!("POST /anthropic/v1/messages HTTP/1.1\r\nhost: {other_auth}\r\nx-forwarded-host: {other_auth}\r\nforwarded: host={other_auth}\r\nx-original-url: http://{other_auth}/\r\nx-rewrite-url: http://{other_auth}/"),
        format!("POST //{other_auth}/v1/messages HTTP/1.1\r\nhost: {other_auth}"),
        format!("POST /anthropic//{other_auth}/v1/messages HTTP/1.1\r\nhost: x"),
        format!("POST /anthropic/@{other_auth}/v1/messages HTTP/1.1\r\nhost: x"),
        // Two Host headers.
        format!("POST /anthropic/v1/messages HTTP/1.1\r\nhost: {good_auth}\r\nhost: {other_auth}"),
    ];
    for head in &heads {
        let before = good.count();
        let (status, _) = raw(proxy.addr, head, BODY).await;
        assert_eq!(other.count(), 0, "{head}: reached the other host");
        if good.count() > before {
            let rec = good.last();
            // The upstream sees its own authority and a path under the route's base.
            let host = rec
                .headers
                .get("host")
                .map(|h| h.to_str().unwrap().to_owned());
            assert_eq!(host.as_deref(), Some(good_auth.as_str()), "{head}");
            assert!(
                rec.path_and_query.starts_with("/base/")
                    || rec.path_and_query.starts_with("/rootbase/"),
                "{head}: {}",
                rec.path_and_query
            );
            for h in [
                "x-forwarded-host",
                "forwarded",
                "x-original-url",
                "x-rewrite-url",
            ] {
                if let Some(v) = rec.headers.get(h) {
                    // Passed through as the client's header, never acted on: the request
                    // still went to the configured upstream.
                    assert!(v.to_str().unwrap().contains(&other_auth));
                }
            }
        } else {
            assert!(status >= 400, "{head}: {status}");
        }
    }
    proxy.stop().await;
}

#[tokio::test]
async fn dot_segments_cannot_leave_the_routes_base_path() {
    logs();
    let good = start_mock(ok()).await;
    let proxy = start_proxy(&config(&good.url(), "")).await;
    // Each climbs above the route's base path (`/base`, `/rootbase` for the `/` route).
    let refused = [
        "/anthropic/../openai/v1/messages",
        "/anthropic/v1/../../admin",
        "/anthropic/%2e%2e/admin",
        "/anthropic/%2E%2E/admin",
        "/anthropic/.%2e/admin",
        "/anthropic/..%2fadmin",
        "/anthropic/v1/..%2F..%2Fadmin",
        "/anthropic/v1/%2e%2e%2f%2e%2e%2fadmin",
        "/anthropic/v1/..%5c..%5cadmin",
        "/anthropic/%252e%252e/admin",
        "/..",
        "/../admin",
        "/%2e%2e/admin",
    ];
    for path in refused {
        let before = good.count();
        let (status, text) = raw(
            proxy.addr,
            &format!("POST {path} HTTP/1.1\r\nhost: localhost"),
            BODY,
        )
        .await;
        assert_eq!(good.count(), before, "{path} went upstream");
        assert!(status == 400, "{path}: {status} {text}");
    }
    // What stays under the base path goes through as sent.
    for (path, upstream) in [
        ("/anthropic/v1/messages", "/base/v1/messages"),
        ("/anthropic/v1/../v1/messages", "/base/v1/../v1/messages"),
        ("/anthropic/./v1/messages", "/base/./v1/messages"),
        ("/anthropic/v1/..%2fmessages", "/base/v1/..%2fmessages"),
        ("/anthropic/v1/a..b/messages", "/base/v1/a..b/messages"),
        ("/anthropic/v1/.well-known/x", "/base/v1/.well-known/x"),
        ("/anthropic/v1%2Fmessages", "/base/v1%2Fmessages"),
        ("/openai/v1/files/file-abc...", "/base/v1/files/file-abc..."),
    ] {
        let (status, text) = raw(
            proxy.addr,
            &format!("POST {path} HTTP/1.1\r\nhost: localhost"),
            BODY,
        )
        .await;
        assert_eq!(status, 200, "{path}: {text}");
        assert_eq!(good.last().path_and_query, upstream);
    }
    proxy.stop().await;
}

#[test]
fn listen_defaults_to_loopback() {
    let (config, _) = cachekeeper::config::Config::from_toml(
        "[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"https://api.anthropic.com\"\n",
    )
    .unwrap();
    assert!(config.server.listen.ip().is_loopback());
    assert_eq!(config.server.listen.port(), 8787);
}

#[tokio::test]
async fn binding_beyond_loopback_without_a_client_token_warns() {
    logs();
    let good = start_mock(ok()).await;
    let bind = |toml: String, addr: &'static str| async move {
        let (config, warnings) = cachekeeper::config::Config::from_toml(&toml).unwrap();
        let loaded = cachekeeper::config::Loaded {
            config,
            base_dir: std::env::temp_dir(),
            warnings,
        };
        cachekeeper::proxy::Server::bind(&loaded, Some(addr.parse().unwrap()))
            .await
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let warned = |addr: std::net::SocketAddr| {
        log_text().lines().any(|l| {
            l.contains("\"WARN\"")
                && l.contains("client_token")
                && l.contains(&format!(":{}", addr.port()))
        })
    };
    let open = bind(config_for(&good.url(), ""), "0.0.0.0:0").await;
    assert!(warned(open), "no warning for {open}:\n{}", log_text());
    let local = bind(config_for(&good.url(), ""), "127.0.0.1:0").await;
    assert!(!warned(local));
    let tokened = bind(
        config_for(&good.url(), "[server]\nclient_token = \"tok-123456789\"\n"),
        "0.0.0.0:0",
    )
    .await;
    assert!(!warned(tokened));
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
async fn api_keys_and_the_client_token_are_neither_logged_nor_stored() {
    logs();
    const ANTHROPIC_KEY: &str = "sk-ant-api03-SECRETanthropicKEY0001";
    const OPENAI_KEY: &str = "sk-proj-SECRETopenaiKEY0002";
    const GEMINI_KEY: &str = "AIzaSECRETgeminiKEY0003";
    const GEMINI_QUERY_KEY: &str = "AIzaSECRETgeminiQUERY0004";
    const TOKEN: &str = "ck-SECRETclientTOKEN0005";
    let handler: Handler = Arc::new(|r: &Recorded| {
        let p = &r.path_and_query;
        if p.contains("streamGenerateContent") {
            sse_response(full(concat!(
                "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"ok\",\"thoughtSignature\":\"c2lnbmF0dXJl\"}]},\"finishReason\":\"STOP\"}],",
                "\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":1},\"modelVersion\":\"gemini-2.5-pro\"}\n\n"
            )))
        } else if p.contains("chat/completions") {
            // A provider that echoes the key in its error.
            json_response(
                401,
                r#"{"error":{"message":"Incorrect API key provided: sk-proj-SECRETopenaiKEY0002","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            )
        } else {
            json_response(
                200,
                r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"thinking","thinking":"hmm","signature":"RXVTaWduYXR1cmU="},{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}"#,
            )
        }
    });
    let mock = start_mock(handler).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let extra = format!(
        "[server]\nclient_token = \"{TOKEN}\"\n\n[state]\npath = {:?}\n",
        db.display().to_string()
    );
    let proxy = start_proxy(&config_for(&mock.url(), &extra)).await;
    let c = client();
    let turn = r#"{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"ok"}]},{"role":"user","content":"again"}]}"#;
    for body in [BODY, turn] {
        let (status, _, _) = send(
            &c,
            &proxy.url("/anthropic/v1/messages"),
            &[
                ("x-api-key", ANTHROPIC_KEY),
                ("anthropic-version", "2023-06-01"),
                ("x-cachekeeper-token", TOKEN),
            ],
            body,
        )
        .await;
        assert_eq!(status, 200);
    }
    let (status, _, _) = send(
        &c,
        &proxy.url(&format!("/t/{TOKEN}/anthropic/v1/messages")),
        &[("authorization", &format!("Bearer {ANTHROPIC_KEY}"))],
        BODY,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = send(
        &c,
        &proxy.url("/openai/v1/chat/completions"),
        &[
            ("authorization", &format!("Bearer {OPENAI_KEY}")),
            ("x-cachekeeper-token", TOKEN),
        ],
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, _) = send(
        &c,
        &proxy.url(&format!(
            "/t/{TOKEN}/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={GEMINI_QUERY_KEY}"
        )),
        &[("x-goog-api-key", GEMINI_KEY)],
        r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    // A wrong token, and the token in the dashboard's and metrics' bearer form.
    let (status, _, _) = send(
        &c,
        &proxy.url("/anthropic/v1/messages"),
        &[
            ("x-cachekeeper-token", "ck-wrong"),
            ("x-api-key", ANTHROPIC_KEY),
        ],
        BODY,
    )
    .await;
    assert_eq!(status, 401);
    let resp = c
        .request(
            http::Request::get(proxy.url("/metrics"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The token anywhere but the one leading segment `admit` strips (a doubled slash in a
    // base URL, an empty segment, a dot segment, a segment further in, the query): refused,
    // and never logged (the failing inputs of a fresh-user run).
    for path in [
        format!("//t/{TOKEN}/anthropic/v1/messages"),
        format!("/t//{TOKEN}/anthropic/v1/messages"),
        format!("/anthropic/t/{TOKEN}/v1/messages"),
        format!("/anthropic/v1/messages?ck={TOKEN}"),
    ] {
        let (status, _, _) =
            send(&c, &proxy.url(&path), &[("x-api-key", ANTHROPIC_KEY)], BODY).await;
        assert_eq!(status, 401, "{path}");
    }
    // The upstream got the keys (the proxy forwards them) but never the client token.
    let recs: Vec<Recorded> = (0..mock.count()).map(|_| mock.last()).collect();
    for r in &recs {
        assert!(!format!("{:?}{}", r.headers, r.path_and_query).contains(TOKEN));
    }
    proxy.stop().await;

    let secrets = [
        ANTHROPIC_KEY,
        OPENAI_KEY,
        GEMINI_KEY,
        GEMINI_QUERY_KEY,
        TOKEN,
    ];
    let logs = log_text();
    assert!(
        logs.contains("cachekeeper::request"),
        "no request lines logged"
    );
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        stored.push((path.display().to_string(), std::fs::read(&path).unwrap()));
    }
    assert!(
        stored
            .iter()
            .any(|(p, b)| p.ends_with("state.db") && !b.is_empty()),
        "no state file written: {:?}",
        stored.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for s in secrets {
        assert!(!logs.contains(s), "{s} is in the logs");
        // Also the key's distinctive tail, in case something logs a truncated or masked form.
        let tail = &s[s.len() - 12..];
        assert!(!logs.contains(tail), "part of {s} is in the logs");
        for (path, bytes) in &stored {
            let found = bytes.windows(tail.len()).any(|w| w == tail.as_bytes());
            assert!(!found, "{s} is in {path}");
        }
    }
}

/// The proxy's own errors take the matched route's dialect (`crate::route::error_dialect`),
/// found by a fresh-user test (B3/B4): the 401 for a missing or wrong client token was
/// OpenAI-shaped on Anthropic and Gemini paths, and so was a dot-segment 400 with an encoded
/// `..%2f` on a route pinned `dialect = "anthropic"`. OpenAI's shape only when no route
/// matches and the path says nothing.
#[tokio::test]
async fn the_proxys_own_errors_take_the_routes_dialect() {
    logs();
    let good = start_mock(ok()).await;
    let extra = format!(
        "[server]\nclient_token = \"tok-shape-0001\"\n\n\
         [[routes]]\nname = \"based\"\nprefix = \"/based\"\nupstream = \"{0}/base\"\ndialect = \"anthropic\"\n\n\
         [[routes]]\nname = \"anthropic-own\"\nprefix = \"/claude\"\nupstream = \"{0}\"\nprovider = \"anthropic\"\n\n\
         [[routes]]\nname = \"gemini-own\"\nprefix = \"/google\"\nupstream = \"{0}\"\nprovider = \"gemini\"\n",
        good.url()
    );
    let proxy = start_proxy(&config_for(&good.url(), &extra)).await;
    #[derive(Debug, Clone, Copy)]
    enum Shape {
        Anthropic,
        Gemini,
        Openai,
    }
    let check = |path: &str, text: &str, status: u16, shape: Shape, code: &str| {
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
        match shape {
            Shape::Anthropic => {
                assert_eq!(v["type"], "error", "{path}: {v}");
                assert!(v["error"]["type"].is_string(), "{path}: {v}");
                assert!(v["error"].get("code").is_none(), "{path}: {v}");
            }
            Shape::Gemini => {
                assert_eq!(v["error"]["code"], status, "{path}: {v}");
                assert!(v["error"]["status"].is_string(), "{path}: {v}");
            }
            Shape::Openai => {
                assert!(v.get("type").is_none(), "{path}: {v}");
                assert_eq!(v["error"]["code"], code, "{path}: {v}");
            }
        }
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(msg.starts_with("cachekeeper:"), "{path}: {v}");
    };
    // No token (then a wrong one): 401 in the route's dialect.
    for (path, shape) in [
        ("/anthropic/v1/messages", Shape::Anthropic),
        ("/anthropic/v1/messages/count_tokens", Shape::Anthropic),
        ("/gemini/v1beta/models/g:generateContent", Shape::Gemini),
        ("/gemini/v1beta/models", Shape::Gemini),
        ("/openai/v1/chat/completions", Shape::Openai),
        ("/based/v1/files", Shape::Anthropic),
        // Non-generation paths: the provider's own API decides.
        ("/claude/v1/files", Shape::Anthropic),
        ("/claude/v1/models", Shape::Anthropic),
        ("/google/v1/files", Shape::Gemini),
        // No route: the path decides, else OpenAI's shape.
        ("/nowhere/v1/messages", Shape::Anthropic),
        ("/nowhere/v1/files", Shape::Openai),
    ] {
        for token in ["", "\r\nx-cachekeeper-token: tok-wrong"] {
            let (status, text) = raw(
                proxy.addr,
                &format!("POST {path} HTTP/1.1\r\nhost: localhost{token}"),
                BODY,
            )
            .await;
            assert_eq!(status, 401, "{path}: {text}");
            check(path, &text, 401, shape, "bad_client_token");
        }
    }
    // Dot segments on the pinned route: every encoding answers in Anthropic's shape.
    for path in [
        "/based/v1/..%2f..%2fx",
        "/based/../v1/messages",
        "/based/%2e%2e/x",
    ] {
        let before = good.count();
        let (status, text) = raw(
            proxy.addr,
            &format!(
                "GET {path} HTTP/1.1\r\nhost: localhost\r\nx-cachekeeper-token: tok-shape-0001"
            ),
            "",
        )
        .await;
        assert_eq!(status, 400, "{path}: {text}");
        assert_eq!(good.count(), before, "{path} went upstream");
        check(path, &text, 400, Shape::Anthropic, "dot_segment");
    }
    // The right token still goes through.
    let (status, text) = raw(
        proxy.addr,
        "POST /claude/v1/messages HTTP/1.1\r\nhost: localhost\r\nx-cachekeeper-token: tok-shape-0001",
        BODY,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    proxy.stop().await;
}
