//! Anthropic's "Invalid `signature` in `thinking` block" 400 (read by
//! [`crate::dialect::format::WireFormat::rejected_signature`]): list the signed blocks of the
//! request it rejected (`docs/reasoning.md#rejected-signatures`).
//!
//! Anthropic checks every echoed `thinking` block's `signature` (and, on the newest models,
//! that the block is bound to the same conversation prefix); a signature that fails once fails
//! on every resend (any byte difference, another account or model, another conversation).
//! The proxy then remembers every signed block of the rejected request as rejected for the
//! credential scope ([`crate::state::rejected`]), the shaping pass strips them, and the
//! request is sent once more.

use crate::dialect::{self, Dialect};
use crate::state::rejected::SignatureId;

/// Every signed block of the assistant messages of `sent` (an Anthropic Messages body, as it
/// went upstream): `thinking` blocks with a non-empty `signature`, `redacted_thinking` blocks,
/// with their type. Empty when the body is not one.
pub fn signed_blocks(sent: &[u8]) -> Vec<(SignatureId, &'static str)> {
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
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    #[test]
    fn lists_the_signed_blocks() {
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
