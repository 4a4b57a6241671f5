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

use crate::dialect::anthropic::response::canonical_text;
use crate::dialect::lenient::{self, is_object, str_of, u64_of, ObjectOr};
use crate::dialect::observed::{
    note_error, note_model, parse_json, str_field, Observed, ResponseReader,
};
use crate::dialect::turn::{Call, CapturedTurn, Carrier};
use crate::dialect::usage::{self, Usage};
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
    google_thought(v.get("extra_content")?)
}

/// `google.thought_signature` of an `extra_content` value.
fn google_thought(extra: &Value) -> Option<&str> {
    extra.get("google")?.get("thought_signature")?.as_str()
}

/// One `tool_calls` entry of a streamed delta, however it was read: each part `None` when
/// absent or of another JSON type (`function` is `Some((None, None))` when present but not
/// an object, as `Value::get` reads it).
#[derive(Debug, Default)]
struct CallPiece<'d> {
    index: Option<u64>,
    id: Option<&'d str>,
    /// `function.name` and `function.arguments`.
    function: Option<(Option<&'d str>, Option<&'d str>)>,
    /// `extra_content.google.thought_signature`.
    signature: Option<&'d str>,
}

/// The `tool_calls` entry at `pos` of a typed delta, as [`Stream::delta`] reads the same
/// entry from a `Value`.
fn call_piece<'d>(tc: &'d ObjectOr<lenient::ChatToolCall<'_>>) -> CallPiece<'d> {
    let Some(tc) = tc.object() else {
        return CallPiece::default();
    };
    CallPiece {
        index: u64_of(&tc.index),
        id: str_of(&tc.id),
        function: tc.function.as_ref().map(|f| match f.object() {
            Some(f) => (str_of(&f.name), str_of(&f.arguments)),
            None => (None, None),
        }),
        signature: tc.extra_content.as_ref().and_then(google_thought),
    }
}

