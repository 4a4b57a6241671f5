//! The proxy's own failures and their responses in each dialect's error shape.
//!
//! Which error, its status and message are decided here; the body's shape is the wire
//! format's ([`crate::dialect::format::WireFormat::error_body`] and
//! [`crate::dialect::format::WireFormat::stream_error_event`], each format's `errors` module;
//! `docs/dev/architecture.md#errors-the-proxy-produces`, `docs/wire-formats.md#error-bodies`):
//! - Anthropic: `{"type":"error","error":{"type":…,"message":…}}`
//! - OpenAI (also when the dialect is unknown): `{"error":{"message":…,"type":…,"param":null,"code":…}}`
//! - Gemini: `{"error":{"code":…,"message":…,"status":…}}`
//!
//! Every message starts with `cachekeeper:` so a user can tell the proxy's errors from the
//! provider's.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use crate::dialect::Dialect;
use crate::wire::stream::Break;

/// Where an error came from (pingora's error source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorSource {
    /// The client's request (no route, missing token).
    Downstream,
    /// The upstream (refused, timed out, reset).
    Upstream,
    /// The proxy itself (shutting down).
    Internal,
}

impl ErrorSource {
    /// The name in logs (`downstream`, `upstream`, `internal`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorSource::Downstream => "downstream",
            ErrorSource::Upstream => "upstream",
            ErrorSource::Internal => "internal",
        }
    }
}

/// A failure the proxy answers itself.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// No route prefix matches the request path. 404.
    #[error("cachekeeper: no route for path {path}; configured prefixes: {}", prefixes.join(", "))]
    NoRoute { path: String, prefixes: Vec<String> },
    /// `[server] client_token` is set and the request lacks the right token (header
    /// `x-cachekeeper-token`, a `/t/<token>/` path segment, or for `/metrics` and the
    /// dashboard `Authorization: Bearer`). 401.
    #[error("cachekeeper: missing or wrong client token (x-cachekeeper-token header or /t/<token>/ path segment; /metrics and the dashboard also take Authorization: Bearer <token>)")]
    BadClientToken,
    /// Could not connect to the upstream (refused, DNS, TLS). 502.
    #[error("cachekeeper: cannot reach upstream {upstream}: {detail}")]
    UpstreamConnect { upstream: String, detail: String },
    /// The connect attempt took longer than `connect_timeout_ms`. 504.
    #[error("cachekeeper: connecting to upstream {upstream} timed out after {ms} ms")]
    ConnectTimeout { upstream: String, ms: u64 },
    /// No response headers within `first_byte_timeout_ms`. 504.
    #[error("cachekeeper: upstream {upstream} sent no response within {ms} ms")]
    FirstByteTimeout { upstream: String, ms: u64 },
    /// The upstream closed or broke the connection before sending a response. 502.
    #[error("cachekeeper: upstream {upstream} failed before responding: {detail}")]
    UpstreamBroken { upstream: String, detail: String },
    /// `CONNECT`: this is a reverse proxy, not a forward proxy. 405.
    #[error("cachekeeper: method {0} is not supported by a reverse proxy; point the client's base URL at cachekeeper instead")]
    MethodNotAllowed(String),
    /// The path after the route's prefix climbs out of the route's upstream base path with
    /// dot segments ([`crate::route::climbs_out`]). 400.
    #[error("cachekeeper: the request path climbs out of the route's upstream base path with dot segments (.., or encoded: %2e%2e, ..%2f); refused")]
    DotSegment,
    /// Reading the client's request body failed (the client went away). 400.
    #[error("cachekeeper: could not read the request body: {0}")]
    ClientBody(String),
    /// The request's headers exceed the proxy's limits ([`crate::wire::limits`]). 431.
    #[error(
        "cachekeeper: the request headers are too large: {fields} fields, {bytes} bytes; the limits are {} fields and {} bytes",
        crate::wire::limits::MAX_HEADER_FIELDS,
        crate::wire::limits::MAX_HEADER_BYTES
    )]
    HeadersTooLarge { fields: usize, bytes: usize },
    /// The shutdown grace was nearly over ([`crate::wire::listener::CUT_LEAD`] before its
    /// end) while the request still waited for the upstream's response headers. 503,
    /// retryable (the official SDKs retry a 503), so the client is answered before the
    /// connection closes instead of seeing it drop.
    #[error("cachekeeper: the proxy is shutting down; no response from upstream {upstream} before the shutdown grace ended; retry")]
    ShuttingDown { upstream: String },
    /// The route's provider needs a credential ([`crate::provider::UpstreamAuth::Required`])
    /// and the request carries none. 401.
    #[error("cachekeeper: route {route} forwards to {provider}, which needs a credential, and this request carries none (no Authorization: Bearer token, x-goog-api-key or key parameter); an agent told to skip its own auth (Claude Code with CLAUDE_CODE_SKIP_VERTEX_AUTH=1) sends none. Send the token from the client (for Vertex AI: gcloud auth print-access-token), or give the route a token source of its own ([routes.google] service_account)")]
    NoCredential {
        route: String,
        provider: &'static str,
    },
    /// The route has a token source of its own (`[routes.google]`) and the request carries
    /// no credential, but no token has been fetched (yet, or the key is unusable): `reason`
    /// says why. 503, retryable (a fetch is retried every 30 s).
    #[error("cachekeeper: route {route} adds its own Google access token to requests without a credential, and it has none: {reason}")]
    NoToken { route: String, reason: String },
    /// The request was to be signed with the proxy's AWS credentials (SigV4) and signing
    /// failed (`reason`, [`crate::sigv4::SignError`]): sent unsigned or with the client's
    /// stale signature it would only earn AWS's 403, which says nothing of why. 502.
    #[error("cachekeeper: route {route} signs requests with the proxy's AWS credentials, and signing this one failed: {reason}")]
    CannotSign { route: String, reason: String },
}

