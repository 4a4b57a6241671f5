//! Test harness: an in-process mock upstream (hyper) and an in-process proxy, both on
//! ephemeral loopback ports.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

pub mod redis;

pub type MockBody = BoxBody<Bytes, std::io::Error>;

/// A request as the mock upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub type Handler = Arc<dyn Fn(&Recorded) -> Response<MockBody> + Send + Sync>;

pub struct Mock {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Mock {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub fn last(&self) -> Recorded {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("no request")
    }
    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

pub fn full(b: impl Into<Bytes>) -> MockBody {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

pub fn json_response(status: u16, body: &str) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body.to_owned()))
        .unwrap()
}

/// A streaming body fed by a channel: send `Ok(bytes)` for a chunk, `Err(_)` to break the
/// connection mid-body, drop the sender to end it.
pub fn channel_body() -> (mpsc::Sender<Result<Bytes, std::io::Error>>, MockBody) {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item.map(Frame::data), rx))
    });
    (tx, StreamBody::new(stream).boxed())
}

pub fn sse_response(body: MockBody) -> Response<MockBody> {
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

/// A mock upstream's SSE handler that sends `first`, then waits until the test sends on the
/// returned channel (one `()` per request) before it sends `second` and ends the stream: for
/// tests of what the client has while the upstream is still mid-stream.
pub fn gated_sse(first: &'static str, second: &'static str) -> (Handler, mpsc::Sender<()>) {
    let (go_tx, go_rx) = mpsc::channel::<()>(1);
    let go_rx = Arc::new(tokio::sync::Mutex::new(go_rx));
    let handler: Handler = Arc::new(move |_r: &Recorded| {
        let (tx, body) = channel_body();
        let go_rx = go_rx.clone();
        tokio::spawn(async move {
            tx.send(Ok(Bytes::from_static(first.as_bytes())))
                .await
                .unwrap();
            go_rx.lock().await.recv().await;
            tx.send(Ok(Bytes::from_static(second.as_bytes())))
                .await
                .unwrap();
        });
        sse_response(body)
    });
    (handler, go_tx)
}

/// Start a mock upstream whose responses come from `handler`.
pub async fn start_mock(handler: Handler) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let reqs = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            let reqs = reqs.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let handler = handler.clone();
                    let reqs = reqs.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|c| c.to_bytes())
                            .unwrap_or_default();
                        let rec = Recorded {
                            method: parts.method.to_string(),
                            path_and_query: parts
                                .uri
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default(),
                            headers: parts.headers,
                            body,
                        };
                        reqs.lock().unwrap().push(rec.clone());
                        Ok::<_, Infallible>(handler(&rec))
                    }
                });
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // Like a provider's front end, the mock takes more header fields than
                // hyper's default of 100 (`tests/head_limits.rs`).
                builder.http1().max_headers(2000).max_buf_size(4 << 20);
                let _ = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Mock { addr, requests }
}

