//! The listener: accept connections, serve HTTP/1.1 and HTTP/2 (with upgrades) through one
//! handler, and shut down gracefully. Knows nothing of what the handler does.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::stream::Cutoff;
use crate::{limits, ResponseBody};

/// How long a client may take to send its request headers (slow-header clients), ms.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long before the shutdown grace is over the responses still open are ended
/// ([`Cutoff`]), at most: the time an event stream has to reach its next event boundary and be
/// written, so that everything is done when the grace is. A quarter of the grace when that is
/// shorter. Our own figure: providers send an event at least every few hundred ms while they
/// stream.
pub const CUT_LEAD: Duration = Duration::from_secs(1);

/// Serve `listener` with `handler` until `shutdown` completes, then stop accepting (new
/// connections are refused) and let in-flight requests (streams included) finish for up to
/// `grace`. Responses still open [`CUT_LEAD`] before the grace is over are ended through
/// `cutoff` (an event stream after its last complete event); connections still open when it
/// is over are closed.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    cutoff: Cutoff,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_headers(limits::PARSER_MAX_HEADER_FIELDS)
        .max_buf_size(limits::PARSER_MAX_HEAD_BYTES);
    builder
        .http2()
        .max_header_list_size(u32::try_from(limits::PARSER_MAX_HEAD_BYTES).unwrap_or(u32::MAX));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(target: "cachekeeper::server", error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let svc = service_fn(handler);
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                let conn = graceful.watch(conn.into_owned());
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(target: "cachekeeper::server", error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tracing::info!(target: "cachekeeper::server", grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX), "shutting down; waiting for in-flight requests");
    let lead = CUT_LEAD.min(grace / 4);
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    if tokio::time::timeout(grace.saturating_sub(lead), &mut drained)
        .await
        .is_err()
    {
        tracing::info!(target: "cachekeeper::server", "shutdown grace nearly over; ending the responses still open");
        cutoff.cut();
        if tokio::time::timeout(lead, &mut drained).await.is_err() {
            tracing::warn!(target: "cachekeeper::server", "grace period over; closing remaining connections");
        }
    }
}
