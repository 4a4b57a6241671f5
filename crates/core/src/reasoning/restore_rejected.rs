//! A 4xx that blames what carrier restore added (`docs/reasoning.md#when-a-restore-is-rejected`).
//!
//! Restore must never be the reason a request fails. When a request the restore pass changed
//! gets a 4xx that names a carrier as unknown (read by [`super::detect`]: a model that takes no
//! `reasoning_content` in input, say) or one of the wordings below, the proxy sends it once
//! more with the client's own carriers only and remembers `model:no_restore` for the (host,
//! model), like a verdict. Wordings that say a carrier is *missing* are not on the list: a
//! restore that could not find a turn's carriers is not to blame for the turn lacking them.

/// Provider wordings (lower-cased substrings) that reject a restored carrier's value:
/// - OpenAI Responses, a `reasoning` item whose `encrypted_content` belongs to another id or
///   account: "Encrypted content item_id did not match the target item id"; "The encrypted
///   content for item rs_… could not be verified"; an item id that is not stored (`store:
///   false`): "Item with id 'rs_…' not found" (OpenAI community threads on reasoning items,
///   openai/openai-agents-python issues; `docs/reasoning.md`).
/// - Gemini, a signature it cannot read: "Corrupted thought signature." (Gemini API
///   thought-signature docs and google-gemini issues).
/// - Anthropic, thinking blocks of the latest assistant message changed: "`thinking` or
///   `redacted_thinking` blocks in the latest assistant message cannot be modified" (Anthropic
///   extended-thinking docs). An invalid signature is handled on its own
///   ([`super::signatures`]).
pub(crate) const RESTORE_REJECTED: &[&str] = &[
    "encrypted content item_id did not match",
    "encrypted content for item",
    "item with id 'rs_",
    "corrupted thought signature",
    "blocks in the latest assistant message cannot be modified",
];

/// True when `error_body` (a 4xx body, any shape) carries one of [`RESTORE_REJECTED`].
pub fn blames_restore(error_body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(error_body).to_lowercase();
    RESTORE_REJECTED.iter().any(|w| text.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wordings_that_reject_a_restored_value_not_a_missing_one() {
        assert!(blames_restore(
            br#"{"error":{"message":"Encrypted content item_id did not match the target item id.","type":"invalid_request_error"}}"#
        ));
        assert!(blames_restore(
            br#"{"error":{"code":400,"message":"Corrupted thought signature.","status":"INVALID_ARGUMENT"}}"#
        ));
        assert!(!blames_restore(
            br#"{"error":{"message":"Missing `reasoning_content` field in the assistant message at message index 1."}}"#
        ));
        assert!(!blames_restore(
            br#"{"error":{"code":400,"message":"Function call is missing a thought_signature in functionCall parts."}}"#
        ));
    }
}