impl ProxyError {
    /// HTTP status of the error response.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ProxyError::BadClientToken | ProxyError::NoCredential { .. } => {
                StatusCode::UNAUTHORIZED
            }
            ProxyError::UpstreamConnect { .. }
            | ProxyError::UpstreamBroken { .. }
            | ProxyError::CannotSign { .. } => StatusCode::BAD_GATEWAY,
            ProxyError::ConnectTimeout { .. } | ProxyError::FirstByteTimeout { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::ClientBody(_) | ProxyError::DotSegment => StatusCode::BAD_REQUEST,
            ProxyError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::ShuttingDown { .. } | ProxyError::NoToken { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// Where the error came from.
    pub(crate) fn source_kind(&self) -> ErrorSource {
        match self {
            ProxyError::NoRoute { .. }
            | ProxyError::BadClientToken
            | ProxyError::NoCredential { .. }
            | ProxyError::ClientBody(_)
            | ProxyError::DotSegment
            | ProxyError::HeadersTooLarge { .. }
            | ProxyError::MethodNotAllowed(_) => ErrorSource::Downstream,
            ProxyError::ShuttingDown { .. }
            | ProxyError::NoToken { .. }
            | ProxyError::CannotSign { .. } => ErrorSource::Internal,
            _ => ErrorSource::Upstream,
        }
    }

    /// Whether the client may usefully retry the same request.
    pub(crate) fn retryable(&self) -> bool {
        matches!(
            self,
            ProxyError::UpstreamConnect { .. }
                | ProxyError::ConnectTimeout { .. }
                | ProxyError::FirstByteTimeout { .. }
                | ProxyError::UpstreamBroken { .. }
                | ProxyError::ShuttingDown { .. }
                | ProxyError::NoToken { .. }
        )
    }

    /// A short, low-cardinality label for logs.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            ProxyError::NoRoute { .. } => "no_route",
            ProxyError::BadClientToken => "bad_client_token",
            ProxyError::UpstreamConnect { .. } => "upstream_connect",
            ProxyError::ConnectTimeout { .. } => "connect_timeout",
            ProxyError::FirstByteTimeout { .. } => "first_byte_timeout",
            ProxyError::UpstreamBroken { .. } => "upstream_broken",
            ProxyError::ClientBody(_) => "client_body",
            ProxyError::DotSegment => "dot_segment",
            ProxyError::MethodNotAllowed(_) => "method_not_allowed",
            ProxyError::HeadersTooLarge { .. } => "headers_too_large",
            ProxyError::ShuttingDown { .. } => "shutdown",
            ProxyError::NoCredential { .. } => "no_credential",
            ProxyError::NoToken { .. } => "no_token",
            ProxyError::CannotSign { .. } => "cannot_sign",
        }
    }

    /// The error body in the dialect's shape ([`crate::dialect::format::WireFormat::error_body`];
    /// OpenAI's when `dialect` is `None`).
    pub(crate) fn body(&self, dialect: Option<Dialect>) -> Bytes {
        let format = dialect.unwrap_or(Dialect::Openai).format();
        Bytes::from(format.error_body(self.status().as_u16(), &self.to_string(), self.label()))
    }

    /// The full error response: the body ([`Self::body`]), and the header naming the error's
    /// kind where the dialect carries one
    /// ([`crate::dialect::format::WireFormat::error_kind_header`]: Bedrock's `x-amzn-ErrorType`).
    pub(crate) fn response<B: From<Bytes>>(&self, dialect: Option<Dialect>) -> Response<B> {
        let mut resp = Response::new(B::from(self.body(dialect)));
        *resp.status_mut() = self.status();
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let format = dialect.unwrap_or(Dialect::Openai).format();
        if let Some((name, value)) = format.error_kind_header(self.status().as_u16()) {
            resp.headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        resp
    }
}

