//! The proxy's own errors in Gemini's shape (`docs/wire-formats.md#error-bodies`):
//! `{"error":{"code":…,"message":…,"status":…}}`. Gemini streams have no error event: a
//! stream the proxy cuts is aborted so the client sees the break.

/// The error body for an HTTP `status` the proxy answers with, as JSON text.
pub(crate) fn body(status: u16, message: &str) -> String {
    serde_json::json!({
        "error": {"code": status, "message": message, "status": status_name(status)},
    })
    .to_string()
}

/// The `error.status` (a `google.rpc.Code` name) for a status the proxy answers with.
fn status_name(status: u16) -> &'static str {
    match status {
        400 | 431 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        404 => "NOT_FOUND",
        405 => "UNIMPLEMENTED",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNAVAILABLE",
    }
}
