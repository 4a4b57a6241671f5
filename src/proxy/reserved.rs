//! The client token and the listener's reserved paths ([`crate::reserved`]), before any
//! route is matched.
//!
//! With `[server] client_token` set, a request presents the token as
//! - the `x-cachekeeper-token` header (every path);
//! - `Authorization: Bearer <token>` (`/metrics` and the dashboard only: on proxied routes
//!   `Authorization` is the provider's credential and goes upstream untouched);
//! - a leading `/t/<token>` path segment (every path), stripped from the request before
//!   anything else reads its path, so it is never forwarded and never logged. A wrong
//!   segment token is refused like a wrong header.
//!
//! `/healthz` never needs the token. Tokens are compared by digest
//! ([`constant_time_eq`]).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;

use crate::digest::constant_time_eq;
use crate::proxy::errors::ProxyError;
use crate::proxy::{overhead_value, AppState, OVERHEAD_HEADER, TOKEN_HEADER};
use crate::reserved::{self, Reserved};
use crate::wire::ResponseBody;

/// How the request presented the client token (all `true` when none is configured).
#[derive(Debug, Clone, Copy)]
pub(super) struct Admission {
    /// The `/t/<token>` segment's verdict, when the path had one.
    segment: Option<bool>,
    /// `x-cachekeeper-token` matches.
    header: bool,
    /// `Authorization: Bearer` matches.
    bearer: bool,
}

impl Admission {
    /// May the request go to a proxied route (segment or header; never `Authorization`)?
    pub(super) fn proxied(self) -> bool {
        self.segment.unwrap_or(self.header)
    }

    /// May the request see `/metrics` or the dashboard (segment, header or bearer)?
    fn own(self) -> bool {
        self.segment.unwrap_or(self.header || self.bearer)
    }
}

/// Check the client token, stripping a `/t/<token>` segment from the request's URI (kept
/// as it is when no token is configured: `/t/…` is then an ordinary path).
pub(super) fn admit(state: &AppState, req: &mut Request<Incoming>) -> Admission {
    let Some(expected) = state.server.client_token.as_deref() else {
        return Admission {
            segment: None,
            header: true,
            bearer: true,
        };
    };
    let expected = expected.as_bytes();
    let headers = req.headers();
    let header = headers
        .get(TOKEN_HEADER)
        .is_some_and(|v| constant_time_eq(v.as_bytes(), expected));
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))
        .is_some_and(|t| constant_time_eq(t, expected));
    let segment = match reserved::split_token_segment(req.uri().path()) {
        None => None,
        Some((token, mut rest)) => {
            let ok = constant_time_eq(token.as_bytes(), expected);
            // A base URL that already holds the segment, given the segment again
            // (`/t/<token>/t/<token>/…`): every repeat goes, so no copy of the token is
            // left in the path that is logged and forwarded.
            if ok {
                while let Some((again, r)) = reserved::split_token_segment(rest) {
                    if !constant_time_eq(again.as_bytes(), expected) {
                        break;
                    }
                    rest = r;
                }
            }
            let stripped = strip_to(req.uri(), rest);
            let stripped_ok = stripped.is_some();
            if let Some(uri) = stripped {
                *req.uri_mut() = uri;
            }
            Some(ok && stripped_ok)
        }
    };
    Admission {
        segment,
        header,
        bearer,
    }
}

/// `uri` with its path replaced by `path` (the query kept).
fn strip_to(uri: &Uri, path: &str) -> Option<Uri> {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
}

/// Answer a reserved path. Not a proxied request: no request log line, no request metrics.
pub(super) async fn serve(
    state: &Arc<AppState>,
    which: Reserved<'_>,
    req: &Request<Incoming>,
    admission: Admission,
    started: Instant,
) -> Response<ResponseBody> {
    let mut resp = answer(state, which, req, admission).await;
    if let Ok(v) = HeaderValue::from_str(&overhead_value(started.elapsed())) {
        resp.headers_mut().insert(OVERHEAD_HEADER, v);
    }
    resp
}

async fn answer(
    state: &Arc<AppState>,
    which: Reserved<'_>,
    req: &Request<Incoming>,
    admission: Admission,
) -> Response<ResponseBody> {
    // The token is checked before the method: without it a reserved path answers 401 to
    // every method (a POST to /metrics without the token was a 405).
    if which != Reserved::Healthz && !admission.own() {
        tracing::warn!(
            target: "cachekeeper::server",
            path = %req.uri().path(),
            "reserved path refused: missing or wrong client token"
        );
        let mut r = ProxyError::BadClientToken
            .response::<Bytes>(crate::route::error_dialect(None, req.uri().path()))
            .map(super::phases::full_body);
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "cachekeeper: GET or HEAD only\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match which {
        Reserved::Healthz => text(StatusCode::OK, "ok\n"),
        Reserved::Metrics => {
            let mut r = Response::new(super::phases::full_body(Bytes::from(
                state.metrics.encode(),
            )));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            r
        }
        // Without its slash, the page's relative URLs would resolve beside it: send the
        // browser to the slashed form (relative, so a `/t/<token>/` prefix is kept).
        Reserved::Dashboard("") => {
            let mut r = text(StatusCode::PERMANENT_REDIRECT, "\n");
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("_cachekeeper/"));
            r
        }
        Reserved::Dashboard(path) => dashboard(state, path, req.uri().query()).await,
    }
}

/// Hand a dashboard request to [`crate::dashboard::serve`], which reads the store through
/// its writer thread: on a blocking thread.
async fn dashboard(
    state: &Arc<AppState>,
    path: &str,
    query: Option<&str>,
) -> Response<ResponseBody> {
    let state = Arc::clone(state);
    let path = path.to_owned();
    let query = query.map(str::to_owned);
    let served = tokio::task::spawn_blocking(move || {
        crate::dashboard::serve(&state.store, &state.pricing, &path, query.as_deref())
    })
    .await;
    match served {
        Ok(r) => r.map(super::phases::full_body),
        Err(e) => {
            tracing::warn!(target: "cachekeeper::server", error = %e, "the dashboard failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cachekeeper: the dashboard failed\n",
            )
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<ResponseBody> {
    let mut r = Response::new(super::phases::full_body(Bytes::from_static(
        body.as_bytes(),
    )));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bear"), None);
    }

    #[test]
    fn stripping_keeps_the_query() {
        let uri: Uri = "/t/tok/anthropic/v1/messages?beta=true"
            .parse()
            .unwrap_or_default();
        let (_, rest) = reserved::split_token_segment(uri.path()).unwrap_or(("", ""));
        let s = strip_to(&uri, rest).unwrap_or_default();
        assert_eq!(s.to_string(), "/anthropic/v1/messages?beta=true");
    }
}