/// The event that ends a stream the upstream broke mid-way, in the dialect's SSE shape:
/// Anthropic `event: error` with `api_error`, OpenAI Chat a `data: {"error":…}` event, OpenAI
/// Responses an `event: error` with `type: "error"` and the `sequence_number` after
/// `last_sequence` (the last one the stream carried; 0 when none). Gemini has no error event
/// (`None`): its streams are aborted so the client sees the break. A stream the proxy ends
/// at shutdown ([`Break::Shutdown`]) says so, with the code `shutdown` (else
/// `upstream_broken`).
pub(crate) fn midstream_error_event(
    dialect: Option<Dialect>,
    why: Break,
    detail: &str,
    last_sequence: Option<u64>,
) -> Option<Bytes> {
    let (message, code) = match why {
        Break::Shutdown => (
            "cachekeeper: the proxy is shutting down; the stream was ended after its last complete event".to_owned(),
            "shutdown",
        ),
        Break::UpstreamBroken | Break::IdleTimeout => (
            format!("cachekeeper: upstream stream broke mid-way: {detail}"),
            "upstream_broken",
        ),
    };
    dialect
        .unwrap_or(Dialect::Openai)
        .format()
        .stream_error_event(&message, code, last_sequence)
        .map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_per_dialect() {
        let e = ProxyError::NoRoute {
            path: "/x".into(),
            prefixes: vec!["/anthropic".into(), "/openai".into()],
        };
        let a: serde_json::Value =
            serde_json::from_slice(&e.body(Some(Dialect::Anthropic))).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "not_found_error");
        let msg = a["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with("cachekeeper:"));
        assert!(msg.contains("/anthropic, /openai"));
        let o: serde_json::Value = serde_json::from_slice(&e.body(None)).unwrap();
        assert_eq!(o["error"]["code"], "no_route");
        assert!(o["error"]["param"].is_null() && o["error"].get("param").is_some());
        let g: serde_json::Value = serde_json::from_slice(&e.body(Some(Dialect::Gemini))).unwrap();
        assert_eq!(g["error"]["code"], 404);
        assert_eq!(g["error"]["status"], "NOT_FOUND");
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn bedrock_errors_name_their_kind_in_a_header() {
        let e = ProxyError::ShuttingDown {
            upstream: "bedrock-runtime.us-east-1.amazonaws.com".into(),
        };
        let resp = e.response::<Bytes>(Some(Dialect::Converse));
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            resp.headers()["x-amzn-errortype"],
            "ServiceUnavailableException"
        );
        let body: serde_json::Value = serde_json::from_slice(resp.body()).unwrap();
        assert!(body["message"]
            .as_str()
            .unwrap()
            .starts_with("cachekeeper:"));
        for dialect in [None, Some(Dialect::Anthropic), Some(Dialect::Gemini)] {
            let resp = e.response::<Bytes>(dialect);
            assert!(
                resp.headers().get("x-amzn-errortype").is_none(),
                "{dialect:?}"
            );
        }
    }

    #[test]
    fn midstream_events() {
        let a = midstream_error_event(
            Some(Dialect::Anthropic),
            Break::UpstreamBroken,
            "reset",
            None,
        )
        .unwrap();
        let s = std::str::from_utf8(&a).unwrap();
        assert!(s.starts_with("event: error\ndata: {"));
        assert!(s.contains("\"api_error\""));
        assert!(s.ends_with("\n\n"));
        let o = midstream_error_event(Some(Dialect::Openai), Break::UpstreamBroken, "reset", None)
            .unwrap();
        assert!(std::str::from_utf8(&o)
            .unwrap()
            .starts_with("data: {\"error\""));
        assert!(
            midstream_error_event(Some(Dialect::Gemini), Break::UpstreamBroken, "reset", None)
                .is_none()
        );
        let r = midstream_error_event(
            Some(Dialect::OpenaiResponses),
            Break::UpstreamBroken,
            "reset",
            Some(41),
        )
        .unwrap();
        let r = std::str::from_utf8(&r).unwrap();
        assert!(r.starts_with("event: error\ndata: {"), "{r}");
        let v: serde_json::Value =
            serde_json::from_str(r.trim_start_matches("event: error\ndata: ").trim()).unwrap();
        assert_eq!(v["type"], "error");
        // The failing input: the event had no sequence_number, which every Responses stream
        // event carries; it now continues the stream's numbering.
        assert_eq!(v["sequence_number"], 42);
        let r = midstream_error_event(
            Some(Dialect::OpenaiResponses),
            Break::UpstreamBroken,
            "reset",
            None,
        )
        .unwrap();
        assert!(std::str::from_utf8(&r)
            .unwrap()
            .contains("\"sequence_number\":0"));
        // Ended by the proxy at shutdown: says so, code `shutdown`.
        let o = midstream_error_event(Some(Dialect::Openai), Break::Shutdown, "", None).unwrap();
        let o = std::str::from_utf8(&o).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(o.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(v["error"]["code"], "shutdown");
        assert!(v["error"]
            .get("param")
            .is_some_and(serde_json::Value::is_null));
        assert_eq!(
            v["error"]["message"],
            "cachekeeper: the proxy is shutting down; the stream was ended after its last complete event"
        );
    }
}
