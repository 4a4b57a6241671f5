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

/// The header that carries a Bedrock error's kind (the AWS REST-JSON protocol; botocore reads
/// it first, `botocore/parsers.py` `RestJSONParser`).
pub(crate) const ERROR_TYPE_HEADER: &str = "x-amzn-ErrorType";

/// The `x-amzn-ErrorType` of an error the proxy answers itself with HTTP `status`: the
/// exception Bedrock's runtime API gives that status (its operations' "Errors" lists,
/// <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>:
/// `ValidationException` 400, `AccessDeniedException` 403, `ResourceNotFoundException` 404,
/// `ModelTimeoutException` 408, `ThrottlingException` 429, `InternalServerException` 500,
/// `ServiceUnavailableException` 503), so an AWS SDK raises its modeled exception. A status
/// Bedrock does not list takes the nearest: another 4xx (401, 405, 413, 431)
/// `ValidationException` (401: `AccessDeniedException`), another 5xx (the proxy's 502 and 504
/// when the upstream is down or slow) `InternalServerException`, which the SDKs retry.
pub(crate) fn error_type(status: u16) -> &'static str {
    match status {
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        500..=599 => "InternalServerException",
        _ => "ValidationException",
    }
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

    #[test]
    fn every_status_the_proxy_answers_has_a_bedrock_exception() {
        let kinds: Vec<_> = [
            400, 401, 403, 404, 405, 408, 413, 429, 431, 500, 502, 503, 504,
        ]
        .into_iter()
        .map(super::error_type)
        .collect();
        assert_eq!(
            kinds,
            [
                "ValidationException",
                "AccessDeniedException",
                "AccessDeniedException",
                "ResourceNotFoundException",
                "ValidationException",
                "ModelTimeoutException",
                "ValidationException",
                "ThrottlingException",
                "ValidationException",
                "InternalServerException",
                "InternalServerException",
                "ServiceUnavailableException",
                "InternalServerException",
            ]
        );
    }
}
