//! Reloading `proxy.toml` while serving (`src/proxy/reload.rs`): routes and limits change for
//! new requests, an open stream finishes on the old configuration, a bad file changes nothing,
//! and restart-only settings are reported. The last test sends a real `SIGHUP` to the binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;

type Stash = Arc<Mutex<Option<mpsc::Sender<Result<Bytes, std::io::Error>>>>>;

/// A mock that answers `{"from":"<name>"}`, or, for a body asking to stream, an event stream
/// fed through the returned stash.
async fn upstream(name: &'static str) -> (Mock, Stash) {
    let stash: Stash = Arc::new(Mutex::new(None));
    let kept = Arc::clone(&stash);
    let mock = start_mock(Arc::new(move |r: &Recorded| {
        if r.body.windows(12).any(|w| w == b"\"stream\":tru") {
            let (tx, body) = channel_body();
            *kept.lock().unwrap() = Some(tx);
            return sse_response(body);
        }
        json_response(200, &format!(r#"{{"from":"{name}"}}"#))
    }))
    .await;
    (mock, stash)
}

/// The config every test starts from: routes to `upstream`, one state file, `extra` on top.
fn config(upstream: &str, state: &std::path::Path, extra: &str) -> String {
    let mut text = config_for(
        upstream,
        &format!("[state]\npath = {:?}\n", state.display().to_string()),
    );
    text.insert_str(0, extra);
    text
}

fn loaded(text: &str) -> cachekeeper::config::Loaded {
    let (config, warnings) = cachekeeper::config::Config::from_toml(text).unwrap();
    cachekeeper::config::Loaded {
        config,
        base_dir: std::env::temp_dir(),
        warnings,
    }
}

/// Bind and run a proxy on `text` (`[server] listen` decides the port): its address, reloader,
/// stop signal and task.
async fn serve(
    text: &str,
) -> (
    std::net::SocketAddr,
    cachekeeper::proxy::Reloader,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let server = cachekeeper::proxy::Server::bind(&loaded(text), None)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let reloader = server.reloader();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    (addr, reloader, stop, done)
}

const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
const STREAM: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test]
async fn a_reload_applies_to_new_requests_while_an_open_stream_finishes_on_the_old_config() {
    let (a, a_stream) = upstream("a").await;
    let (b, _) = upstream("b").await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let listen = "[server]\nlisten = \"127.0.0.1:0\"\n";
    let (addr, reloader, stop, done) = serve(&config(&a.url(), &state, listen)).await;
    let url = format!("http://{addr}/anthropic/v1/messages");
    let http = client();

    // A stream opens on the first configuration (upstream a) and stays open.
    let req = http::Request::post(&url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(STREAM)))
        .unwrap();
    let open = http.request(req).await.unwrap();
    assert_eq!(open.status(), 200);
    let tx = a_stream
        .lock()
        .unwrap()
        .take()
        .expect("the stream reached a");

    // Reload: the routes now point at b; the same state file; listen unchanged.
    let done_reload = reloader
        .reload(&loaded(&config(&b.url(), &state, listen)))
        .unwrap();
    assert_eq!(done_reload.routes, 3);
    assert_eq!(done_reload.needs_restart, Vec::<String>::new());
    let (status, _, body) = send(&http, &url, &[], BODY).await;
    assert_eq!((status, &body[..]), (200, &br#"{"from":"b"}"#[..]));

    // The stream opened before the reload still flows from a, to its end.
    tx.send(Ok(Bytes::from_static(
        b"event: ping\ndata: {\"type\":\"ping\"}\n\n",
    )))
    .await
    .unwrap();
    drop(tx);
    let streamed = tokio::time::timeout(Duration::from_secs(10), open.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(&streamed[..], b"event: ping\ndata: {\"type\":\"ping\"}\n\n");

    // A limit changes with the reload: a client token is now required.
    let guarded = format!("{listen}client_token = \"s3cret-token\"\n");
    reloader
        .reload(&loaded(&config(&b.url(), &state, &guarded)))
        .unwrap();
    let (status, _, _) = send(&http, &url, &[], BODY).await;
    assert_eq!(status, 401);
    let (status, _, _) = send(
        &http,
        &url,
        &[("x-cachekeeper-token", "s3cret-token")],
        BODY,
    )
    .await;
    assert_eq!(status, 200);

    let _ = stop.send(());
    done.await.unwrap();
}

#[tokio::test]
async fn a_bad_file_changes_nothing_and_restart_only_settings_are_reported() {
    let (a, _) = upstream("a").await;
    let (b, _) = upstream("b").await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let listen = "[server]\nlisten = \"127.0.0.1:0\"\n";
    let (addr, reloader, stop, done) = serve(&config(&a.url(), &state, listen)).await;
    let url = format!("http://{addr}/anthropic/v1/messages");
    let http = client();

    // A file with a typo'd key does not load: the error names it, a keeps serving.
    let file = dir.path().join("proxy.toml");
    let bad = config(
        &b.url(),
        &state,
        "[server]\nlisten = \"127.0.0.1:0\"\nlissten = 1\n",
    );
    std::fs::write(&file, bad).unwrap();
    let err = reloader.reload_logged(&file).unwrap_err();
    assert!(
        matches!(err, cachekeeper::proxy::ReloadError::Config(_)),
        "{err}"
    );
    assert!(err.to_string().contains("lissten"), "{err}");
    let (status, _, body) = send(&http, &url, &[], BODY).await;
    assert_eq!((status, &body[..]), (200, &br#"{"from":"a"}"#[..]));

    // The listen address and the state file need a restart: reported, routes still applied.
    let other_state = dir.path().join("other.db");
    let moved = config(
        &b.url(),
        &other_state,
        "[server]\nlisten = \"127.0.0.1:9\"\nshutdown_grace_ms = 5\n",
    );
    std::fs::write(&file, moved).unwrap();
    let done_reload = reloader.reload_logged(&file).unwrap();
    assert_eq!(
        done_reload.needs_restart,
        vec![
            "[server] listen: 127.0.0.1:0 → 127.0.0.1:9".to_owned(),
            "[server] shutdown_grace_ms: 30000 → 5".to_owned(),
            format!(
                "[state] path: {} → {}",
                state.display(),
                other_state.display()
            ),
        ]
    );
    let (status, _, body) = send(&http, &url, &[], BODY).await;
    assert_eq!((status, &body[..]), (200, &br#"{"from":"b"}"#[..]));

    let _ = stop.send(());
    done.await.unwrap();
}

/// A reload that drops `client_token` while the listener is beyond loopback says so.
#[tokio::test]
async fn a_reload_that_drops_the_client_token_beyond_loopback_warns() {
    let (a, _) = upstream("a").await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let with = "[server]\nlisten = \"0.0.0.0:0\"\nclient_token = \"tok-123\"\n";
    let (_addr, reloader, stop, done) = serve(&config(&a.url(), &state, with)).await;
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config(&a.url(), &state, with)).unwrap();
    let kept = reloader.reload_logged(&file).unwrap();
    assert!(kept.warnings.is_empty(), "{:?}", kept.warnings);
    let without = "[server]\nlisten = \"0.0.0.0:0\"\n";
    std::fs::write(&file, config(&a.url(), &state, without)).unwrap();
    let dropped = reloader.reload_logged(&file).unwrap();
    assert_eq!(dropped.warnings.len(), 1, "{:?}", dropped.warnings);
    assert!(
        dropped.warnings[0].starts_with("listening on 0.0.0.0:")
            && dropped.warnings[0].contains("beyond loopback, without [server] client_token"),
        "{:?}",
        dropped.warnings
    );
    let _ = stop.send(());
    done.await.unwrap();
}

/// A reload that adds a route lending the proxy's AWS credentials (`sign_all`) while the
/// listener is beyond loopback without a client token is refused; the running routes keep
/// serving.
#[tokio::test]
async fn a_reload_that_lends_credentials_beyond_loopback_is_refused() {
    let (a, _) = upstream("a").await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let open = "[server]\nlisten = \"0.0.0.0:0\"\n";
    let (_addr, reloader, stop, done) = serve(&config(&a.url(), &state, open)).await;
    let lending = format!(
        "{}\n[[routes]]\nname = \"bedrock\"\nprefix = \"/bedrock\"\nprovider = \"bedrock\"\n\
         upstream = \"{}\"\n[routes.aws]\nregion = \"us-east-1\"\nsign_all = true\n",
        config(&a.url(), &state, open),
        a.url()
    );
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, lending).unwrap();
    let err = reloader.reload_from(&file).unwrap_err().to_string();
    assert!(err.contains("bedrock ([routes.aws] sign_all)"), "{err}");
    let _ = stop.send(());
    done.await.unwrap();
}

/// The real binary: `SIGHUP` applies an edited file; a broken file is logged and the running
/// configuration keeps serving.
#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_file_and_a_broken_file_keeps_the_old_config() {
    let (a, _) = upstream("a").await;
    let (b, _) = upstream("b").await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config(&a.url(), &state, "")).unwrap();
    let served = Served::start(&file, &dir.path().join("stderr.log"));
    let log = served.log.clone();
    let url = served.url("/anthropic/v1/messages");
    let http = client();
    let from = |want: &'static [u8]| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            for _ in 0..200 {
                let req = http::Request::post(&url)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(BODY)))
                    .unwrap();
                if let Ok(resp) = http.request(req).await {
                    let body = resp.into_body().collect().await.unwrap().to_bytes();
                    if body == want {
                        return true;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        }
    };
    assert!(from(br#"{"from":"a"}"#).await, "the proxy never served a");

    std::fs::write(&file, config(&b.url(), &state, "")).unwrap();
    served.signal("HUP");
    assert!(
        from(br#"{"from":"b"}"#).await,
        "SIGHUP did not apply the new file"
    );

    std::fs::write(&file, "[[routes]\nname = ").unwrap();
    served.signal("HUP");
    let mut logged = String::new();
    for _ in 0..100 {
        logged = std::fs::read_to_string(&log).unwrap();
        if logged.contains("configuration not reloaded") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(logged.contains("configuration not reloaded"), "{logged}");
    assert!(
        from(br#"{"from":"b"}"#).await,
        "a broken file changed the running config"
    );
    assert_eq!(
        logged.matches("configuration reloaded").count(),
        1,
        "{logged}"
    );
    drop(served);
}
