//! OpenAI Chat: `reasoning_content` / `reasoning` / `reasoning_details` back on the assistant
//! message; on Gemini's OpenAI-compatible endpoint the message's and each tool call's
//! `extra_content.google.thought_signature` (merged into an `extra_content` the client kept).
//!
//! Captured values that could not come back as a carrier (an empty or blank reasoning string,
//! an empty signature, a `reasoning_details` entry that is not an object or carries nothing,
//! [`carries_nothing`]) are skipped.
//!
//! "Already has", per location:
//! - the reasoning strings: a message with a non-blank `reasoning_content` or `reasoning`, or
//!   a `reasoning_details` entry that carries something, keeps its own (none of the three is
//!   added). An empty, blank (a pad such as `" "`) or null one is replaced, and so is a
//!   `reasoning_details` array whose every entry carries nothing (a client's stubs).
//! - `reasoning_details` entries, on a tool-call turn that kept some: a captured entry the
//!   kept ones lack (a client replaced it with a stub, or dropped it) goes back into the
//!   array at its captured position (`docs/reasoning.md#empty-reasoning_details-entries`).
//! - a signature: the message, or tool call `i`, with a non-empty
//!   `extra_content.google.thought_signature` keeps it (an empty one is replaced).

use serde_json::Value;

use super::details::{carries_nothing, same_entry, text_carries_nothing};
use crate::dialect::fingerprint::EchoedTurn;
use crate::dialect::gemini::restore::{first_signed, PLACEHOLDER_SIGNATURE};
use crate::dialect::restore::{
    append_members, insert_into_array, insertion_groups, json_str, set_member, Kind, List, TurnEdit,
};
use crate::dialect::turn::{CapturedTurn, Carrier};
use crate::json::scan::{self, Object};
use crate::json::Edit;

/// A reasoning carrier the client kept: a `reasoning_content` / `reasoning` that is not blank
/// (a blank one is a pad, e.g. the single space some agents send for a must-echo provider),
/// or any `reasoning_details` entry.
fn is_kept_reasoning(c: &Carrier) -> bool {
    match c {
        Carrier::ReasoningContent(s) | Carrier::Reasoning(s) => !s.trim().is_empty(),
        Carrier::ReasoningDetail(v) => !carries_nothing(v),
        _ => false,
    }
}

/// A captured `reasoning_details` entry that can go back: an object that carries something.
fn restorable_detail(v: &Value) -> bool {
    v.is_object() && !carries_nothing(v)
}

pub(crate) fn restore_turn(
    list: &List<'_>,
    turn: &EchoedTurn,
    captured: &CapturedTurn,
) -> TurnEdit {
    let mut out = TurnEdit::default();
    let Some(message) = list.object(turn.index) else {
        return out;
    };
    let text = list.text;
    let kept = &turn.turn.carriers;
    // Members appended to the message itself, written as one edit, and their kinds.
    let mut appended: Vec<(&str, String)> = Vec::new();
    let mut appended_kinds = Vec::new();
    let mut set = |key: &'static str, value: String, kind: Kind, out: &mut TurnEdit| {
        if message.get(key).is_some() {
            out.push(kind, set_member(&message, key, value));
        } else {
            appended.push((key, value));
            appended_kinds.push(kind);
        }
    };
    if !kept.iter().any(is_kept_reasoning) {
        let mut details = Vec::new();
        for c in &captured.carriers {
            match c {
                Carrier::ReasoningContent(s) if !s.trim().is_empty() => set(
                    "reasoning_content",
                    json_str(s),
                    Kind::ReasoningContent,
                    &mut out,
                ),
                Carrier::Reasoning(s) if !s.trim().is_empty() => {
                    set("reasoning", json_str(s), Kind::Reasoning, &mut out)
                }
                Carrier::ReasoningDetail(v) if restorable_detail(v) => {
                    details.extend(serde_json::to_string(v).ok())
                }
                _ => {}
            }
        }
        if !details.is_empty() {
            let value = format!("[{}]", details.join(","));
            set("reasoning_details", value, Kind::ReasoningDetails, &mut out);
        }
    } else if !captured.calls.is_empty() {
        if let Some(e) = missing_details(text, &message, kept, captured) {
            out.push(Kind::ReasoningDetails, e);
        }
    }
    let message_signed = kept
        .iter()
        .any(|c| matches!(c, Carrier::MessageSignature(s) if !s.is_empty()));
    let call_signed = |i: usize| {
        kept.iter()
            .any(|c| matches!(c, Carrier::ToolCallSignature { call, signature } if *call == i && !signature.is_empty()))
    };
    for c in &captured.carriers {
        match c {
            Carrier::MessageSignature(sig) if !sig.is_empty() && !message_signed => {
                match signature_edit(text, &message, &json_str(sig)) {
                    SigEdit::Append(v) => {
                        appended.push(("extra_content", v));
                        appended_kinds.push(Kind::ThoughtSignature);
                    }
                    SigEdit::Edit(e) => out.push(Kind::ThoughtSignature, [e]),
                }
            }
            Carrier::ToolCallSignature { call, signature }
                if !signature.is_empty() && !call_signed(*call) =>
            {
                if let Some(e) = tool_call(text, &message, *call)
                    .and_then(|o| call_signature(text, &o, signature))
                {
                    out.push(Kind::ThoughtSignature, [e]);
                }
            }
            _ => {}
        }
    }
    if let Some(e) = append_members(&message, &appended) {
        out.edits.push(e);
        appended_kinds.into_iter().for_each(|k| out.note(k));
    }
    out
}

