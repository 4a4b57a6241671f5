//! The proxy's own errors in Anthropic's shape (`docs/wire-formats.md#error-bodies`):
//! `{"type":"error","error":{"type":…,"message":…}}`, and as a stream's `event: error`.

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
