//! OpenAI Chat Completions responses, and the OpenAI-compatible hosts (DeepSeek, OpenRouter,
//! Kimi, Gemini's OpenAI endpoint, …) (`docs/usage.md#openai-chat-completions`).
//!
//! Streamed: `data: {chunk}` events ending with `data: [DONE]`; the usage chunk (with
//! `stream_options.include_usage`: empty `choices`, whole-request `usage`; every other chunk
//! has `"usage": null`) — the last usage object reported wins; a chunk with an `error` object
//! is an error. Choice 0's `delta`: `content`, `reasoning_content`, `reasoning`,
//! `reasoning_details`, `extra_content`, `tool_calls` (merged by their `index`).
//! Non-streaming: `choices[0].message` and `usage`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::anthropic::canonical_text;
use super::turn::{Call, CapturedTurn, Carrier};
use super::usage::{self, Usage};
use super::{note_error, note_model, parse_json, str_field, Observed};
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// One streamed tool call, merged over its deltas.
#[derive(Debug, Default)]
struct CallAcc {
    /// The first non-empty id (some hosts repeat it on every delta).
    id: Option<String>,
    /// The first non-empty name.
    name: String,
    /// The `arguments` fragments, concatenated.
    arguments: String,
    signature: Option<String>,
}

/// The state of one Chat response.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    text: String,
    reasoning_content: String,
    reasoning: String,
    details: Vec<Map<String, Value>>,
    /// Where the entry with each `index` sits in `details` (a linear search per fragment was
    /// quadratic in the number of distinct indexes).
    detail_at: HashMap<u64, usize>,
    message_signature: Option<String>,
    calls: BTreeMap<u64, CallAcc>,
    body_turn: Option<CapturedTurn>,
}

/// Choice 0 of a `choices` list (its `index` is 0, or absent).
fn choice0(v: &Value) -> Option<&Value> {
    v.get("choices")?.as_array()?.iter().find(|c| {
        c.get("index")
            .map(|i| i.as_u64() == Some(0))
            .unwrap_or(true)
    })
}

/// The usage of a chunk or body: top-level `usage`, else `choices[0].usage` (Kimi).
fn usage_of(v: &Value) -> Option<Usage> {
    v.get("usage").and_then(usage::openai_chat).or_else(|| {
        choice0(v)
            .and_then(|c| c.get("usage"))
            .and_then(usage::openai_chat)
    })
}

/// An `error` object of a chunk or body: its `type`, else `code` (string), else "error".
fn error_of(v: &Value) -> Option<Option<&str>> {
    let e = v.get("error").filter(|e| e.is_object())?;
    Some(str_field(e, "type").or_else(|| str_field(e, "code")))
}

/// `extra_content.google.thought_signature` of an object.
fn google_signature(v: &Value) -> Option<&str> {
    v.get("extra_content")?
        .get("google")?
        .get("thought_signature")?
        .as_str()
}

impl Stream {
    pub(super) fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        if ev.data.trim_ascii() == b"[DONE]" {
            return Ok(());
        }
        let v = parse_json(ev.data, "openai chunk")?;
        if !common(&v, out) {
            return Ok(());
        }
        if let Some(delta) = choice0(&v).and_then(|c| c.get("delta")) {
            self.delta(delta);
        }
        Ok(())
    }

    fn delta(&mut self, delta: &Value) {
        if let Some(t) = str_field(delta, "content") {
            self.text.push_str(t);
        }
        if let Some(t) = str_field(delta, "reasoning_content") {
            self.reasoning_content.push_str(t);
        }
        if let Some(t) = str_field(delta, "reasoning") {
            self.reasoning.push_str(t);
        }
        if let Some(entries) = delta.get("reasoning_details").and_then(Value::as_array) {
            for e in entries.iter().filter_map(Value::as_object) {
                merge_detail(&mut self.details, &mut self.detail_at, e);
            }
        }
        if let Some(s) = google_signature(delta) {
            self.message_signature = Some(s.to_owned());
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, tc) in calls.iter().enumerate() {
                let index = tc
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let acc = self.calls.entry(index).or_default();
                if acc.id.is_none() {
                    acc.id = str_field(tc, "id")
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned);
                }
                if let Some(f) = tc.get("function") {
                    if acc.name.is_empty() {
                        acc.name = str_field(f, "name").unwrap_or("").to_owned();
                    }
                    if let Some(a) = str_field(f, "arguments") {
                        acc.arguments.push_str(a);
                    }
                }
                if let Some(s) = google_signature(tc) {
                    acc.signature = Some(s.to_owned());
                }
            }
        }
    }

    pub(super) fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(body, "openai response body")?;
        if !common(&v, out) {
            return Ok(());
        }
        if let Some(m) = choice0(&v).and_then(|c| c.get("message")) {
            self.body_turn = Some(message_turn(m));
        }
        Ok(())
    }

    /// Drop what the turn holds (past the size cap); usage is kept.
    pub(super) fn shed(&mut self) {
        *self = Self::default();
    }

    /// The turn seen: the body's, or the streamed deltas assembled (carriers in the order
    /// `reasoning_content`, `reasoning`, `reasoning_details` entries, message signature, tool
    /// call signatures — the order [`message_turn`] reads them in).
    pub(super) fn turn(&mut self) -> CapturedTurn {
        if let Some(t) = self.body_turn.take() {
            return t;
        }
        let mut turn = CapturedTurn {
            text: std::mem::take(&mut self.text),
            ..CapturedTurn::default()
        };
        if !self.reasoning_content.is_empty() {
            let rc = std::mem::take(&mut self.reasoning_content);
            turn.carriers.push(Carrier::ReasoningContent(rc));
        }
        if !self.reasoning.is_empty() {
            let r = std::mem::take(&mut self.reasoning);
            turn.carriers.push(Carrier::Reasoning(r));
        }
        self.detail_at.clear();
        for d in self.details.drain(..) {
            turn.carriers
                .push(Carrier::ReasoningDetail(Value::Object(d)));
        }
        if let Some(s) = self.message_signature.take() {
            turn.carriers.push(Carrier::MessageSignature(s));
        }
        let mut signatures = Vec::new();
        for (i, acc) in std::mem::take(&mut self.calls).into_values().enumerate() {
            if let Some(signature) = acc.signature {
                signatures.push(Carrier::ToolCallSignature { call: i, signature });
            }
            turn.calls.push(Call {
                id: acc.id,
                name: acc.name,
                arguments: canonical_text(&acc.arguments),
            });
        }
        turn.carriers.extend(signatures);
        turn
    }
}

