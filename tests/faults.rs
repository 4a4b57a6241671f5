//! Faults and framing: what the proxy does when a client, an upstream or the state store
//! misbehaves, and how it frames what it forwards. The proxy runs in-process between a hyper
//! client (or a raw socket) and a hyper mock upstream that records what it received.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

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

/// Open a raw connection to the proxy and send `head` (request line and headers, ending in
/// the blank line) and the first part of the body.
async fn raw(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    s
}

/// Read the whole response from a raw connection (until the proxy closes it or 10 s pass).
async fn read_response(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if response_complete(&out) {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `raw` holds a whole `content-length`-framed response.
fn response_complete(raw: &[u8]) -> bool {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .is_some_and(|n| body.len() >= n)
}

/// A client body fed by the test, chunk by chunk, with pauses between.
fn trickle(parts: Vec<&'static [u8]>, gap: Duration) -> http_body_util::StreamBody<TrickleStream> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    tokio::spawn(async move {
        for p in parts {
            tokio::time::sleep(gap).await;
            if tx
                .send(Ok(Frame::data(Bytes::from_static(p))))
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let stream: TrickleStream = Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    http_body_util::StreamBody::new(stream)
}

type TrickleStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, std::io::Error>> + Send>,
>;

/// `[server] body_idle_timeout_ms` bounds the gap between two client body chunks, not the
/// upload: a body trickling in with gaps under it (here 10 chunks, 150 ms apart, 1.5 s in all
/// against a 600 ms gap) goes through whole, read for the passes or streamed.
#[tokio::test]
async fn a_slow_upload_under_the_body_gap_is_never_cut() {
    let mock = start_mock(echo_ok()).await;
    let proxy = start_proxy(&config_for(
        &mock.url(),
        "[server]\nbody_idle_timeout_ms = 600\nidle_timeout_ms = 100\n",
    ))
    .await;
    let c = Client::builder(TokioExecutor::new()).build_http();
    let parts: Vec<&'static [u8]> = vec![
        b"{\"model\":\"m\",",
        b"\"max_tokens\":1,",
        b"\"messages\":[",
        b"{\"role\":\"user\",",
        b"\"content\":\"a",
        b"b",
        b"c",
        b"d",
        b"\"}",
        b"]}",
    ];
    let whole: Vec<u8> = parts.concat();
    for path in ["/anthropic/v1/messages", "/openai/v1/files"] {
        let req = http::Request::post(proxy.url(path))
            .body(trickle(parts.clone(), Duration::from_millis(150)))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(mock.last().body, whole, "{path}");
    }
    proxy.stop().await;
}

/// A client that stops mid-body gets a 400 in the dialect's error shape once
/// `body_idle_timeout_ms` passes, whether the proxy was reading the body for the passes
/// (nothing reaches the upstream) or streaming it upstream (the upstream request is
/// abandoned).
#[tokio::test]
async fn a_client_stalling_past_the_body_gap_gets_the_dialects_error() {
    let mock = start_mock(echo_ok()).await;
    let extra = format!(
        "[server]\nbody_idle_timeout_ms = 300\n\n[[routes]]\nname = \"claude\"\nprefix = \"/claude\"\nupstream = \"{}\"\nprovider = \"anthropic\"\n",
        mock.url()
    );
    let proxy = start_proxy(&config_for(&mock.url(), &extra)).await;
    let head = |path: &str| {
        format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n")
    };
    // Read for the passes: Anthropic's shape.
    let mut s = raw(
        proxy.addr,
        &head("/anthropic/v1/messages"),
        b"{\"model\":\"m\",",
    )
    .await;
    let text = read_response(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(
        v["error"]["message"],
        "cachekeeper: could not read the request body: no request body data for 300 ms"
    );
    assert_eq!(mock.count(), 0);
    // Streamed (a tunnelled path): OpenAI's shape, after part of the body went upstream.
    let mut s = raw(proxy.addr, &head("/openai/v1/files"), b"--boundary\r\n").await;
    let text = read_response(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"]["code"], "client_body");
    assert_eq!(
        v["error"]["message"],
        "cachekeeper: could not read the request body: no request body data for 300 ms"
    );
    // Streamed on a route to Anthropic (the failing input, a fresh-user test's B4: it was
    // OpenAI-shaped): the provider's own dialect.
    let mut s = raw(proxy.addr, &head("/claude/v1/files"), b"--boundary\r\n").await;
    let text = read_response(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(
        v["error"]["message"],
        "cachekeeper: could not read the request body: no request body data for 300 ms"
    );
    // The proxy keeps serving.
    let (status, _, _) = send(
        &client(),
        &proxy.url("/openai/v1/chat/completions"),
        &[],
        "{}",
    )
    .await;
    assert_eq!(status, 200);
    proxy.stop().await;
}

const BUDGET: &str = "[server]\nmax_rewrite_bytes = 100000\nmax_buffered_bytes = 100000\n";

/// A body that takes most of the budget (`content-length: 90000`, reserved whole before it
/// is read), its first bytes sent and the rest held back by the test.
async fn hold_budget(proxy: &Proxy) -> tokio::net::TcpStream {
    let head = "POST /anthropic/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 90000\r\n\r\n";
    let s = raw(
        proxy.addr,
        head,
        b"{\"model\":\"m\",\"messages\":[],\"pad\":\"",
    )
    .await;
    // Let the proxy reserve it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    s
}

/// The rest of [`hold_budget`]'s body; returns the response.
async fn release_budget(mut s: tokio::net::TcpStream) -> String {
    use tokio::io::AsyncWriteExt;
    let sent = b"{\"model\":\"m\",\"messages\":[],\"pad\":\"".len();
    let mut rest = vec![b'x'; 90000 - sent - 2];
    rest.extend_from_slice(b"\"}");
    s.write_all(&rest).await.unwrap();
    read_response(&mut s).await
}

/// `[server] max_buffered_bytes` / `buffer_wait_ms`: a body with no room in the budget
/// waits; past `buffer_wait_ms` it goes upstream untouched (`x-cachekeeper-rewrites:
/// over_budget`), counted in `cachekeeper_buffer_budget_exceeded_total`.
#[tokio::test]
async fn a_body_with_no_room_in_the_budget_is_forwarded_untouched_after_the_wait() {
    let mock = start_mock(echo_ok()).await;
    let proxy = start_proxy(&config_for(
        &mock.url(),
        &format!("{BUDGET}buffer_wait_ms = 300\n"),
    ))
    .await;
    let held = hold_budget(&proxy).await;
    let body = format!(
        r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "y".repeat(20_000)
    );
    let (status, headers, _) = send(
        &client(),
        &proxy.url("/anthropic/v1/messages"),
        &[],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-cachekeeper-rewrites"], "over_budget");
    assert_eq!(mock.last().body, body.as_bytes());
    assert_eq!(
        metric(
            &proxy,
            r#"cachekeeper_buffer_budget_exceeded_total{route="anthropic"}"#
        )
        .await,
        Some(1.0)
    );
    // The held body is read and passed as usual, and its room comes back.
    let text = release_budget(held).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("body=unchanged"), "{text}");
    let (_, headers, _) = send(&client(), &proxy.url("/anthropic/v1/messages"), &[], body).await;
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.contains("body=unchanged"), "{rewrites}");
    proxy.stop().await;
}

/// Within `buffer_wait_ms`, a body waits for room instead of skipping the passes: rewriting
/// does not depend on load.
#[tokio::test]
async fn a_body_waits_for_room_in_the_budget_and_is_then_passed() {
    let mock = start_mock(echo_ok()).await;
    let proxy = start_proxy(&config_for(
        &mock.url(),
        &format!("{BUDGET}buffer_wait_ms = 20000\n"),
    ))
    .await;
    let held = hold_budget(&proxy).await;
    let url = proxy.url("/anthropic/v1/messages");
    let waiting = tokio::spawn(async move {
        let body = format!(
            r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":"{}"}}]}}"#,
            "y".repeat(20_000)
        );
        send(&client(), &url, &[], body).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the second body must wait for room");
    let text = release_budget(held).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let (status, headers, _) = waiting.await.unwrap();
    assert_eq!(status, 200);
    let rewrites = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(rewrites.contains("body=unchanged"), "{rewrites}");
    assert_eq!(
        metric(
            &proxy,
            r#"cachekeeper_buffer_budget_exceeded_total{route="anthropic"}"#
        )
        .await,
        None
    );
    proxy.stop().await;
}

/// Usage records in the state file, read by a connection of the test's own.
fn stored_usage(path: &std::path::Path) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM records WHERE kind = 'usage'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// The `cachekeeper::state` log lines about `path`.
fn state_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = log_text();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "cachekeeper::state" && v["path"] == path.display().to_string())
        .collect()
}

/// One outage of the state file, injected with `fault` into the writer's own SQLite
/// connection and lifted with `lift`: every request is served whole meanwhile, the outage
/// logs one warning (the file's path and SQLite's error, no key, no user text) and counts its
/// failed writes, and once writes work again the records held meanwhile and every later one
/// reach the file. Returns the warning's `error`.
async fn state_outage(fault: cachekeeper::state::Fault, lift: cachekeeper::state::Fault) -> String {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let proxy = start_proxy(&config_for(
        &mock.url(),
        &format!("[state]\npath = {:?}\n", path.display().to_string()),
    ))
    .await;
    let errors = "cachekeeper_state_write_errors_total";
    let mut sent = 0;
    for _ in 0..3 {
        assert_eq!(state_turn(&proxy, "before", sent).await, 200);
        sent += 1;
    }
    proxy.store.flush();
    assert_eq!(stored_usage(&path), 3);
    assert_eq!(metric(&proxy, errors).await, Some(0.0));
    assert!(proxy.store.is_durable());

    assert!(proxy.store.inject_fault(fault).is_some());
    // Turns until a write fails (a full file may first fill its free pages); each is served.
    let mut during = 0;
    while metric(&proxy, errors).await == Some(0.0) {
        assert!(during < 2000, "no write failed");
        assert_eq!(state_turn(&proxy, "during", sent).await, 200);
        sent += 1;
        during += 1;
        proxy.store.flush();
    }
    for _ in 0..20 {
        assert_eq!(state_turn(&proxy, "during", sent).await, 200);
        sent += 1;
    }
    proxy.store.flush();
    assert!(!proxy.store.is_durable());
    let failed = metric(&proxy, errors).await.unwrap();
    assert!(failed >= 2.0, "the retries fail too: {failed}");
    assert!(stored_usage(&path) < i64::try_from(sent).unwrap());
    let lines = state_lines(&path);
    let warnings: Vec<_> = lines.iter().filter(|v| v["level"] == "WARN").collect();
    assert_eq!(warnings.len(), 1, "one warning per outage: {lines:?}");
    assert_eq!(
        warnings[0]["message"],
        "state writes failing; serving on, keeping records in memory and retrying"
    );
    let error = warnings[0]["error"].as_str().unwrap().to_owned();

    assert!(proxy.store.inject_fault(lift).is_some());
    assert_eq!(state_turn(&proxy, "after", sent).await, 200);
    sent += 1;
    // The flush retries at once (otherwise the writer retries every second).
    proxy.store.flush();
    assert!(proxy.store.is_durable());
    let resumed: Vec<_> = state_lines(&path)
        .into_iter()
        .filter(|v| v["message"] == "state writes resumed")
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["level"], "INFO");
    assert_eq!(resumed[0]["dropped"], 0);
    // Every turn's usage record is in the file: those of the outage too.
    assert_eq!(stored_usage(&path), i64::try_from(sent).unwrap());
    let counted = metric(&proxy, errors).await.unwrap();
    assert_eq!(state_turn(&proxy, "after", sent).await, 200);
    sent += 1;
    proxy.store.flush();
    assert_eq!(stored_usage(&path), i64::try_from(sent).unwrap());
    assert_eq!(
        metric(&proxy, errors).await.unwrap(),
        counted,
        "no failure since"
    );
    for line in state_lines(&path) {
        let text = line.to_string();
        assert!(
            !text.contains(TURN_KEY) && !text.contains(TURN_TEXT),
            "{text}"
        );
    }
    proxy.stop().await;
    error
}

/// The state file turns read-only under the running proxy (`PRAGMA query_only` on the
/// writer's connection: SQLite refuses every write as for a read-only file).
#[tokio::test]
async fn a_read_only_state_file_is_survived_and_recovered_from() {
    use cachekeeper::state::Fault;
    let error = state_outage(Fault::ReadOnly(true), Fault::ReadOnly(false)).await;
    assert!(
        error.contains("readonly") || error.contains("read-only"),
        "{error}"
    );
}

/// The state file is full (`PRAGMA max_page_count` held at its current size: SQLite answers
/// `SQLITE_FULL`, as on a full disk).
#[tokio::test]
async fn a_full_state_file_is_survived_and_recovered_from() {
    use cachekeeper::state::Fault;
    let error = state_outage(Fault::MaxPageCount(1), Fault::MaxPageCount(1 << 20)).await;
    assert!(error.contains("full"), "{error}");
}

/// A state path that cannot be opened (a directory that does not exist): the proxy starts,
/// serves, and says so once, naming the path.
#[tokio::test]
async fn an_unopenable_state_path_runs_in_memory() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("state.db");
    let proxy = start_proxy(&config_for(
        &mock.url(),
        &format!("[state]\npath = {:?}\n", path.display().to_string()),
    ))
    .await;
    assert!(!proxy.store.is_durable());
    for i in 0..3 {
        assert_eq!(state_turn(&proxy, "s", i).await, 200);
    }
    proxy.store.flush();
    assert!(!path.exists());
    let lines = state_lines(&path);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["level"], "WARN");
    assert!(lines[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("cannot open the state store; running in memory"));
    assert_eq!(
        metric(&proxy, "cachekeeper_state_write_errors_total").await,
        Some(0.0)
    );
    proxy.stop().await;
}

/// A turn sent to a spawned proxy, tolerating a proxy that is gone: the status, or `None`.
async fn try_turn(c: &TestClient, url: &str, session: &str, i: usize) -> Option<u16> {
    let body = format!(
        r#"{{"model":"claude-x","max_tokens":8,"messages":[{{"role":"user","content":"{TURN_TEXT} {i}"}}]}}"#
    );
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", TURN_KEY)
        .header("x-cachekeeper-session", session)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = c.request(req).await.ok()?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await.ok()?;
    Some(status)
}

/// `kill -9` while the proxy writes state (eight clients sending turns, each turn a session
/// record and a usage record): the file opens cleanly after (`PRAGMA integrity_check` is
/// `ok`, still in WAL mode, the turns committed before the kill are there), a proxy started
/// again on it serves, and `cachekeeper state` reads it.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_state_writes_leaves_a_file_that_opens_cleanly() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let file = dir.path().join("proxy.toml");
    std::fs::write(
        &file,
        config_for(
            &mock.url(),
            &format!("[state]\npath = {:?}\n", state.display().to_string()),
        ),
    )
    .unwrap();
    let mut served = Served::start(&file, &dir.path().join("first.log"));
    assert!(served.ready().await, "{}", served.log_text());
    let url = served.url("/anthropic/v1/messages");
    let served_ok = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for k in 0..8 {
        let (url, ok, stop) = (url.clone(), Arc::clone(&served_ok), Arc::clone(&stop));
        clients.push(tokio::spawn(async move {
            let c = client();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                match try_turn(&c, &url, &format!("kill-{k}"), i).await {
                    Some(200) => {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Some(_) => {}
                    None => tokio::time::sleep(Duration::from_millis(5)).await,
                }
                i += 1;
            }
        }));
    }
    for _ in 0..3000 {
        if served_ok.load(Ordering::SeqCst) >= 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served_ok.load(Ordering::SeqCst) >= 400);
    // Mid-way: the clients are still sending.
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }

    {
        let conn = rusqlite::Connection::open(&state).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let usage: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM records WHERE kind = 'usage'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(usage > 0, "the turns before the kill were committed");
    }

    let mut again = Served::start(&file, &dir.path().join("second.log"));
    assert!(again.ready().await, "{}", again.log_text());
    let c = client();
    assert_eq!(
        try_turn(&c, &again.url("/anthropic/v1/messages"), "after", 0).await,
        Some(200)
    );
    again.signal("TERM");
    let status = again.exit_within(Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        !again.log_text().contains("cannot open the state store"),
        "{}",
        again.log_text()
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
        .args(["state", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("record(s)"), "{stdout}");
    assert!(stdout.contains("usage"), "{stdout}");
}

/// An Anthropic event stream of `deltas` text deltas, one every `gap`; `split`: each delta
/// event goes as two chunks, its first half then (after half the gap) the rest.
fn slow_stream(deltas: usize, gap: Duration, split: bool) -> Handler {
    Arc::new(move |_r: &Recorded| {
        let (tx, body) = channel_body();
        tokio::spawn(async move {
            let start = concat!(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n",
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            );
            if tx
                .send(Ok(Bytes::from_static(start.as_bytes())))
                .await
                .is_err()
            {
                return;
            }
            for i in 0..deltas {
                tokio::time::sleep(gap).await;
                let event = format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"w{i} \"}}}}\n\n");
                let parts = if split {
                    let (a, b) = event.split_at(event.len() / 2);
                    vec![a.to_owned(), b.to_owned()]
                } else {
                    vec![event]
                };
                for (n, part) in parts.into_iter().enumerate() {
                    if n > 0 {
                        tokio::time::sleep(gap / 2).await;
                    }
                    if tx.send(Ok(Bytes::from(part))).await.is_err() {
                        return;
                    }
                }
            }
            let end = concat!(
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            );
            let _ = tx.send(Ok(Bytes::from_static(end.as_bytes()))).await;
        });
        sse_response(body)
    })
}

/// What one client of a stream saw: every byte, and whether the body ended cleanly (the
/// chunked body's last chunk arrived) or with an error.
struct Seen {
    text: String,
    clean_end: bool,
}

/// Open `n` streams through `served`; returns once each has its first bytes, with the
/// tasks reading them to their end.
async fn open_streams(served: &Served, n: usize) -> Vec<tokio::task::JoinHandle<Seen>> {
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<()>(n);
    let mut tasks = Vec::new();
    for i in 0..n {
        let url = served.url("/anthropic/v1/messages");
        let first_tx = first_tx.clone();
        tasks.push(tokio::spawn(async move {
            let body = format!(
                r#"{{"model":"claude-x","max_tokens":8,"stream":true,"messages":[{{"role":"user","content":"stream {i}"}}]}}"#
            );
            let req = http::Request::post(url)
                .header("content-type", "application/json")
                .header("x-api-key", "sk-ant-stream")
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let resp = client().request(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            let mut text = Vec::new();
            let mut first = Some(first_tx);
            let clean_end = loop {
                match body.frame().await {
                    None => break true,
                    Some(Err(_)) => break false,
                    Some(Ok(frame)) => {
                        if let Some(d) = frame.data_ref() {
                            text.extend_from_slice(d);
                        }
                        if let Some(tx) = first.take() {
                            tx.send(()).await.unwrap();
                        }
                    }
                }
            };
            Seen {
                text: String::from_utf8(text).unwrap(),
                clean_end,
            }
        }));
    }
    drop(first_tx);
    for _ in 0..n {
        first_rx.recv().await.expect("a stream failed to open");
    }
    tasks
}

/// The events of an event stream as the client parsed it: (`event`, `data` as JSON). Panics
/// on bytes after the last blank line (a truncated event) or an event whose data is not
/// JSON.
fn events(text: &str) -> Vec<(String, serde_json::Value)> {
    assert!(
        text.ends_with("\n\n"),
        "a truncated event at the end: {text:?}"
    );
    text.trim_end_matches('\n')
        .split("\n\n")
        .map(|event| {
            let mut name = String::new();
            let mut data = String::new();
            for line in event.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                } else {
                    panic!("not a field line: {line:?} in {text:?}");
                }
            }
            let data: serde_json::Value = serde_json::from_str(&data)
                .unwrap_or_else(|e| panic!("a cut event {event:?}: {e}"));
            (name, data)
        })
        .collect()
}

