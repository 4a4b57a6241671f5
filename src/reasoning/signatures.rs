//! Anthropic's "Invalid `signature` in `thinking` block" 400: read it, and list the signed
//! blocks of the request it rejected (`docs/reasoning.md#rejected-signatures`).
//!
//! Anthropic checks every echoed `thinking` block's `signature` (and, on the newest models,
//! that the block is bound to the same conversation prefix); a signature that fails once fails
//! on every resend (any byte difference, another account or model, another conversation).
//! The proxy then remembers every signed block of the rejected request as rejected for the
//! credential scope ([`crate::state::rejected`]), the shaping pass strips them, and the
//! request is sent once more.

use serde::Deserialize;

use crate::dialect::{self, Dialect};
use crate::state::rejected::SignatureId;

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

/// Every signed block of the assistant messages of `sent` (an Anthropic Messages body, as it
/// went upstream): `thinking` blocks with a non-empty `signature`, `redacted_thinking` blocks,
/// with their type. Empty when the body is not one.
pub(crate) fn signed_blocks(sent: &[u8]) -> Vec<(SignatureId, &'static str)> {
    let Ok(doc) = dialect::parse(sent, Dialect::Anthropic) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for turn in doc
        .turns
        .iter()
        .filter(|t| t.role.as_deref() == Some("assistant"))
    {
        let Some(content) = &turn.content else {
            continue;
        };
        for block in &content.blocks {
            let (Some(obj), Some(kind)) = (&block.obj, block.kind.as_deref()) else {
                continue;
            };
            let kind: &'static str = match kind {
                "thinking" => "thinking",
                "redacted_thinking" => "redacted_thinking",
                _ => continue,
            };
            if let Some(id) = super::shape::signature_id(doc.text, obj, Some(kind)) {
                out.push((id, kind));
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_rejection_and_the_signed_blocks() {
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"}}"#;
        assert!(invalid_signature(400, body).is_some());
        assert!(invalid_signature(401, body).is_none());
        let other = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`"}}"#;
        assert!(invalid_signature(400, other).is_none());
        assert!(invalid_signature(400, b"Invalid `signature` in `thinking` block").is_none());

        let sent = br#"{"model":"claude-opus-4-5","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"EqQB"},{"type":"thinking","thinking":"u","signature":""},{"type":"redacted_thinking","data":"Em"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"thinking","thinking":"x","signature":"user-side"}]}]}"#;
        let blocks = signed_blocks(sent);
        assert_eq!(
            blocks,
            vec![
                (SignatureId::of("thinking", "EqQB"), "thinking"),
                (
                    SignatureId::of("redacted_thinking", "Em"),
                    "redacted_thinking"
                ),
            ]
        );
        assert!(signed_blocks(b"{").is_empty());
    }
}
