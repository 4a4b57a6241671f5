//! The proxy's own errors in Anthropic's shape (`docs/wire-formats.md#error-bodies`):
//! `{"type":"error","error":{"type":…,"message":…}}`, and as a stream's `event: error`;
//! and the provider's invalid-signature 400, read from that shape.

use serde::Deserialize;

/// The error body for an HTTP `status` the proxy answers with, as JSON text.
pub(crate) fn body(status: u16, message: &str) -> String {
    serde_json::json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
    })
    .to_string()
}

/// The `error.type` for a status the proxy answers with (Anthropic's error types: 400
/// `invalid_request_error`, 401 `authentication_error`, 404 `not_found_error`, 504
/// `timeout_error`, else `api_error`).
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        404 => "not_found_error",
        400 | 405 | 431 => "invalid_request_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// The `event: error` (type `api_error`) that ends a stream the proxy cuts, as SSE text.
pub(crate) fn stream_error_event(message: &str) -> String {
    let v = serde_json::json!({"type":"error","error":{"type":"api_error","message":message}});
    format!("event: error\ndata: {v}\n\n")
}

/// The wording of the rejection, as Anthropic writes it (HTTP 400 `invalid_request_error`):
/// ``messages.1.content.0: Invalid `signature` in `thinking` block`` (a prefix-bound block
/// adds "The block is bound to a different conversation. …"). Sources: Anthropic's extended
/// thinking documentation and anthropics/anthropic-sdk-python#1598; `docs/reasoning.md`.
pub(crate) const INVALID_SIGNATURE: &str = "Invalid `signature` in `thinking` block";

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: String,
}

/// The provider's message when `status` / `error_body` is the invalid-signature 400
/// (Anthropic's error shape `{"type":"error","error":{"type","message"}}`); `None` otherwise.
pub(crate) fn invalid_signature(status: u16, error_body: &[u8]) -> Option<String> {
    if status != 400 {
        return None;
    }
    let body: ErrorBody = serde_json::from_slice(error_body).ok()?;
    body.error
        .message
        .contains(INVALID_SIGNATURE)
        .then_some(body.error.message)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_invalid_signature_rejection() {
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"}}"#;
        assert!(invalid_signature(400, body).is_some());
        assert!(invalid_signature(401, body).is_none());
        let other = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`"}}"#;
        assert!(invalid_signature(400, other).is_none());
        assert!(invalid_signature(400, b"Invalid `signature` in `thinking` block").is_none());
    }
}