/// The proxy's config with `[server] shutdown_grace_ms`, written to `dir/proxy.toml`.
fn grace_config(dir: &std::path::Path, upstream: &str, grace_ms: u64) -> std::path::PathBuf {
    let file = dir.join("proxy.toml");
    std::fs::write(
        &file,
        config_for(
            upstream,
            &format!(
                "[server]\nshutdown_grace_ms = {grace_ms}\n[state]\npath = {:?}\n",
                dir.join("state.db").display().to_string()
            ),
        ),
    )
    .unwrap();
    file
}

/// After SIGTERM the listener is closed: a new connection is refused (within 10 s of the
/// signal, however long the process takes to see it).
async fn refused_soon(port: u16) -> bool {
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The proxy (`shutdown_grace_ms = grace_ms`) in front of a mock answering with `stream`,
/// 50 streams open through it, then SIGTERM, checked to close the listener at once. The mock
/// and the directory are returned to live as long as the test.
#[cfg(unix)]
async fn streams_then_sigterm(
    stream: Handler,
    grace_ms: u64,
) -> (
    Mock,
    tempfile::TempDir,
    Served,
    Vec<tokio::task::JoinHandle<Seen>>,
) {
    let mock = start_mock(stream).await;
    let dir = tempfile::tempdir().unwrap();
    let file = grace_config(dir.path(), &mock.url(), grace_ms);
    let served = Served::start(&file, &dir.path().join("serve.log"));
    assert!(served.ready().await, "{}", served.log_text());
    let streams = open_streams(&served, 50).await;
    served.signal("TERM");
    assert!(
        refused_soon(served.port).await,
        "still accepting after SIGTERM"
    );
    (mock, dir, served, streams)
}

/// SIGTERM with 50 streams open, each with ~1.5 s to go, under a grace longer than that:
/// new connections are refused at once, every stream finishes whole (up to `message_stop`,
/// a clean end of the body), and the process exits 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_50_open_streams_lets_them_finish_within_the_grace() {
    let (_mock, _dir, mut served, streams) =
        streams_then_sigterm(slow_stream(20, Duration::from_millis(75), false), 20_000).await;
    for s in streams {
        let seen = s.await.unwrap();
        assert!(seen.clean_end, "{:?}", seen.text);
        let got = events(&seen.text);
        assert_eq!(got.len(), 2 + 20 + 3, "{:?}", seen.text);
        assert_eq!(got.last().unwrap().0, "message_stop");
    }
    let status = served.exit_within(Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        served.log_text()
    );
}

