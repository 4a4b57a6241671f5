//! Faults and framing: what the proxy does when a client, an upstream or the state store
//! misbehaves, and how it frames what it forwards. The proxy runs in-process between a hyper
//! client (or a raw socket) and a hyper mock upstream that records what it received.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

fn echo_ok() -> Handler {
    Arc::new(|_r: &Recorded| json_response(200, r#"{"ok":true}"#))
}

/// The framing headers the mock saw: (`content-length`, `transfer-encoding`).
fn framing(rec: &Recorded) -> (Option<String>, Option<String>) {
    let get = |name: &str| {
        rec.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    (get("content-length"), get("transfer-encoding"))
}

/// Found by testing (the openai and anthropic SDKs' own suites through the proxy): a
/// body-less `DELETE` — no `content-length`, no `transfer-encoding` — went upstream with
/// `transfer-encoding: chunked` and an empty chunked body. A request without a body goes
/// upstream without one; one with a body keeps its `content-length`.
#[tokio::test]
async fn a_bodyless_delete_goes_upstream_without_a_body() {
    let mock = start_mock(echo_ok()).await;
    let proxy = start_proxy(&config_for(&mock.url(), "")).await;
    let c = client();
    for (method, path) in [
        ("DELETE", "/openai/v1/files/file-1"),
        ("DELETE", "/anthropic/v1/messages/batches/msgbatch_1"),
        ("POST", "/openai/v1/files/file-1/cancel"),
        ("PUT", "/openai/v1/files/file-1"),
    ] {
        let req = http::Request::builder()
            .method(method)
            .uri(proxy.url(path))
            .header("authorization", "Bearer sk-x")
            .body(Full::new(Bytes::new()))
            .unwrap();
        // The failing input as the client sent it: no framing header at all.
        assert!(req.headers().get("content-length").is_none());
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{method} {path}");
        let rec = mock.last();
        assert_eq!(rec.method, method);
        assert_eq!(framing(&rec), (None, None), "{method} {path}");
        assert!(rec.body.is_empty());
    }
    // `content-length: 0` stays `content-length: 0`.
    let resp = c
        .request(
            http::Request::delete(proxy.url("/openai/v1/files/file-2"))
                .header("content-length", "0")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(framing(&mock.last()), (Some("0".into()), None));
    // A DELETE with a body keeps it and its length.
    let resp = c
        .request(
            http::Request::delete(proxy.url("/openai/v1/files/file-3"))
                .body(Full::new(Bytes::from_static(b"{\"x\":1}")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let rec = mock.last();
    assert_eq!(framing(&rec), (Some("7".into()), None));
    assert_eq!(&rec.body[..], b"{\"x\":1}");
    proxy.stop().await;
}
