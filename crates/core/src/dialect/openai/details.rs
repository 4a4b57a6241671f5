//! OpenRouter `reasoning_details` entries: which ones carry something
//! (`docs/reasoning.md#empty-reasoning_details-entries`).
//!
//! An entry is an object `{"type": "reasoning.text" | "reasoning.summary" |
//! "reasoning.encrypted", "text" | "summary" | "data": …, "signature"?, "id"?, "format"?,
//! "index"?}` (https://openrouter.ai/docs/use-cases/reasoning-tokens, "Reasoning Details API
//! Shape"). Some clients append stubs of one of these types with no payload at all (a
//! `reasoning.encrypted` without `data`); on Gemini models OpenRouter then answers 400
//! "Function call is missing a thought_signature in functionCall parts". Such an entry is
//! dropped by the shaping pass on routes that read `reasoning_details`, and is not a kept
//! carrier for the restore pass. Entries of other types (OpenRouter's server tool call
//! records) are never judged here: they carry what they carry.

use serde_json::Value;

/// The entry types whose payload is one of [`PAYLOAD_FIELDS`].
const PAYLOAD_TYPES: [&str; 3] = ["reasoning.text", "reasoning.summary", "reasoning.encrypted"];

/// The fields an entry carries reasoning in: `text` (`reasoning.text`), `summary`
/// (`reasoning.summary`), `data` (`reasoning.encrypted`), and `signature` (a
/// `reasoning.text` from Anthropic may have an empty text and a signature).
pub(crate) const PAYLOAD_FIELDS: [&str; 4] = ["data", "text", "summary", "signature"];

/// True for an entry of a payload type ([`PAYLOAD_TYPES`]) whose every payload field
/// ([`PAYLOAD_FIELDS`]) is missing, null, an empty string or an empty array: nothing to pass
/// back. False for anything else (an entry of another type, a value that is not an object).
pub(crate) fn carries_nothing(entry: &Value) -> bool {
    let Some(obj) = entry.as_object() else {
        return false;
    };
    let typed = obj
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| PAYLOAD_TYPES.contains(&t));
    typed
        && PAYLOAD_FIELDS.iter().all(|f| match obj.get(*f) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(_) => false,
        })
}

/// [`carries_nothing`] of an entry given as JSON text (false when it is not JSON).
pub(crate) fn text_carries_nothing(entry: &str) -> bool {
    serde_json::from_str::<Value>(entry).is_ok_and(|v| carries_nothing(&v))
}

/// The same entry: the same `type` and the same payload fields ([`PAYLOAD_FIELDS`]); `id`,
/// `format` and `index` may differ (clients renumber `index`).
pub(crate) fn same_entry(a: &Value, b: &Value) -> bool {
    a.get("type") == b.get("type") && PAYLOAD_FIELDS.iter().all(|f| a.get(*f) == b.get(*f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stubs_carry_nothing_and_payloads_do() {
        for stub in [
            json!({"type": "reasoning.encrypted"}),
            json!({"type": "reasoning.encrypted", "data": "", "id": "tool_1", "format": "google-gemini-v1", "index": 1}),
            json!({"type": "reasoning.text", "text": null}),
            json!({"type": "reasoning.summary", "summary": ""}),
        ] {
            assert!(carries_nothing(&stub), "{stub}");
            assert!(text_carries_nothing(&stub.to_string()));
        }
        for kept in [
            json!({"type": "reasoning.encrypted", "data": "EjQK"}),
            json!({"type": "reasoning.text", "text": "", "signature": "EqQB"}),
            json!({"type": "reasoning.summary", "summary": "s"}),
            json!({"type": "reasoning.server_tool_call", "id": "x"}),
            json!({"data": ""}),
            json!("reasoning.encrypted"),
        ] {
            assert!(!carries_nothing(&kept), "{kept}");
        }
        assert!(!text_carries_nothing("not json"));
    }

    #[test]
    fn the_same_entry_ignores_index_and_id() {
        let a = json!({"type": "reasoning.encrypted", "data": "EjQK", "index": 0, "id": "t1"});
        let b = json!({"type": "reasoning.encrypted", "data": "EjQK", "index": 3});
        assert!(same_entry(&a, &b));
        let c = json!({"type": "reasoning.encrypted", "data": "other", "index": 0});
        assert!(!same_entry(&a, &c));
    }
}
