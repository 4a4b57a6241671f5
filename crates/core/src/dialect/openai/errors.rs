//! The proxy's own errors in OpenAI's shape (`docs/wire-formats.md#error-bodies`; also the
//! shape when the dialect is unknown): `{"error":{"message":…,"type":…,"param":null,"code":…}}`
//! (OpenAI's error object always has the four members; `param` names no request parameter
//! here).

/// The error body for an HTTP `status` the proxy answers with, `code` its label, as JSON text.
/// OpenAI Chat and OpenAI Responses answer with the same body.
pub(crate) fn body(status: u16, message: &str, code: &str) -> String {
    serde_json::json!({
        "error": {"message": message, "type": error_type(status), "param": null, "code": code},
    })
    .to_string()
}

/// The `error.type` for a status the proxy answers with.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 404 | 405 | 431 => "invalid_request_error",
        401 => "authentication_error",
        _ => "server_error",
    }
}

/// The Chat stream's error event (a `data: {"error":…}` chunk, `server_error`) that ends a
/// stream the proxy cuts, as SSE text.
pub(crate) fn stream_error_event(message: &str, code: &str) -> String {
    let v = serde_json::json!({"error":{"message":message,"type":"server_error","param":null,"code":code}});
    format!("data: {v}\n\n")
}
