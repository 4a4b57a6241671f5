//! Logs: JSON lines on stderr (tracing-subscriber), one line per request.
//!
//! Credentials never appear: headers are not logged, and the query string is logged only
//! with `key=` (Gemini's API key parameter) redacted.

use tracing_subscriber::EnvFilter;

/// Install the global JSON subscriber. `RUST_LOG` overrides the default level (`info`).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .try_init();
}

/// Query parameters whose value is a credential.
const SECRET_QUERY_PARAMS: &[&str] = &["key", "api_key", "api-key", "access_token"];

/// The query string with credential parameters' values replaced by `REDACTED`.
pub fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or("");
            if SECRET_QUERY_PARAMS
                .iter()
                .any(|s| name.eq_ignore_ascii_case(s))
            {
                format!("{name}=REDACTED")
            } else {
                pair.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// How a request ended, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The response body was delivered whole.
    Complete,
    /// The client went away before the response body ended; the upstream request was
    /// dropped (cancelled) with it.
    ClientDisconnected,
    /// The upstream broke the response body mid-way.
    UpstreamBroken,
    /// No response chunk arrived within `idle_timeout_ms`.
    IdleTimeout,
    /// The proxy answered with its own error.
    ProxyError,
    /// A WebSocket (or other) upgrade was tunnelled.
    Upgraded,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::ClientDisconnected => "client_disconnected",
            Outcome::UpstreamBroken => "upstream_broken",
            Outcome::IdleTimeout => "idle_timeout",
            Outcome::ProxyError => "proxy_error",
            Outcome::Upgraded => "upgraded",
        }
    }
}

/// Everything the per-request log line says. Filled in phase by phase.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    pub route: String,
    pub dialect: Option<&'static str>,
    pub model: Option<String>,
    pub method: String,
    pub path: String,
    /// Query with credentials redacted.
    pub query: Option<String>,
    pub status: u16,
    /// Request body bytes received from the client (as sent, before decoding).
    pub bytes_in: u64,
    /// Request body bytes sent upstream.
    pub bytes_out: u64,
    /// Response body bytes sent to the client.
    pub response_bytes: u64,
    pub images_seen: usize,
    /// Images whose media type or format was repaired (uploads included).
    pub images_repaired: usize,
    /// Agent images downscaled to the byte budget / pixel caps.
    pub images_downscaled: usize,
    /// Repeated agent images replaced by the repeat-cap text.
    pub images_repeat_capped: usize,
    /// Images replaced by a fixed text (unsupported format, model sees no images).
    pub images_replaced: usize,
    pub images_retired: usize,
    pub carriers_retired: usize,
    /// What happened to the body: `passthrough`, `unchanged`, `rewritten`, `dry_run`,
    /// `unparsed`, `too_large`, `pass_failed`.
    pub body: &'static str,
    /// Upstream time to first byte (response headers), ms.
    pub ttfb_ms: Option<u64>,
    pub error: Option<&'static str>,
    /// Reasoning shaping edits (carriers dropped / filled / padded, thinking stripped,
    /// parameters dropped, flags added).
    pub reasoning_edits: usize,
    /// Fields learned from an unknown-field 4xx, when the request was retried without them.
    pub retried_without: Option<String>,
}

impl RequestLog {
    /// Emit the request's one JSON line.
    pub fn emit(&self, outcome: Outcome, total_ms: u64) {
        tracing::info!(
            target: "cachekeeper::request",
            route = %self.route,
            dialect = self.dialect.unwrap_or("-"),
            model = self.model.as_deref().unwrap_or("-"),
            method = %self.method,
            path = %self.path,
            query = self.query.as_deref().unwrap_or(""),
            status = self.status,
            bytes_in = self.bytes_in,
            bytes_out = self.bytes_out,
            response_bytes = self.response_bytes,
            images_seen = self.images_seen,
            images_repaired = self.images_repaired,
            images_downscaled = self.images_downscaled,
            images_repeat_capped = self.images_repeat_capped,
            images_replaced = self.images_replaced,
            images_retired = self.images_retired,
            carriers_retired = self.carriers_retired,
            body = self.body,
            ttfb_ms = self.ttfb_ms,
            total_ms = total_ms,
            outcome = outcome.as_str(),
            error = self.error.unwrap_or(""),
            reasoning_edits = self.reasoning_edits,
            retried_without = self.retried_without.as_deref().unwrap_or(""),
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_key_is_redacted() {
        assert_eq!(
            redact_query("alt=sse&key=AIzaSECRET"),
            "alt=sse&key=REDACTED"
        );
        assert_eq!(redact_query("KEY=x"), "KEY=REDACTED");
        assert_eq!(redact_query("alt=sse"), "alt=sse");
        assert_eq!(redact_query("monkey=1"), "monkey=1");
    }
}