pub struct Proxy {
    pub addr: SocketAddr,
    /// The proxy's state store (fault tests inject faults into its writer).
    pub store: cachekeeper::state::Store,
    pub shutdown: Option<oneshot::Sender<()>>,
    pub done: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
    /// Signal shutdown and wait for the server to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

/// A config with `anthropic` and `openai` routes pointing at `upstream`, plus `extra` TOML.
pub fn config_for(upstream: &str, extra: &str) -> String {
    // Each proxy gets its own state file unless the test names one.
    let state = if extra.contains("[state]") {
        String::new()
    } else {
        let dir = tempfile::tempdir().unwrap().keep();
        format!(
            "[state]\npath = {:?}\n",
            dir.join("state.db").display().to_string()
        )
    };
    format!(
        r#"
{extra}
{state}

[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "{upstream}"

[[routes]]
name = "openai"
prefix = "/openai"
upstream = "{upstream}"

[[routes]]
name = "gemini"
prefix = "/gemini"
upstream = "{upstream}"
"#
    )
}

/// Start the proxy in-process from TOML text, on an ephemeral port.
pub async fn start_proxy(toml_text: &str) -> Proxy {
    let (config, warnings) = cachekeeper::config::Config::from_toml(toml_text).unwrap();
    let loaded = cachekeeper::config::Loaded {
        config,
        base_dir: std::env::temp_dir(),
        warnings,
    };
    let server = cachekeeper::proxy::Server::bind(&loaded, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let store = server.store();
    let (tx, rx) = oneshot::channel::<()>();
    let done = tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    Proxy {
        addr,
        store,
        shutdown: Some(tx),
        done: Some(done),
    }
}

pub type TestClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// POST `body` to `url` with extra headers; returns status, headers and the whole body.
pub async fn send(
    client: &TestClient,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (u16, HeaderMap, Bytes) {
    let mut b = Request::builder()
        .method("POST")
        .uri(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = client
        .request(b.body(Full::new(body.into())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

/// A log sink for a test binary's global subscriber: every line any thread writes, in order
/// (`tests/logs.rs`, `tests/metrics.rs` read the request lines back).
#[derive(Clone, Default)]
pub struct Buf(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every log line of this test binary, all tests and levels: one global JSON subscriber at
/// TRACE (fields flattened), installed on the first call (the store's writer thread logs
/// outside any test's scope). Call it before starting a proxy.
pub fn logs() -> &'static Buf {
    static BUF: std::sync::OnceLock<Buf> = std::sync::OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Buf::default();
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(buf.clone())
            .init();
        buf
    })
}

/// What [`logs`] holds so far, as text.
pub fn log_text() -> String {
    String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned()
}

/// Send `head` (request line and headers, without the blank line) and `body` raw over TCP
/// with `content-length` and `connection: close`; the status code and the whole response
/// text. The server may answer and close before it has read everything: write and read errors
/// are ignored, the answer is what counts.
pub async fn raw(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(req.as_bytes()).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}

/// A free loopback port (bound, then released, for a child process to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The real binary serving `config` (`cachekeeper serve --listen 127.0.0.1:PORT --config
/// FILE`, a free port), its stderr in `log`.
pub struct Served {
    pub child: std::process::Child,
    pub port: u16,
    pub log: std::path::PathBuf,
}

impl Served {
    pub fn start(config: &std::path::Path, log: &std::path::Path) -> Self {
        let mut served = Self::spawn(config, std::fs::File::create(log).unwrap().into(), &[]);
        served.log = log.to_owned();
        served
    }

    /// [`Served::start`] with stderr to `stderr` and `env` set (no log file: `log` is empty).
    pub fn spawn(
        config: &std::path::Path,
        stderr: std::process::Stdio,
        env: &[(&str, &str)],
    ) -> Self {
        let port = free_port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--config",
            ])
            .arg(config)
            .envs(env.iter().copied())
            .stderr(stderr)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            port,
            log: std::path::PathBuf::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Wait until `/healthz` answers (at most 20 s); false if it never does.
    pub async fn ready(&self) -> bool {
        let c = client();
        for _ in 0..400 {
            let req = Request::get(self.url("/healthz"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            if let Ok(Ok(resp)) =
                tokio::time::timeout(std::time::Duration::from_secs(1), c.request(req)).await
            {
                if resp.status() == 200 {
                    return true;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    }

    /// Send `signal` (`HUP`, `TERM`, ...) with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal}");
    }

    /// Wait for the process to exit, at most `limit`; `None` if it is still running then.
    pub async fn exit_within(
        &mut self,
        limit: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// What the process wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The Messages reply of [`state_turn`]'s mock.
pub const TURN_REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":3}}"#;

/// The API key of [`state_turn`] (its hash scopes the records; no log line may hold it).
pub const TURN_KEY: &str = "sk-ant-TURNKEY-1";

/// The user text of every [`state_turn`] (no log line may hold it).
pub const TURN_TEXT: &str = "private words of the user";

/// One generation turn of `session` through `proxy` (each writes the session's record and a
/// usage record), answered with [`TURN_REPLY`] by the mock: its status, the reply checked
/// whole.
pub async fn state_turn(proxy: &Proxy, session: &str, i: usize) -> u16 {
    let body = format!(
        r#"{{"model":"claude-x","max_tokens":8,"messages":[{{"role":"user","content":"{TURN_TEXT} {i}"}}]}}"#
    );
    let (status, _, resp) = send(
        &client(),
        &proxy.url("/anthropic/v1/messages"),
        &[("x-api-key", TURN_KEY), ("x-cachekeeper-session", session)],
        body,
    )
    .await;
    assert_eq!(&resp[..], TURN_REPLY.as_bytes(), "served whole");
    status
}

/// The value of one series in a `/metrics` scrape of `proxy` (`series` up to the value).
pub async fn metric(proxy: &Proxy, series: &str) -> Option<f64> {
    let resp = client()
        .request(
            http::Request::get(proxy.url("/metrics"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(text.to_vec()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// A fake PNG (signature + IHDR) of the given size, base64: enough for the header probe.
pub fn fake_png_b64(w: u32, h: u32, pad: usize) -> String {
    use base64::Engine as _;
    let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
    b.extend_from_slice(b"IHDR");
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    b.resize(b.len() + pad, 7);
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// An Anthropic body with `n` tool-result screenshots of `w`×`h`.
pub fn anthropic_screenshots(n: usize, w: u32, h: u32) -> String {
    let mut messages = vec![serde_json::json!({"role":"user","content":"go"})];
    for i in 0..n {
        messages.push(serde_json::json!({"role":"assistant","content":[
            {"type":"tool_use","id":format!("toolu_{i}"),"name":"screenshot","input":{}}]}));
        messages.push(serde_json::json!({"role":"user","content":[
            {"type":"tool_result","tool_use_id":format!("toolu_{i}"),"content":[
                {"type":"text","text":format!("frame {i}")},
                {"type":"image","source":{"type":"base64","media_type":"image/png","data":fake_png_b64(w, h, 64 + i)}}]}]}));
    }
    serde_json::json!({"model":"claude-sonnet-4-5","max_tokens":10,"messages":messages}).to_string()
}
