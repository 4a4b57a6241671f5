//! Gemini: `thoughtSignature` back on the parts it came with — the `functionCall` part of
//! call `i`; the text signature on the last non-thought text part, or on an appended
//! `{"text":"","thoughtSignature":…}` part when the echo has no text part (the shape the API
//! streams it in). And the placeholder signature for calls whose signature is unknown, on the
//! Gemini wire and Gemini's OpenAI-compatible endpoint.
//!
//! "Already has": a part the echoed turn already reads a signature for (its own
//! `thoughtSignature` / `thought_signature`, or for call 0 one the client left on a later
//! signature-only part, as the stream delivered it) keeps it.

use std::ops::Range;

use serde_json::Value;

use crate::dialect::fingerprint::EchoedTurn;
use crate::dialect::restore::{append_members, insert_into_array, json_str, Kind, List, TurnEdit};
use crate::dialect::turn::{CapturedTurn, Carrier, PartRef};
use crate::json::scan::{self, Object};
use crate::json::Edit;

/// The placeholder Google documents for a function call whose thought signature is not
/// available (history from another model, or built by hand): accepted by the Gemini API and
/// Vertex AI, and by the OpenAI-compatible endpoint in `extra_content`. Source:
/// <https://ai.google.dev/gemini-api/docs/thought-signatures> (FAQ),
/// <https://docs.cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures>.
pub(crate) const PLACEHOLDER_SIGNATURE: &str = "skip_thought_signature_validator";

/// The two spellings of a part's signature key (the REST API's camelCase and the SDKs').
const SIGNATURE_KEYS: [&str; 2] = ["thoughtSignature", "thought_signature"];

/// The part objects of a content, with each part's element range.
fn parts(list: &List<'_>, content: &Object) -> Option<(Range<usize>, Vec<Range<usize>>)> {
    let m = content.get("parts")?;
    Some((m.value.clone(), scan::array_at(list.text, m.value.start)?))
}

fn is_call(text: &str, part: &Object) -> bool {
    part.get_any(&["functionCall", "function_call"])
        .is_some_and(|m| scan::slice(text, &m.value).starts_with('{'))
}

fn is_visible_text(text: &str, part: &Object) -> bool {
    part.get("text")
        .is_some_and(|m| scan::slice(text, &m.value).starts_with('"'))
        && !is_call(text, part)
        && part
            .get("thought")
            .is_none_or(|m| scan::slice(text, &m.value) != "true")
}

/// The edit setting `part`'s signature to `sig` (JSON string): replace the value of a
/// signature member the part has (empty, or not a string), else append `thoughtSignature`.
/// `None` when the part has a signature of its own (never overwritten: the echo may hold a
/// signature the readers attribute to another part).
fn part_signature(text: &str, part: &Object, sig: String) -> Option<Edit> {
    match part.get_any(&SIGNATURE_KEYS) {
        Some(m) if scan::string_at(text, &m.value).is_some_and(|s| !s.is_empty()) => None,
        Some(m) => Some(Edit {
            range: m.value.clone(),
            replacement: sig.into_bytes(),
        }),
        None => append_members(part, &[("thoughtSignature", sig)]),
    }
}

pub(crate) fn restore_turn(
    list: &List<'_>,
    turn: &EchoedTurn,
    captured: &CapturedTurn,
) -> TurnEdit {
    let mut out = TurnEdit::default();
    let text = list.text;
    let Some(content) = list.object(turn.index) else {
        return out;
    };
    let Some((parts_value, elements)) = parts(list, &content) else {
        return out;
    };
    let objects: Vec<Option<Object>> = elements
        .iter()
        .map(|e| scan::object_at(text, e.start))
        .collect();
    let calls: Vec<&Object> = objects
        .iter()
        .flatten()
        .filter(|o| is_call(text, o))
        .collect();
    // One signature per place (the last captured wins).
    let mut wanted: Vec<(PartRef, &str)> = Vec::new();
    for c in &captured.carriers {
        if let Carrier::GeminiSignature { on, signature } = c {
            if signature.is_empty() {
                continue;
            }
            wanted.retain(|(o, _)| o != on);
            wanted.push((*on, signature));
        }
    }
    for (on, sig) in wanted {
        let kept = turn
            .turn
            .carriers
            .iter()
            .any(|c| matches!(c, Carrier::GeminiSignature { on: o, .. } if *o == on));
        if kept {
            continue;
        }
        let edit = match on {
            PartRef::Call(i) => calls
                .get(i)
                .and_then(|p| part_signature(text, p, json_str(sig))),
            PartRef::Text => {
                let last_text = objects
                    .iter()
                    .rev()
                    .flatten()
                    .find(|o| is_visible_text(text, o));
                match last_text {
                    Some(p) => part_signature(text, p, json_str(sig)),
                    None => {
                        let part = format!(r#"{{"text":"","thoughtSignature":{}}}"#, json_str(sig));
                        Some(insert_into_array(
                            &parts_value,
                            &elements,
                            elements.len(),
                            &[part],
                        ))
                    }
                }
            }
        };
        out.push(Kind::ThoughtSignature, edit);
    }
    out
}

/// Whether the captured turn holds its first call's signature (so no placeholder goes there).
pub(crate) fn first_call_signed(captured: &CapturedTurn) -> bool {
    captured
        .carriers
        .iter()
        .any(|c| matches!(c, Carrier::GeminiSignature { on, .. } if *on == PartRef::Call(0)))
}

/// The placeholder signature ([`PLACEHOLDER_SIGNATURE`]) for the list entry `entry` (`v`: its
/// value): on the first function call of a model content with calls whose first call has no
/// signature, else `None`. The pass that asks is `reasoning::restore`'s placeholders.
pub(crate) fn placeholder(list: &List<'_>, entry: &Object, v: &Value) -> Option<Edit> {
    if v.get("role").and_then(Value::as_str) != Some("model") {
        return None;
    }
    let turn = crate::dialect::gemini::response::content_turn(v);
    if turn.calls.is_empty() || first_signed(&turn) {
        return None;
    }
    let text = list.text;
    let (_, elements) = parts(list, entry)?;
    let first = elements
        .iter()
        .filter_map(|e| scan::object_at(text, e.start))
        .find(|o| is_call(text, o))?;
    part_signature(text, &first, json_str(PLACEHOLDER_SIGNATURE))
}

/// The turn (as read back) has a signature for its first call.
pub(crate) fn first_signed(turn: &CapturedTurn) -> bool {
    turn.carriers.iter().any(|c| match c {
        Carrier::GeminiSignature {
            on: PartRef::Call(0),
            signature,
        }
        | Carrier::ToolCallSignature { call: 0, signature } => !signature.is_empty(),
        _ => false,
    })
}