impl Stream {
    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        if ev.data.trim_ascii() == b"[DONE]" {
            return Ok(());
        }
        if self.chunk_view(ev.data, out) {
            return Ok(());
        }
        self.value_event(ev.data, out)
    }

    /// A chunk read through a `serde_json::Value` (every chunk the typed view does not take).
    fn value_event(&mut self, data: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(data, "openai chunk")?;
        if !common(&v, out) {
            return Ok(());
        }
        if let Some(delta) = choice0(&v).and_then(|c| c.get("delta")) {
            self.delta(delta);
        }
        Ok(())
    }

    /// A chunk read through the typed view ([`lenient::ChatChunk`]): `true` when it was read
    /// and applied, `false` when the `Value` path must read it (the view could not take it,
    /// or it carries an `error` or a `usage` object: what [`common`] reads, once a stream).
    fn chunk_view(&mut self, data: &[u8], out: &mut Observed) -> bool {
        let Some(chunk) = lenient::read::<lenient::ChatChunk<'_>>(data) else {
            return false;
        };
        if is_object(&chunk.error) || is_object(&chunk.usage) {
            return false;
        }
        // Choice 0 as [`choice0`] finds it: the first entry whose `index` is 0 or absent (an
        // entry that is not an object has no `index`).
        let choice = chunk
            .choices
            .as_ref()
            .and_then(|c| c.0.as_deref())
            .and_then(|list| {
                list.iter().find(|c| match c {
                    ObjectOr::Object(c) => c.index.as_ref().is_none_or(|i| i.as_u64() == Some(0)),
                    ObjectOr::Other => true,
                })
            })
            .and_then(ObjectOr::object);
        if choice.is_some_and(|c| is_object(&c.usage)) {
            return false;
        }
        note_model(out, str_of(&chunk.model));
        if let Some(d) = choice
            .and_then(|c| c.delta.as_ref())
            .and_then(ObjectOr::object)
        {
            self.fragments(
                str_of(&d.content),
                str_of(&d.reasoning_content),
                str_of(&d.reasoning),
            );
            self.details(d.reasoning_details.as_ref());
            self.signature(d.extra_content.as_ref().and_then(google_thought));
            if let Some(calls) = d.tool_calls.as_ref().and_then(|c| c.0.as_deref()) {
                for (pos, tc) in calls.iter().enumerate() {
                    self.call(pos, call_piece(tc));
                }
            }
        }
        true
    }

    /// Choice 0's `delta` of a chunk read through a `Value`.
    fn delta(&mut self, delta: &Value) {
        self.fragments(
            str_field(delta, "content"),
            str_field(delta, "reasoning_content"),
            str_field(delta, "reasoning"),
        );
        self.details(delta.get("reasoning_details"));
        self.signature(google_signature(delta));
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, tc) in calls.iter().enumerate() {
                let piece = CallPiece {
                    index: tc.get("index").and_then(Value::as_u64),
                    id: str_field(tc, "id"),
                    function: tc
                        .get("function")
                        .map(|f| (str_field(f, "name"), str_field(f, "arguments"))),
                    signature: google_signature(tc),
                };
                self.call(pos, piece);
            }
        }
    }

    /// A delta's text fragments: `content`, `reasoning_content`, `reasoning`.
    fn fragments(&mut self, content: Option<&str>, rc: Option<&str>, reasoning: Option<&str>) {
        if let Some(t) = content {
            self.text.push_str(t);
        }
        if let Some(t) = rc {
            self.reasoning_content.push_str(t);
        }
        if let Some(t) = reasoning {
            self.reasoning.push_str(t);
        }
    }

    /// A delta's `reasoning_details` (its object entries, when it is a list).
    fn details(&mut self, details: Option<&Value>) {
        if let Some(entries) = details.and_then(Value::as_array) {
            for e in entries.iter().filter_map(Value::as_object) {
                merge_detail(&mut self.details, &mut self.detail_at, e);
            }
        }
    }

    /// A delta's `extra_content.google.thought_signature` (the last one wins).
    fn signature(&mut self, signature: Option<&str>) {
        if let Some(s) = signature {
            self.message_signature = Some(s.to_owned());
        }
    }

    /// One `tool_calls` entry (at `pos` in its list), merged into the call with its `index`.
    fn call(&mut self, pos: usize, piece: CallPiece<'_>) {
        let index = piece.index.unwrap_or(pos as u64);
        let acc = self.calls.entry(index).or_default();
        if acc.id.is_none() {
            acc.id = piece.id.filter(|s| !s.is_empty()).map(str::to_owned);
        }
        if let Some((name, arguments)) = piece.function {
            if acc.name.is_empty() {
                acc.name = name.unwrap_or("").to_owned();
            }
            if let Some(a) = arguments {
                acc.arguments.push_str(a);
            }
        }
        if let Some(s) = piece.signature {
            acc.signature = Some(s.to_owned());
        }
    }

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
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
    fn shed(&mut self) {
        *self = Self::default();
    }

    /// The turn seen: the body's, or the streamed deltas assembled (carriers in the order
    /// `reasoning_content`, `reasoning`, `reasoning_details` entries, message signature, tool
    /// call signatures — the order [`message_turn`] reads them in).
    fn turn(&mut self) -> CapturedTurn {
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

impl ResponseReader for Stream {
    fn is_end_marker(&self, ev: &SseEvent<'_>) -> bool {
        ev.data.trim_ascii() == b"[DONE]"
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::testing::{fixture, one_byte_mutations, skipped_value_hazards, split_sse};

    /// One stream fed `chunks` in order: through [`Stream::event`] (the typed view first) or
    /// the `Value` path alone. Per chunk whether it was read without error, then the turn
    /// and what was observed.
    fn fed(chunks: &[&[u8]], typed: bool) -> (Vec<bool>, CapturedTurn, Observed) {
        let mut s = Stream::default();
        let mut out = Observed::default();
        let mut ok = Vec::new();
        for data in chunks {
            let ev = SseEvent { event: None, data };
            let r = if typed {
                s.event(&ev, &mut out)
            } else if data.trim_ascii() == b"[DONE]" {
                Ok(())
            } else {
                s.value_event(data, &mut out)
            };
            ok.push(r.is_ok());
        }
        (ok, s.turn(), out)
    }

    fn same_both_ways(chunks: &[&[u8]]) {
        let typed = fed(chunks, true);
        let value = fed(chunks, false);
        let shown: Vec<_> = chunks.iter().map(|c| String::from_utf8_lossy(c)).collect();
        assert_eq!(typed, value, "{shown:?}");
    }

    const TEXT: &[u8] = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"Hi \"there\"","reasoning_content":"r"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Xq"}"#;
    const CALL: &[u8] = br#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":"},"extra_content":{"google":{"thought_signature":"sig"}}}]}}]}"#;
    const REASONING: &[u8] = br#"{"choices":[{"index":0,"delta":{"reasoning":"think","reasoning_details":[{"type":"reasoning.text","text":"t","index":0}],"extra_content":{"google":{"thought_signature":"s"}}}}]}"#;

    /// Every recorded Chat stream (OpenAI, DeepSeek, OpenRouter, Gemini's OpenAI endpoint)
    /// reads the same through the typed view as through the `Value` path.
    #[test]
    fn recorded_streams_read_the_same_both_ways() {
        for name in [
            "chat_tool_usage.sse",
            "chat_no_include_usage.sse",
            "chat_usage_null.sse",
            "deepseek_reasoning.sse",
            "gemini_openai_compat.sse",
            "openrouter_reasoning.sse",
        ] {
            let events = split_sse(&fixture(name));
            let chunks: Vec<&[u8]> = events.iter().map(|(_, d)| d.as_slice()).collect();
            assert!(chunks.len() > 2, "{name}");
            same_both_ways(&chunks);
        }
    }

    /// Odd shapes (wrong types, nulls, choices out of order, errors and usage) read the same.
    #[test]
    fn odd_chunks_read_the_same_both_ways() {
        let chunks: [&[u8]; 27] = [
            TEXT,
            CALL,
            REASONING,
            br#"{"choices":[{"index":1,"delta":{"content":"not 0"}},{"delta":{"content":"no index"}}]}"#,
            br#"{"choices":[{"index":null,"delta":{"content":"null index"}},{"index":0,"delta":{"content":"A"}}]}"#,
            br#"{"choices":["x",{"index":0,"delta":{"content":"after a string"}}]}"#,
            br#"{"choices":[{"index":"0","delta":{"content":"string index"}}]}"#,
            br#"{"choices":[{"index":0.0,"delta":{"content":"float index"}}]}"#,
            br#"{"choices":{"index":0,"delta":{"content":"object choices"}}}"#,
            br#"{"choices":[{"index":0,"delta":"text"}]}"#,
            br#"{"choices":[{"index":0,"delta":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":7,"reasoning":null,"reasoning_content":["x"]}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"tool_calls":[null,"x",{"function":null},{"function":"f"},{"index":-1,"id":"","function":{"name":7,"arguments":"x"}}]}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"tool_calls":{"index":0}}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"g","arguments":"1}"}}]}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","text":"u","index":0},7,{"index":1,"summary":"s"}]}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"reasoning_details":{"index":0}}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"extra_content":{"google":{"thought_signature":7}}}}]}"#,
            br#"{"model":"","choices":[]}"#,
            br#"{"model":7,"choices":null}"#,
            br#"{"model":"second","choices":[{"index":0,"delta":{"content":"B"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            br#"{"choices":[{"index":0,"delta":{"content":"C"},"usage":{"prompt_tokens":5}}],"usage":null}"#,
            br#"{"error":"not an object","choices":[{"index":0,"delta":{"content":"D"}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":"E","content":"F"}}]}"#,
            br#"[{"choices":[]}]"#,
            br#"not json"#,
            b"[DONE]",
        ];
        same_both_ways(&chunks);
        let typed = fed(&chunks, true);
        assert!(typed.1.text.contains("Hi \"there\""), "{:?}", typed.1.text);
        assert_eq!(typed.2.response_model.as_deref(), Some("gpt-x"));
        // An error chunk ends what is read; both ways alike.
        same_both_ways(&[TEXT, br#"{"error":{"type":"server_error"}}"#, CALL]);
    }

    /// Every one-byte change of each sample chunk reads the same both ways, after the other
    /// samples (so merges into existing calls and details are compared too).
    #[test]
    fn every_one_byte_mutation_reads_the_same_both_ways() {
        let mut checked = 0;
        for base in [TEXT, CALL, REASONING] {
            for m in one_byte_mutations(base) {
                same_both_ways(&[CALL, REASONING, &m]);
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// Values no view field reads, but which the `Value` parse rejects, make both ways fail.
    #[test]
    fn skipped_values_the_value_parse_rejects_fail_both_ways() {
        let mut rejected = 0;
        for base in [TEXT, CALL, REASONING] {
            for m in skipped_value_hazards(base) {
                same_both_ways(&[&m]);
                rejected += usize::from(serde_json::from_slice::<Value>(&m).is_err());
            }
        }
        assert!(rejected > 50, "{rejected}");
    }

    /// The hot chunk is read by the view, not the `Value` path.
    #[test]
    fn a_content_delta_is_read_by_the_view() {
        let mut s = Stream::default();
        let mut out = Observed::default();
        assert!(s.chunk_view(TEXT, &mut out));
        assert!(s.chunk_view(CALL, &mut out));
        assert!(!s.chunk_view(br#"{"choices":[],"usage":{"prompt_tokens":1}}"#, &mut out));
        assert_eq!(s.text, "Hi \"there\"");
    }
}
