//! Anthropic Messages responses (`docs/usage.md#anthropic-messages`).
//!
//! Streamed: `message_start` (model, input-side usage), `content_block_start` /
//! `content_block_delta` (`text_delta`, `thinking_delta`, `signature_delta`,
//! `input_json_delta`), `message_delta` (cumulative usage: the last value of each field wins),
//! `error`; `ping`, `content_block_stop`, `message_stop` and unknown types are ignored.
//! Non-streaming: the message object (`model`, `content`, `usage`) or an error body
//! (`{"type":"error","error":{"type":…}}`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::dialect::canonical::canonical;
use crate::dialect::lenient::{self, str_of, u64_of};
use crate::dialect::observed::{
    note_error, note_model, parse_json, str_field, Observed, ResponseReader,
};
use crate::dialect::turn::{Call, CapturedTurn, Carrier};
use crate::dialect::usage::AnthropicUsage;
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// One content block being streamed, by its `index`.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: Option<String>,
        name: String,
        /// `content_block_start`'s `input` (normally `{}`), used when no `input_json_delta`
        /// came.
        input: Value,
        partial: String,
    },
    /// A block type that is neither text, a carrier nor a client tool call (e.g.
    /// `server_tool_use`, `web_search_tool_result`).
    Other,
}

/// The state of one Anthropic response.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    usage: AnthropicUsage,
    blocks: BTreeMap<usize, Block>,
    /// The turn of a non-streaming body.
    body_turn: Option<CapturedTurn>,
}

impl Stream {
    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        if ev.event == Some("content_block_delta")
            && (self.compact_delta_event(ev.data) || self.delta_event(ev.data))
        {
            out.usage = self.usage.usage();
            return Ok(());
        }
        self.value_event(ev, out)
    }

    /// A `content_block_delta` in the compact shape Anthropic sends ([`compact_delta`]): `true`
    /// when it was one and is applied, `false` when the typed view must read the event.
    fn compact_delta_event(&mut self, data: &[u8]) -> bool {
        let Some(d) = compact_delta(data) else {
            return false;
        };
        if let Some(block) = self.blocks.get_mut(&d.index) {
            let piece: &str = &d.piece;
            apply_parts(
                block,
                Some(d.kind),
                |key| if key == d.field { piece } else { "" },
            );
        }
        true
    }

    /// An event read through a `serde_json::Value` (every event the typed view does not take).
    fn value_event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(ev.data, "anthropic event")?;
        let kind = str_field(&v, "type").or(ev.event).unwrap_or("");
        match kind {
            "message_start" => {
                let msg = v.get("message").unwrap_or(&Value::Null);
                note_model(out, str_field(msg, "model"));
                if let Some(u) = msg.get("usage") {
                    self.usage.merge(u);
                }
            }
            "content_block_start" => {
                if let (Some(index), Some(block)) = (index(&v), v.get("content_block")) {
                    self.blocks.insert(index, start(block));
                }
            }
            "content_block_delta" => {
                if let (Some(index), Some(delta)) = (index(&v), v.get("delta")) {
                    if let Some(block) = self.blocks.get_mut(&index) {
                        apply(block, delta);
                    }
                }
            }
            "message_delta" => {
                if let Some(u) = v.get("usage") {
                    self.usage.merge(u);
                }
            }
            "error" => note_error(out, v.get("error").and_then(|e| str_field(e, "type"))),
            _ => return Ok(()),
        }
        out.usage = self.usage.usage();
        Ok(())
    }

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(body, "anthropic response body")?;
        if str_field(&v, "type") == Some("error") {
            note_error(out, v.get("error").and_then(|e| str_field(e, "type")));
            return Ok(());
        }
        note_model(out, str_field(&v, "model"));
        if let Some(u) = v.get("usage") {
            self.usage.merge(u);
            out.usage = self.usage.usage();
        }
        if v.get("content").is_some() {
            self.body_turn = Some(message_turn(&v));
        }
        Ok(())
    }

    /// A `content_block_delta` read through the typed view ([`lenient::AnthropicDelta`]):
    /// `true` when it was one and is applied, `false` when the `Value` path must read the
    /// event (the view could not take it, or its `type` names another event).
    fn delta_event(&mut self, data: &[u8]) -> bool {
        let Some(ev) = lenient::read::<lenient::AnthropicDelta<'_>>(data) else {
            return false;
        };
        if str_of(&ev.kind).unwrap_or("content_block_delta") != "content_block_delta" {
            return false;
        }
        let index = u64_of(&ev.index).and_then(|i| usize::try_from(i).ok());
        if let (Some(index), Some(Some(delta))) = (index, ev.delta) {
            if let Some(block) = self.blocks.get_mut(&index) {
                apply_parts(block, str_of(&delta.kind), |key| {
                    match key {
                        "text" => str_of(&delta.text),
                        "thinking" => str_of(&delta.thinking),
                        "signature" => str_of(&delta.signature),
                        _ => str_of(&delta.partial_json),
                    }
                    .unwrap_or("")
                });
            }
        }
        true
    }

    /// Drop what the turn holds (past the size cap); usage is kept.
    fn shed(&mut self) {
        self.blocks.clear();
    }

    /// The turn seen (streamed blocks in index order, or the body's).
    fn turn(&mut self) -> CapturedTurn {
        if let Some(t) = self.body_turn.take() {
            return t;
        }
        let mut turn = CapturedTurn::default();
        for (&position, block) in &self.blocks {
            match block {
                Block::Text(t) => turn.text.push_str(t),
                Block::Thinking {
                    thinking,
                    signature,
                } => turn.carriers.push(Carrier::AnthropicThinking {
                    position,
                    thinking: thinking.clone(),
                    signature: (!signature.is_empty()).then(|| signature.clone()),
                }),
                Block::Redacted(data) => turn.carriers.push(Carrier::AnthropicRedacted {
                    position,
                    data: data.clone(),
                }),
                Block::ToolUse {
                    id,
                    name,
                    input,
                    partial,
                } => {
                    let arguments = if partial.trim().is_empty() {
                        canonical(input)
                    } else {
                        canonical_text(partial)
                    };
                    turn.calls.push(Call {
                        id: id.clone(),
                        name: name.clone(),
                        arguments,
                    });
                }
                Block::Other => {}
            }
        }
        turn
    }
}

