//! The measurement floor for `benches/load.sh` and `benches/instructions.py` (issue 12): the
//! smallest reasonable reverse proxy on the stack cachekeeper is built on (hyper 1,
//! hyper-util, tokio), doing nothing but forwarding. What it costs per request is what any
//! proxy on this stack costs before doing anything of its own; cachekeeper's figures are read
//! against it and against nginx's.
//!
//! - Server: hyper-util's `auto` builder with cachekeeper's settings
//!   (`crates/wire/src/listener.rs`: HTTP/1.1 keep-alive, hyper's timer, a 30 s header read timeout, 1000 header fields and a
//!   1 MiB head; HTTP/2 header list 1 MiB; upgrades; graceful shutdown on Ctrl-C), `TCP_NODELAY`
//!   on accepted sockets, a multi-threaded tokio runtime with the default worker count (one per
//!   CPU), as `cachekeeper serve` builds it (`src/main.rs`).
//! - Client: a pooled hyper-util legacy `Client` over a plain `HttpConnector` (`TCP_NODELAY`,
//!   keep-alive, 90 s idle timeout, as `crates/wire/src/upstream.rs` but without TLS or the proxy
//!   connector).
//! - Forwarding: the request's URI becomes `http://UPSTREAM_ADDR` + its path and query, `Host`
//!   becomes `UPSTREAM_ADDR`; nothing else is changed. Request and response bodies stream
//!   through (hyper's `Incoming` both ways, never buffered). An upstream error is a bare `502`.
//!   No logging.
//!
//! Build and run:
//!
//! ```text
//! cargo build --release --example floor_proxy
//! target/release/examples/floor_proxy 127.0.0.1:8788 127.0.0.1:8080
//! ```
//!
//! Measured side by side with nginx and cachekeeper by
//! `benches/load.sh -f target/release/examples/floor_proxy` (requests/s, latency) and
//! `python3 benches/instructions.py --floor target/release/examples/floor_proxy` (instructions
//! per request).
#![allow(
    clippy::disallowed_methods,
    reason = "the example's main blocks on the runtime it starts"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = Either<Incoming, Empty<Bytes>>;

/// Where requests go, and the pooled client that takes them there.
struct Upstream {
    client: Client<HttpConnector, Incoming>,
    authority: Authority,
    host: HeaderValue,
}

impl Upstream {
    /// Forward `req` as it came, but for its URI and `Host`, and answer the upstream's
    /// response as it comes.
    async fn forward(&self, mut req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let uri = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(path)
            .build();
        match uri {
            Ok(uri) => *req.uri_mut() = uri,
            Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
        }
        req.headers_mut().insert(HOST, self.host.clone());
        Ok(match self.client.request(req).await {
            Ok(resp) => resp.map(Either::Left),
            Err(_) => status(StatusCode::BAD_GATEWAY),
        })
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Either::Right(Empty::new()));
    *resp.status_mut() = code;
    resp
}

async fn serve(listen: SocketAddr, upstream: Arc<Upstream>) -> Result<(), BoxError> {
    let listener = TcpListener::bind(listen).await?;
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_headers(1000)
        .max_buf_size(1024 * 1024);
    builder.http2().max_header_list_size(1024 * 1024);
    let shutdown = tokio::signal::ctrl_c();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let upstream = Arc::clone(&upstream);
                let svc = service_fn(move |req| {
                    let upstream = Arc::clone(&upstream);
                    async move { upstream.forward(req).await }
                });
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                let conn = graceful.watch(conn.into_owned());
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream), None) = (args.next(), args.next(), args.next()) else {
        return Err(
            "usage: floor_proxy LISTEN_ADDR UPSTREAM_ADDR (e.g. 127.0.0.1:8788 127.0.0.1:8080)"
                .into(),
        );
    };
    let listen: SocketAddr = listen.parse()?;
    let authority: Authority = upstream.parse()?;
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(http);
    let upstream = Arc::new(Upstream {
        client,
        host: HeaderValue::from_str(authority.as_str())?,
        authority,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(serve(listen, upstream))
}