/// SIGTERM with 50 streams that would need ~3 s more, under a 600 ms grace, each delta event
/// reaching the proxy in two halves: every client sees complete events only — the stream
/// ends after a complete event with the dialect's error event saying the proxy is shutting
/// down, then a clean end of the body (never part of an event, never a broken body) — and
/// the process exits 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_past_the_grace_ends_open_streams_after_a_complete_event() {
    let (_mock, _dir, mut served, streams) =
        streams_then_sigterm(slow_stream(40, Duration::from_millis(80), true), 600).await;
    for s in streams {
        let seen = s.await.unwrap();
        assert!(seen.clean_end, "{:?}", seen.text);
        let got = events(&seen.text);
        let (name, data) = got.last().unwrap();
        assert_eq!(name, "error", "{:?}", seen.text);
        assert_eq!(data["type"], "error");
        assert_eq!(data["error"]["type"], "api_error");
        assert_eq!(
            data["error"]["message"],
            "cachekeeper: the proxy is shutting down; the stream was ended after its last complete event"
        );
        // Everything before it is the upstream's stream, event by event, in order.
        assert_eq!(got[0].0, "message_start");
        for (i, (name, data)) in got[2..got.len() - 1].iter().enumerate() {
            assert_eq!(name, "content_block_delta");
            assert_eq!(data["delta"]["text"], format!("w{i} "));
        }
        assert!(got.len() < 2 + 40 + 3, "cut before its end");
    }
    let status = served.exit_within(Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        served.log_text()
    );
    let log = served.log_text();
    assert!(log.contains("shutdown grace over"), "{log}");
}

