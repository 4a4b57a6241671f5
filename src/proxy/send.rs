//! Sending one request upstream, with the first-byte deadline, and mapping the client's
//! failures to [`ProxyError`]s.

use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;

use crate::proxy::errors::ProxyError;
use crate::proxy::AppState;
use crate::wire::upstream::{BoxError, UpstreamBody};

/// Send one request upstream. The response headers must arrive within
/// `first_byte_timeout_ms` of the request body having been sent: at once for a buffered body,
/// or from `upload_done` for a body streamed from the client.
///
/// Errors: connect failures and timeouts ([`ProxyError::UpstreamConnect`],
/// [`ProxyError::ConnectTimeout`]), no headers in time ([`ProxyError::FirstByteTimeout`]), a
/// connection broken before the response ([`ProxyError::UpstreamBroken`]), the shutdown
/// grace nearly over before the headers came ([`ProxyError::ShuttingDown`]: the upstream
/// request is dropped, which closes its connection).
pub(crate) async fn send(
    state: &AppState,
    uri: &Uri,
    method: Method,
    headers: HeaderMap,
    body: UpstreamBody,
    upload_done: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Result<Response<UpstreamBody>, ProxyError> {
    let mut up = Request::new(body);
    *up.method_mut() = method;
    *up.uri_mut() = uri.clone();
    *up.version_mut() = Version::HTTP_11;
    *up.headers_mut() = headers;
    let first_byte = Duration::from_millis(state.server.first_byte_timeout_ms);
    let deadline = async move {
        if let Some(done) = upload_done {
            // A dropped sender (the body failed) starts the timer too.
            let _ = done.await;
        }
        tokio::time::sleep(first_byte).await;
    };
    let outcome = tokio::select! {
        r = state.client.request(up) => Ok(r),
        () = deadline => Err(Stopped::FirstByte),
        () = state.cutoff.waiter() => Err(Stopped::Shutdown),
    };
    match outcome {
        Err(Stopped::FirstByte) => Err(ProxyError::FirstByteTimeout {
            upstream: upstream_label(uri),
            ms: state.server.first_byte_timeout_ms,
        }),
        Err(Stopped::Shutdown) => Err(ProxyError::ShuttingDown {
            upstream: upstream_label(uri),
        }),
        Ok(Err(e)) => Err(classify_client_error(
            &e,
            upstream_label(uri),
            state.server.connect_timeout_ms,
        )),
        Ok(Ok(resp)) => Ok(resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed_unsync())),
    }
}

/// Why [`send`] stopped waiting for the response headers.
enum Stopped {
    /// `first_byte_timeout_ms` passed.
    FirstByte,
    /// The shutdown grace is nearly over ([`crate::wire::stream::Cutoff`]).
    Shutdown,
}

/// `scheme://authority` of an upstream URI, for error messages.
pub(crate) fn upstream_label(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str())
    )
}

/// Map a client error to the proxy's error: a request that failed because the client's
/// streamed body stalled or broke is [`ProxyError::ClientBody`] (400).
pub(crate) fn classify_client_error(
    e: &hyper_util::client::legacy::Error,
    upstream: String,
    connect_timeout_ms: u64,
) -> ProxyError {
    if let Some(fault) = crate::wire::body::client_fault(e) {
        // The client's streamed body stalled or broke: the client's fault, not the upstream's.
        return ProxyError::ClientBody(fault.to_string());
    }
    let detail = error_chain(e);
    if e.is_connect() {
        if has_timed_out(e) {
            return ProxyError::ConnectTimeout {
                upstream,
                ms: connect_timeout_ms,
            };
        }
        return ProxyError::UpstreamConnect { upstream, detail };
    }
    ProxyError::UpstreamBroken { upstream, detail }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn has_timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        cur = c.source();
    }
    false
}