/// What a chunk and a whole body share: an error (then `false`: nothing else to read), the
/// model, the usage.
fn common(v: &Value, out: &mut Observed) -> bool {
    if let Some(code) = error_of(v) {
        note_error(out, code);
        return false;
    }
    note_model(out, str_field(v, "model"));
    if let Some(u) = usage_of(v) {
        out.usage = u;
    }
    true
}

/// Merge one streamed `reasoning_details` entry: into the entry with the same `index` (its
/// `text` and `summary` concatenated, every other non-null field replacing), else appended.
fn merge_detail(
    details: &mut Vec<Map<String, Value>>,
    at: &mut HashMap<u64, usize>,
    entry: &Map<String, Value>,
) {
    let index = entry.get("index").and_then(Value::as_u64);
    let existing = index
        .and_then(|i| at.get(&i).copied())
        .and_then(|pos| details.get_mut(pos));
    let Some(existing) = existing else {
        if let Some(i) = index {
            at.insert(i, details.len());
        }
        details.push(entry.clone());
        return;
    };
    for (k, v) in entry {
        match (k.as_str(), existing.get_mut(k), v) {
            ("text" | "summary", Some(Value::String(acc)), Value::String(more)) => {
                acc.push_str(more)
            }
            (_, _, Value::Null) => {}
            _ => {
                existing.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The turn of an assistant message (`choices[0].message` of a body, or an assistant message a
/// client echoes): `content` (a string, or parts whose `text` is concatenated),
/// `reasoning_content` / `reasoning` (when non-empty strings), `reasoning_details` entries,
/// `extra_content.google.thought_signature` on the message and on each tool call, and
/// `tool_calls` (`id`, `function.name`, `function.arguments`).
pub(crate) fn message_turn(message: &Value) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    match message.get("content") {
        Some(Value::String(s)) => turn.text.push_str(s),
        Some(Value::Array(parts)) => {
            for p in parts {
                if str_field(p, "type").is_none_or(|t| t == "text") {
                    turn.text.push_str(str_field(p, "text").unwrap_or(""));
                }
            }
        }
        _ => {}
    }
    for (key, wrap) in [
        (
            "reasoning_content",
            Carrier::ReasoningContent as fn(String) -> Carrier,
        ),
        ("reasoning", Carrier::Reasoning),
    ] {
        if let Some(s) = str_field(message, key).filter(|s| !s.is_empty()) {
            turn.carriers.push(wrap(s.to_owned()));
        }
    }
    if let Some(entries) = message.get("reasoning_details").and_then(Value::as_array) {
        for e in entries.iter().filter(|e| e.is_object()) {
            turn.carriers.push(Carrier::ReasoningDetail(e.clone()));
        }
    }
    if let Some(s) = google_signature(message) {
        turn.carriers.push(Carrier::MessageSignature(s.to_owned()));
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for tc in calls {
            let f = tc.get("function").unwrap_or(&Value::Null);
            if let Some(signature) = google_signature(tc) {
                turn.carriers.push(Carrier::ToolCallSignature {
                    call: turn.calls.len(),
                    signature: signature.to_owned(),
                });
            }
            turn.calls.push(Call {
                id: str_field(tc, "id")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
                name: str_field(f, "name").unwrap_or("").to_owned(),
                arguments: canonical_text(str_field(f, "arguments").unwrap_or("")),
            });
        }
    }
    turn
}