/// A tool-call turn that kept some of its `reasoning_details` entries but not all: the
/// captured entries it lacks ([`same_entry`] finds none among the kept entries that carry
/// something) go back into its array, each at its captured position among the kept entries
/// (entries that carry nothing are not counted: the shaping pass removes them). `None` when
/// none is missing or the array cannot be read.
fn missing_details(
    text: &str,
    message: &Object,
    kept: &[Carrier],
    captured: &CapturedTurn,
) -> Option<Vec<Edit>> {
    let kept: Vec<&Value> = kept
        .iter()
        .filter_map(|c| match c {
            Carrier::ReasoningDetail(v) if !carries_nothing(v) => Some(v),
            _ => None,
        })
        .collect();
    let captured: Vec<&Value> = captured
        .carriers
        .iter()
        .filter_map(|c| match c {
            Carrier::ReasoningDetail(v) if restorable_detail(v) => Some(v),
            _ => None,
        })
        .collect();
    let missing: Vec<usize> = (0..captured.len())
        .filter(|&i| !kept.iter().any(|k| same_entry(k, captured[i])))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let member = message.get("reasoning_details")?;
    let elements = scan::array_at(text, member.value.start)?;
    let carrying: Vec<std::ops::Range<usize>> = elements
        .into_iter()
        .filter(|r| !text_carries_nothing(scan::slice(text, r)))
        .collect();
    let edits = insertion_groups(&missing, carrying.len())
        .into_iter()
        .map(|(k, members)| {
            let items: Vec<String> = members
                .iter()
                .filter_map(|&m| serde_json::to_string(captured[missing[m]]).ok())
                .collect();
            insert_into_array(&member.value, &carrying, k, &items)
        })
        .collect();
    Some(edits)
}

/// Tool call `i` of the message's `tool_calls`, as an object.
pub(crate) fn tool_call(text: &str, message: &Object, i: usize) -> Option<Object> {
    let calls = scan::array_at(text, message.get("tool_calls")?.value.start)?;
    scan::object_at(text, calls.get(i)?.start)
}

/// The edit putting `signature` on a tool call object.
pub(crate) fn call_signature(text: &str, call: &Object, signature: &str) -> Option<Edit> {
    match signature_edit(text, call, &json_str(signature)) {
        SigEdit::Append(v) => append_members(call, &[("extra_content", v)]),
        SigEdit::Edit(e) => Some(e),
    }
}

/// How `extra_content.google.thought_signature` gets onto an object.
enum SigEdit {
    /// The object has no `extra_content`: append one with this value.
    Append(String),
    /// An edit inside (or of) the object's `extra_content`.
    Edit(Edit),
}

/// Put the signature (JSON string `sig`) into `obj`'s `extra_content.google`, merging into the
/// objects the client kept; a member that is not an object (or an empty signature) is replaced.
fn signature_edit(text: &str, obj: &Object, sig: &str) -> SigEdit {
    let google = format!(r#"{{"thought_signature":{sig}}}"#);
    let Some(ec) = obj.get("extra_content") else {
        return SigEdit::Append(format!(r#"{{"google":{google}}}"#));
    };
    let replace = |range: &std::ops::Range<usize>, value: String| {
        SigEdit::Edit(Edit {
            range: range.clone(),
            replacement: value.into_bytes(),
        })
    };
    let Some(extra) = scan::object_at(text, ec.value.start) else {
        return replace(&ec.value, format!(r#"{{"google":{google}}}"#));
    };
    let Some(g) = extra.get("google") else {
        return match append_members(&extra, &[("google", google.clone())]) {
            Some(e) => SigEdit::Edit(e),
            None => replace(&ec.value, format!(r#"{{"google":{google}}}"#)),
        };
    };
    match scan::object_at(text, g.value.start) {
        None => replace(&g.value, google),
        Some(go) => match set_member(&go, "thought_signature", sig.to_owned()) {
            Some(e) => SigEdit::Edit(e),
            None => replace(&g.value, google),
        },
    }
}

/// Whether the captured turn holds its first tool call's signature (Gemini's
/// OpenAI-compatible endpoint; so no placeholder goes there).
pub(crate) fn first_call_signed(captured: &CapturedTurn) -> bool {
    captured
        .carriers
        .iter()
        .any(|c| matches!(c, Carrier::ToolCallSignature { call, .. } if *call == 0))
}

/// The placeholder signature ([`PLACEHOLDER_SIGNATURE`]) for the list entry `entry` (`v`: its
/// value), on Gemini's OpenAI-compatible endpoint: in the first tool call's `extra_content` of
/// an assistant message with tool calls whose first call has no signature, else `None`.
pub(crate) fn placeholder(list: &List<'_>, entry: &Object, v: &Value) -> Option<Edit> {
    if v.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let turn = crate::dialect::openai::response::message_turn(v);
    if turn.calls.is_empty() || first_signed(&turn) {
        return None;
    }
    let call = tool_call(list.text, entry, 0)?;
    call_signature(list.text, &call, PLACEHOLDER_SIGNATURE)
}
