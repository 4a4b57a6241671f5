//! Gemini `generateContent` / `streamGenerateContent` responses
//! (`docs/usage.md#gemini`).
//!
//! Streamed (`?alt=sse`): each event's data is one `GenerateContentResponse`; there is no end
//! marker. `streamGenerateContent` without `alt=sse` answers one JSON array of them, and
//! `generateContent` one object: both come as a body. Per response: `modelVersion`,
//! `usageMetadata` (the last one wins: chunks repeat running totals), candidate 0's
//! `content.parts`, or an `error` object.

use serde_json::Value;

use crate::dialect::canonical::canonical;
use crate::dialect::observed::{
    note_error, note_model, parse_json, str_field, Observed, ResponseReader,
};
use crate::dialect::turn::{Call, CapturedTurn, Carrier, PartRef};
use crate::dialect::usage;
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// The state of one Gemini response.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    turn: CapturedTurn,
}

impl Stream {
    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(ev.data, "gemini event")?;
        self.chunk(&v, out);
        Ok(())
    }

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        match parse_json(body, "gemini response body")? {
            Value::Array(chunks) => chunks.iter().for_each(|c| self.chunk(c, out)),
            v => self.chunk(&v, out),
        }
        Ok(())
    }

    fn chunk(&mut self, v: &Value, out: &mut Observed) {
        if let Some(e) = v.get("error").filter(|e| e.is_object()) {
            note_error(out, str_field(e, "status"));
            return;
        }
        note_model(out, str_field(v, "modelVersion"));
        if let Some(u) = v.get("usageMetadata").and_then(usage::gemini) {
            out.usage = u;
        }
        let candidate = v
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter().find(|c| {
                    c.get("index")
                        .map(|i| i.as_u64() == Some(0))
                        .unwrap_or(true)
                })
            });
        if let Some(parts) = candidate
            .and_then(|c| c.get("content"))
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array)
        {
            parts.iter().for_each(|p| add_part(&mut self.turn, p));
        }
    }

    /// Drop what the turn holds (past the size cap); usage is kept.
    fn shed(&mut self) {
        *self = Self::default();
    }

    fn turn(&mut self) -> CapturedTurn {
        std::mem::take(&mut self.turn)
    }
}

impl ResponseReader for Stream {
    fn is_end_marker(&self, _: &SseEvent<'_>) -> bool {
        false
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

/// One part into the turn: a `functionCall` is a call; non-thought `text` is text; a
/// `thoughtSignature` (or `thought_signature`) is a carrier on the part's call, else on the
/// first call when that call has none yet (a signature streamed after its call), else on the
/// text.
fn add_part(turn: &mut CapturedTurn, part: &Value) {
    let signature = str_field(part, "thoughtSignature")
        .or_else(|| str_field(part, "thought_signature"))
        .filter(|s| !s.is_empty());
    let call = part
        .get("functionCall")
        .or_else(|| part.get("function_call"))
        .filter(|c| c.is_object());
    let on = if let Some(c) = call {
        turn.calls.push(Call {
            id: str_field(c, "id").map(str::to_owned),
            name: str_field(c, "name").unwrap_or("").to_owned(),
            arguments: canonical(c.get("args").unwrap_or(&Value::Null)),
        });
        PartRef::Call(turn.calls.len() - 1)
    } else {
        if part.get("thought").and_then(Value::as_bool) != Some(true) {
            if let Some(t) = str_field(part, "text") {
                turn.text.push_str(t);
            }
        }
        let first_signed = turn.carriers.iter().any(|c| {
            matches!(
                c,
                Carrier::GeminiSignature {
                    on: PartRef::Call(0),
                    ..
                }
            )
        });
        if turn.calls.is_empty() || first_signed {
            PartRef::Text
        } else {
            PartRef::Call(0)
        }
    };
    if let Some(s) = signature {
        turn.carriers.push(Carrier::GeminiSignature {
            on,
            signature: s.to_owned(),
        });
    }
}

/// The turn of a model content (`{"role":"model","parts":[…]}`) a client echoes.
pub(crate) fn content_turn(content: &Value) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    if let Some(parts) = content.get("parts").and_then(Value::as_array) {
        parts.iter().for_each(|p| add_part(&mut turn, p));
    }
    turn
}