impl ResponseReader for Stream {
    fn is_end_marker(&self, ev: &SseEvent<'_>) -> bool {
        ev.event == Some("message_stop")
    }

    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        Stream::event(self, ev, out)
    }

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        Stream::body(self, body, out)
    }

    fn shed(&mut self) {
        Stream::shed(self)
    }

    fn turn(&mut self) -> CapturedTurn {
        Stream::turn(self)
    }
}

/// A `content_block_delta` read by [`compact_delta`].
#[derive(Debug, PartialEq, Eq)]
struct CompactDelta<'a> {
    index: usize,
    /// The delta's `type` (one of [`COMPACT_DELTAS`]).
    kind: &'static str,
    /// The one field it carries.
    field: &'static str,
    /// That field's string, unescaped.
    piece: Cow<'a, str>,
}

/// The start of a delta event as Anthropic sends it (compact JSON, members in this order).
const COMPACT_HEAD: &[u8] = br#"{"type":"content_block_delta","index":"#;

/// After the index: the delta's start up to its one string field's value, with that delta's
/// `type` and the field's name (the four delta types of
/// <https://docs.anthropic.com/en/docs/build-with-claude/streaming#content-block-delta-types>).
const COMPACT_DELTAS: [(&[u8], &str, &str); 4] = [
    (
        br#","delta":{"type":"text_delta","text":"#,
        "text_delta",
        "text",
    ),
    (
        br#","delta":{"type":"thinking_delta","thinking":"#,
        "thinking_delta",
        "thinking",
    ),
    (
        br#","delta":{"type":"signature_delta","signature":"#,
        "signature_delta",
        "signature",
    ),
    (
        br#","delta":{"type":"input_json_delta","partial_json":"#,
        "input_json_delta",
        "partial_json",
    ),
];

/// Most digits of an index read here (so it fits a `usize` everywhere); a longer one is left
/// to the typed view.
const COMPACT_INDEX_DIGITS: usize = 9;