/// SIGTERM while a request still waits for its upstream's response headers (an upstream
/// that accepted the request and never answers): when the grace is nearly over, the client
/// gets a 503 in its dialect's shape saying the proxy is shutting down (retryable), instead
/// of a connection closed without a response, and the process exits 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_a_request_still_waiting_for_headers_with_a_503() {
    use tokio::io::AsyncReadExt;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", silent.local_addr().unwrap());
    let (got_tx, got_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut conn, _) = silent.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = conn.read(&mut buf).await;
        let _ = got_tx.send(());
        // Holds the connection open and never answers.
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(conn);
    });
    let dir = tempfile::tempdir().unwrap();
    let file = grace_config(dir.path(), &upstream, 600);
    let mut served = Served::start(&file, &dir.path().join("serve.log"));
    assert!(served.ready().await, "{}", served.log_text());
    let url = served.url("/anthropic/v1/messages");
    let waiting = tokio::spawn(async move {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .header("x-api-key", "sk-ant-waiting")
            .body(Full::new(Bytes::from_static(
                br#"{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#,
            )))
            .unwrap();
        let resp = client().request(req).await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    });
    tokio::time::timeout(Duration::from_secs(10), got_rx)
        .await
        .expect("the request reached the upstream")
        .unwrap();
    served.signal("TERM");
    let (status, body) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("answered within the grace")
        .unwrap();
    assert_eq!(status, 503);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "api_error");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("cachekeeper: the proxy is shutting down; no response from upstream"),
        "{msg}"
    );
    let status = served.exit_within(Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        served.log_text()
    );
}

