//! OpenAI Responses responses (`docs/usage.md#openai-responses`).
//!
//! Streamed: events whose data carries a `type`. `response.created` / `response.in_progress`
//! name the model; each `response.output_item.done` carries one output item whole (the
//! `added` copy may be incomplete, so it is not read); `response.completed` (and the terminal
//! `response.incomplete` / `response.failed`, which are billed alike) carries `response.usage`;
//! `error` and `response.failed` are errors. Non-streaming: the response object (`model`,
//! `output`, `usage`, `error`).
//!
//! The turn is the output items: `message` items' `output_text` parts (text), `function_call`
//! items (calls, by `call_id`), `reasoning` items (carriers, kept whole as received).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::anthropic::canonical_text;
use super::turn::{Call, CapturedTurn, Carrier};
use super::usage;
use super::{note_error, note_model, parse_json, str_field, Observed};
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// The state of one Responses response.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    /// `(output_index, item JSON as received)` from `response.output_item.done`.
    items: Vec<(u64, String)>,
    /// The terminal event's (or the body's) `output`, used when no item event came.
    final_output: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ItemDone<'a> {
    #[serde(borrow)]
    item: &'a RawValue,
}

#[derive(Deserialize)]
struct WithOutput<'a> {
    #[serde(borrow, default)]
    output: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Terminal<'a> {
    #[serde(borrow)]
    response: WithOutput<'a>,
}

/// Keep the response's `id` (the first one seen).
fn note_id(out: &mut Observed, id: Option<&str>) {
    if out.response_id.is_none() {
        out.response_id = id.filter(|i| !i.is_empty()).map(str::to_owned);
    }
}

/// The raw items of a response object's `output` (`None` when it is not a list).
fn raw_output(w: WithOutput<'_>) -> Option<Vec<String>> {
    w.output
        .map(|items| items.iter().map(|i| i.get().to_owned()).collect())
}

impl Stream {
    pub(super) fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(ev.data, "responses event")?;
        if let Some(n) = v.get("sequence_number").and_then(Value::as_u64) {
            out.sequence_number = Some(n);
        }
        let kind = str_field(&v, "type").or(ev.event).unwrap_or("");
        let response = v.get("response").unwrap_or(&Value::Null);
        match kind {
            "response.created" | "response.in_progress" => {
                note_model(out, str_field(response, "model"));
                note_id(out, str_field(response, "id"));
            }
            "response.output_item.done" => {
                let index = v.get("output_index").and_then(Value::as_u64);
                if let Ok(done) = serde_json::from_slice::<ItemDone<'_>>(ev.data) {
                    let index = index.unwrap_or(self.items.len() as u64);
                    self.items.push((index, done.item.get().to_owned()));
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                note_model(out, str_field(response, "model"));
                note_id(out, str_field(response, "id"));
                if let Some(u) = response.get("usage").and_then(usage::responses) {
                    out.usage = u;
                }
                if kind == "response.failed" {
                    note_error(out, response_error(response));
                }
                if let Ok(t) = serde_json::from_slice::<Terminal<'_>>(ev.data) {
                    self.final_output = raw_output(t.response);
                }
            }
            "error" => note_error(
                out,
                str_field(&v, "code").or_else(|| v.get("error").and_then(|e| str_field(e, "code"))),
            ),
            _ => {}
        }
        Ok(())
    }

    pub(super) fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(body, "responses body")?;
        if v.get("error").is_some_and(Value::is_object) {
            note_error(out, response_error(&v));
            if v.get("output").is_none() {
                return Ok(());
            }
        }
        note_model(out, str_field(&v, "model"));
        note_id(out, str_field(&v, "id"));
        if let Some(u) = v.get("usage").and_then(usage::responses) {
            out.usage = u;
        }
        if let Ok(w) = serde_json::from_slice::<WithOutput<'_>>(body) {
            self.final_output = raw_output(w);
        }
        Ok(())
    }

    /// Drop what the turn holds (past the size cap); usage is kept.
    pub(super) fn shed(&mut self) {
        *self = Self::default();
    }

    /// The turn seen: the streamed items in `output_index` order, else the final `output`.
    pub(super) fn turn(&mut self) -> CapturedTurn {
        let items: Vec<String> = if self.items.is_empty() {
            self.final_output.take().unwrap_or_default()
        } else {
            let mut items = std::mem::take(&mut self.items);
            items.sort_by_key(|(i, _)| *i);
            items.into_iter().map(|(_, raw)| raw).collect()
        };
        items_turn(&items)
    }
}

/// `error.code` of a response object (or `error.type`).
fn response_error(response: &Value) -> Option<&str> {
    let e = response.get("error")?;
    str_field(e, "code").or_else(|| str_field(e, "type"))
}

/// The turn of a list of output items, each as JSON text (as received, or as a client echoes
/// them as input items). Items that are not JSON objects, and item types other than
/// `message` (role assistant; `type` may be omitted, as in the SDK's easy input form),
/// `function_call` and `reasoning`, count for positions only.
pub(crate) fn items_turn(items: &[String]) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    for (position, raw) in items.iter().enumerate() {
        let Ok(item) = serde_json::from_str::<Value>(raw) else {
            continue;
        };
        let kind = str_field(&item, "type");
        match kind {
            Some("function_call") => turn.calls.push(Call {
                id: str_field(&item, "call_id").map(str::to_owned),
                name: str_field(&item, "name").unwrap_or("").to_owned(),
                arguments: canonical_text(str_field(&item, "arguments").unwrap_or("")),
            }),
            Some("reasoning") => turn.carriers.push(Carrier::ResponsesReasoning {
                position,
                id: str_field(&item, "id").map(str::to_owned),
                item: raw.clone(),
            }),
            Some("message") | None if str_field(&item, "role") == Some("assistant") => {
                match item.get("content") {
                    Some(Value::String(s)) => turn.text.push_str(s),
                    Some(Value::Array(parts)) => {
                        for p in parts {
                            if str_field(p, "type") == Some("output_text") {
                                turn.text.push_str(str_field(p, "text").unwrap_or(""));
                            }
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    turn
}