/// Read a delta event without a general parse when its bytes are exactly
/// `{"type":"content_block_delta","index":N,"delta":{"type":"KIND","FIELD":STRING}}`, the
/// shape Anthropic streams every delta in: `N` a JSON integer of at most
/// [`COMPACT_INDEX_DIGITS`] digits, `KIND` / `FIELD` one pair of [`COMPACT_DELTAS`], and
/// `STRING` one JSON string (serde_json reads it: escapes, UTF-8 and control bytes checked as
/// the `Value` parse checks them). Every input taken is valid JSON the typed view and the
/// `Value` path read the same way; `None` for anything else (whitespace, another member order,
/// an escaped field name, a duplicate key...), which the typed view then reads.
fn compact_delta(data: &[u8]) -> Option<CompactDelta<'_>> {
    let rest = data.strip_prefix(COMPACT_HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > COMPACT_INDEX_DIGITS || (digits > 1 && rest.first() == Some(&b'0')) {
        return None;
    }
    let index = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = &rest[digits..];
    let (literal, kind, field) = COMPACT_DELTAS.iter().find_map(|&(head, kind, field)| {
        let literal = rest.strip_prefix(head)?.strip_suffix(b"}}")?;
        Some((literal, kind, field))
    })?;
    // Borrowed when the string holds no escape; else decoded.
    let piece = match lenient::read::<&str>(literal) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(lenient::read::<String>(literal)?),
    };
    Some(CompactDelta {
        index,
        kind,
        field,
        piece,
    })
}

fn index(v: &Value) -> Option<usize> {
    v.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
}

fn owned(v: &Value, key: &str) -> String {
    str_field(v, key).unwrap_or("").to_owned()
}

/// The block a `content_block_start` opens.
fn start(block: &Value) -> Block {
    match str_field(block, "type") {
        Some("text") => Block::Text(owned(block, "text")),
        Some("thinking") => Block::Thinking {
            thinking: owned(block, "thinking"),
            signature: owned(block, "signature"),
        },
        Some("redacted_thinking") => Block::Redacted(owned(block, "data")),
        Some("tool_use") => Block::ToolUse {
            id: str_field(block, "id").map(str::to_owned),
            name: owned(block, "name"),
            input: block.get("input").cloned().unwrap_or(Value::Null),
            partial: String::new(),
        },
        _ => Block::Other,
    }
}

/// One `content_block_delta` on its block (a delta of another block's type is ignored).
fn apply(block: &mut Block, delta: &Value) {
    apply_parts(block, str_field(delta, "type"), |key| {
        str_field(delta, key).unwrap_or("")
    });
}

/// [`apply`] over a delta's `type` and its payload fields by name (`text`, `thinking`,
/// `signature`, `partial_json`), however the delta was read.
fn apply_parts<'d>(block: &mut Block, kind: Option<&str>, piece: impl Fn(&str) -> &'d str) {
    match (block, kind) {
        (Block::Text(t), Some("text_delta")) => t.push_str(piece("text")),
        (Block::Thinking { thinking, .. }, Some("thinking_delta")) => {
            thinking.push_str(piece("thinking"))
        }
        (Block::Thinking { signature, .. }, Some("signature_delta")) => {
            signature.push_str(piece("signature"))
        }
        (Block::ToolUse { partial, .. }, Some("input_json_delta")) => {
            partial.push_str(piece("partial_json"))
        }
        _ => {}
    }
}

/// Arguments as sent in text: canonical JSON when they parse, else as sent.
pub(crate) fn canonical_text(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => canonical(&v),
        Err(_) => text.to_owned(),
    }
}