/// The `cachekeeper::state` log lines whose message starts with `start`.
fn state_messages(start: &str) -> Vec<serde_json::Value> {
    log_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["target"] == "cachekeeper::state"
                && v["message"].as_str().is_some_and(|m| m.starts_with(start))
        })
        .collect()
}

/// Issue 27: a state store that stops answering (its writer blocked, as on a Redis under
/// `kill -STOP`) stalls no request. 50 requests in flight, each a new session whose record the
/// proxy must look for in the store: `/healthz` answers meanwhile and every request completes
/// whole. The first request's load phase times out (an async wait) and says so once; the
/// others read memory only, without waiting. Once the store answers again, one line says so
/// and requests read it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
async fn a_state_store_that_stops_answering_stalls_no_request() {
    const IN_FLIGHT: usize = 50;
    const STALL_MS: u64 = 3000;
    logs();
    // The upstream answers each request's head at once and holds its body until released, so
    // the requests stay in flight.
    type Held = tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>;
    let held: Arc<std::sync::Mutex<Vec<Held>>> = Arc::default();
    let h = held.clone();
    let mock = start_mock(Arc::new(move |_r: &Recorded| {
        let (tx, body) = channel_body();
        h.lock().unwrap().push(tx);
        http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let proxy = start_proxy(&config_for(
        &mock.url(),
        &format!("[state]\npath = {:?}\n", path.display().to_string()),
    ))
    .await;
    let stalled = "the state store did not answer a request's reads in time";
    let again = "the state store answers again";
    assert!(state_messages(stalled).is_empty());

    assert_eq!(
        proxy
            .store
            .inject_fault(cachekeeper::state::Fault::StallMs(STALL_MS)),
        Some(i64::try_from(STALL_MS).unwrap())
    );
    let proxy = Arc::new(proxy);
    let turn = |session: String| {
        let proxy = proxy.clone();
        async move {
            let body = format!(
                r#"{{"model":"claude-x","max_tokens":8,"messages":[{{"role":"user","content":"{TURN_TEXT}"}}]}}"#
            );
            send(
                &client(),
                &proxy.url("/anthropic/v1/messages"),
                &[("x-api-key", TURN_KEY), ("x-cachekeeper-session", &session)],
                body,
            )
            .await
        }
    };
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|i| tokio::spawn(turn(format!("stalled-{i}"))))
        .collect();
    // A guard against a hang, not a latency bound.
    let guard = Duration::from_secs(30);
    tokio::time::timeout(guard, async {
        while held.lock().unwrap().len() < IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every request reached the upstream while the store was stalled");
    let healthz = http::Request::get(proxy.url("/healthz"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(guard, client().request(healthz))
        .await
        .expect("/healthz answers with the requests in flight")
        .unwrap();
    assert_eq!(resp.status(), 200);
    for tx in held.lock().unwrap().drain(..) {
        tx.try_send(Ok(Bytes::from_static(TURN_REPLY.as_bytes())))
            .unwrap();
    }
    for t in tasks {
        let (status, _, body) = tokio::time::timeout(guard, t).await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(&body[..], TURN_REPLY.as_bytes(), "served whole");
    }
    // One load timed out; the others did not wait (one warning), and the store is still stalled.
    let warned = state_messages(stalled);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0]["level"], "WARN");
    assert_eq!(warned[0]["wait_ms"], 50, "the session read's bound");
    assert!(state_messages(again).is_empty());

    // Once the writer answers again (its next successful write), one line says so.
    let released = tokio::time::timeout(guard, async {
        let mut i = 0;
        loop {
            let h = held.clone();
            let t = tokio::spawn(turn(format!("after-{i}")));
            loop {
                if let Some(tx) = h.lock().unwrap().pop() {
                    tx.try_send(Ok(Bytes::from_static(TURN_REPLY.as_bytes())))
                        .unwrap();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(t.await.unwrap().0, 200);
            proxy.store.flush();
            if !state_messages(again).is_empty() {
                return;
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(released.is_ok(), "the store never answered again");
    assert_eq!(state_messages(again).len(), 1);
    assert_eq!(state_messages(stalled).len(), 1);
}

/// Issue 27: a log reader that stops reading never stalls a request. The real binary with
/// stderr a pipe nobody reads, every level logged (`RUST_LOG=trace`: about 9 lines a request,
/// so the log's queue of 2,048 lines fills): 500 requests complete whole, `/healthz` answers, the lines that
/// did not fit are dropped and counted (`cachekeeper_log_lines_dropped_total`), and once the
/// pipe is read again one line says how many were dropped. Before, the 64 KiB pipe buffer
/// filled after about 48 requests and every request (`/healthz` too) hung.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_reader_that_stops_reading_stalls_no_request() {
    use std::io::BufRead as _;
    const REQUESTS: usize = 500;
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config_for(&mock.url(), "")).unwrap();
    let mut served = Served::spawn(
        &file,
        std::process::Stdio::piped(),
        &[("RUST_LOG", "trace")],
    );
    // Nobody reads it until the end.
    let stderr = served.child.stderr.take().unwrap();
    assert!(served.ready().await);
    let url = served.url("/anthropic/v1/messages");
    let guard = Duration::from_secs(60);
    let c = client();
    let body = format!(
        r#"{{"model":"claude-x","max_tokens":8,"messages":[{{"role":"user","content":"{TURN_TEXT}"}}]}}"#
    );
    for i in 0..REQUESTS {
        let sent = send(&c, &url, &[("x-api-key", TURN_KEY)], body.clone());
        let (status, _, resp) = tokio::time::timeout(guard, sent)
            .await
            .unwrap_or_else(|_| panic!("request {i} hung behind the log"));
        assert_eq!(status, 200);
        assert_eq!(&resp[..], TURN_REPLY.as_bytes());
    }
    let get = |path: &str| {
        let req = http::Request::get(served.url(path))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let c = c.clone();
        async move {
            let resp = tokio::time::timeout(guard, c.request(req))
                .await
                .expect("a reserved path hung behind the log")
                .unwrap();
            let status = resp.status();
            let text = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8(text.to_vec()).unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    // The drop monitor counts once a second.
    let series = "cachekeeper_log_lines_dropped_total ";
    let dropped = tokio::time::timeout(guard, async {
        loop {
            let (status, text) = get("/metrics").await;
            assert_eq!(status, 200);
            let n = text
                .lines()
                .find_map(|l| l.strip_prefix(series))
                .map(|v| v.trim().parse::<f64>().unwrap());
            if let Some(n) = n.filter(|n| *n > 0.0) {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("no dropped line was counted");
    assert!(dropped >= 1.0);
    // The reader comes back: one line says how many were dropped.
    let (found_tx, found_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("log lines dropped"))
            {
                let _ = found_tx.send(v);
            }
        }
    });
    let said = tokio::task::spawn_blocking(move || found_rx.recv_timeout(guard))
        .await
        .unwrap()
        .expect("no line said how many log lines were dropped");
    assert_eq!(said["level"], "WARN");
    assert!(said["dropped"].as_u64().unwrap() >= 1, "{said}");
}
