//! The proxy's own errors in Bedrock's shape (`docs/wire-formats.md#error-bodies`):
//! `{"message":…}`, the body of every Bedrock runtime error, whose kind travels in the
//! `x-amzn-ErrorType` header (the AWS SDKs read the header, then the body's `message`).
//! Source: <https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html>.
//! Converse streams have no error event the proxy can write in their binary framing: a stream
//! the proxy cuts is aborted so the client sees the break.

/// The error body for an error the proxy answers itself, as JSON text.
pub(crate) fn body(message: &str) -> String {
    serde_json::json!({ "message": message }).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn the_body_is_bedrock_s_message_object() {
        let v: serde_json::Value =
            serde_json::from_str(&super::body("cachekeeper: x \"y\"")).unwrap();
        assert_eq!(v, serde_json::json!({"message": "cachekeeper: x \"y\""}));
    }
}