/// The turn of an assistant message object (a non-streaming response body, or an assistant
/// message a client echoes): `content` as a string (text) or a list of blocks; blocks of
/// other types count for positions only.
pub(crate) fn message_turn(message: &Value) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    match message.get("content") {
        Some(Value::String(s)) => turn.text.push_str(s),
        Some(Value::Array(blocks)) => {
            for (position, block) in blocks.iter().enumerate() {
                match str_field(block, "type") {
                    Some("text") => turn.text.push_str(str_field(block, "text").unwrap_or("")),
                    Some("thinking") => turn.carriers.push(Carrier::AnthropicThinking {
                        position,
                        thinking: owned(block, "thinking"),
                        signature: str_field(block, "signature")
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned),
                    }),
                    Some("redacted_thinking") => turn.carriers.push(Carrier::AnthropicRedacted {
                        position,
                        data: owned(block, "data"),
                    }),
                    Some("tool_use") => turn.calls.push(Call {
                        id: str_field(block, "id").map(str::to_owned),
                        name: owned(block, "name"),
                        arguments: canonical(block.get("input").unwrap_or(&Value::Null)),
                    }),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    turn
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One stream fed `deltas` as `event: content_block_delta` events (as Anthropic sends
    /// them): through [`Stream::event`] (the typed view first) or the `Value` path alone.
    fn fed(deltas: &[&str], typed: bool) -> (CapturedTurn, Observed) {
        let mut s = Stream::default();
        let mut out = Observed::default();
        let starts = [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#,
        ];
        for start in starts {
            let ev = SseEvent {
                event: Some("content_block_start"),
                data: start.as_bytes(),
            };
            assert!(s.event(&ev, &mut out).is_ok());
        }
        for d in deltas {
            let ev = SseEvent {
                event: Some("content_block_delta"),
                data: d.as_bytes(),
            };
            // Both paths fail on the same events (not JSON): the sink then stops reading.
            let _ = if typed {
                s.event(&ev, &mut out)
            } else {
                s.value_event(&ev, &mut out)
            };
        }
        (s.turn(), out)
    }

    /// The typed view reads every delta exactly as the `Value` path does, odd shapes included.
    #[test]
    fn the_typed_delta_reads_what_the_value_path_reads() {
        let deltas = [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" w\u00f6rld\n\"q\""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"c2ln"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            // Wrong types and odd shapes: each read the same way by both paths.
            r#"{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"type":"content_block_delta","index":0.0,"delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":null}"#,
            r#"{"type":"content_block_delta","index":0}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":7}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"not text"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"x","cited_text":"y"}},"extra":[1,{"a":null}]}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","text":"b"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":"text"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":["text_delta","arr"]}"#,
            r#"["content_block_delta",0,{"type":"text_delta","text":"arr"}]"#,
            r#"{"type":"content_block_delta","index":9,"delta":{"type":"text_delta","text":"no block"}}"#,
            r#"{"type":7,"index":0,"delta":{"type":"text_delta","text":"typeless"}}"#,
            r#"{"index":0,"delta":{"type":"text_delta","text":"!"}}"#,
        ];
        let (typed_turn, typed_out) = fed(&deltas, true);
        let (value_turn, value_out) = fed(&deltas, false);
        assert_eq!(typed_turn, value_turn);
        assert_eq!(typed_out, value_out);
        assert_eq!(typed_turn.text, "Hello wörld\n\"q\"btypeless!");
        assert_eq!(typed_turn.carriers.len(), 1);
        assert_eq!(typed_turn.calls[0].arguments, r#"{"a":1}"#);
    }

    /// Every one-byte change of a delta event (to each JSON-significant byte) is read the
    /// same way by both paths: whatever the view takes, it takes as the `Value` path does.
    #[test]
    fn every_one_byte_mutation_of_a_delta_reads_the_same_both_ways() {
        let base = r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"a\"b"}}"#;
        let mut checked = 0;
        for at in 0..base.len() {
            for b in *br#"{}[]",:01-.\ ntx"# {
                let mut bytes = base.as_bytes().to_vec();
                bytes[at] = b;
                let Ok(text) = String::from_utf8(bytes) else {
                    continue;
                };
                let (typed, typed_out) = fed(&[text.as_str()], true);
                let (value, value_out) = fed(&[text.as_str()], false);
                assert_eq!(typed, value, "{text}");
                assert_eq!(typed_out, value_out, "{text}");
                checked += 1;
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// Values no view field reads, but which the `Value` parse rejects (a lone surrogate, a
    /// number out of range, a byte that is not UTF-8, nesting past serde_json's limit), make
    /// both paths fail; their valid neighbours pass both.
    #[test]
    fn skipped_values_the_value_parse_rejects_fail_both_ways() {
        let base =
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#;
        let mut rejected = 0;
        for m in crate::dialect::testing::skipped_value_hazards(base) {
            if serde_json::from_slice::<Value>(&m).is_err() {
                let shown = String::from_utf8_lossy(&m);
                assert!(!Stream::default().delta_event(&m), "{shown}");
                rejected += 1;
            }
            if let Ok(text) = std::str::from_utf8(&m) {
                let (typed, typed_out) = fed(&[text], true);
                let (value, value_out) = fed(&[text], false);
                assert_eq!((typed, typed_out), (value, value_out), "{text}");
            }
        }
        assert!(rejected > 10, "{rejected}");
    }

    /// The compact reading takes the shape Anthropic streams deltas in, with escapes decoded,
    /// and leaves every other spelling of the same event to the typed view; both read it as
    /// the `Value` path does.
    #[test]
    fn the_compact_delta_takes_anthropics_shape_and_reads_what_the_value_path_reads() {
        let taken = [
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
                0,
                "text_delta",
                "text",
                "Hello",
            ),
            (
                r#"{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":" w\u00f6rld\n\"q\" \ud83d\ude00"}}"#,
                12,
                "text_delta",
                "text",
                " wörld\n\"q\" 😀",
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
                1,
                "thinking_delta",
                "thinking",
                "hmm",
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"c2ln"}}"#,
                1,
                "signature_delta",
                "signature",
                "c2ln",
            ),
            (
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
                2,
                "input_json_delta",
                "partial_json",
                "{\"a\":",
            ),
        ];
        for (data, index, kind, field, piece) in taken {
            let d = compact_delta(data.as_bytes()).expect(data);
            assert_eq!(
                (d.index, d.kind, d.field, &*d.piece),
                (index, kind, field, piece)
            );
        }
        let left = [
            // An escaped field name, whitespace, another order, a duplicate, a leading zero,
            // an index past the digits read here, a type that does not match its field.
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","te\u0078t":"X"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"X"}} "#,
            r#"{"type": "content_block_delta","index":0,"delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"index":0,"type":"content_block_delta","delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"X","text":"Y"}}"#,
            r#"{"type":"content_block_delta","index":00,"delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"type":"content_block_delta","index":1234567890,"delta":{"type":"text_delta","text":"X"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","thinking":"X"}}"#,
            // Not one string: a number, two members, bytes after the object's end, a
            // lone surrogate, a raw control byte.
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":7}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"X","a":"b"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"X"}},"a":{"b":"c"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ud800"}}"#,
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\u{1}b\"}}",
        ];
        for data in left {
            assert_eq!(compact_delta(data.as_bytes()), None, "{data}");
        }
        let all: Vec<&str> = taken.iter().map(|t| t.0).chain(left).collect();
        let (typed_turn, typed_out) = fed(&all, true);
        let (value_turn, value_out) = fed(&all, false);
        assert_eq!(typed_turn, value_turn);
        assert_eq!(typed_out, value_out);
        assert_eq!(typed_turn.text, "HelloXXXXYX");
    }

    /// Every one-byte change of a compact text delta is read the same way by the compact
    /// reading (or the typed view it leaves the event to) and the `Value` path.
    #[test]
    fn every_one_byte_mutation_of_a_compact_delta_reads_the_same_both_ways() {
        let base = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\nb"}}"#;
        assert!(compact_delta(base.as_bytes()).is_some());
        let (mut checked, mut compact) = (0, 0);
        for at in 0..base.len() {
            for b in *br#"{}[]",:01-.\ ntxu"# {
                let mut bytes = base.as_bytes().to_vec();
                bytes[at] = b;
                let Ok(text) = String::from_utf8(bytes) else {
                    continue;
                };
                compact += usize::from(compact_delta(text.as_bytes()).is_some());
                let (typed, typed_out) = fed(&[text.as_str()], true);
                let (value, value_out) = fed(&[text.as_str()], false);
                assert_eq!(typed, value, "{text}");
                assert_eq!(typed_out, value_out, "{text}");
                checked += 1;
            }
        }
        assert!(checked > 1000, "{checked}");
        assert!(compact > 50, "{compact}");
    }

    /// A `type` naming another event (here `message_delta`) is left to the `Value` path.
    #[test]
    fn a_delta_event_line_over_another_type_is_read_by_the_value_path() {
        let mut s = Stream::default();
        let data = br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}"#;
        assert!(!s.delta_event(data));
        let mut out = Observed::default();
        let ev = SseEvent {
            event: Some("content_block_delta"),
            data,
        };
        assert!(s.event(&ev, &mut out).is_ok());
        assert_eq!(out.usage.output_tokens, Some(12));
    }
}
