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

use crate::dialect::anthropic::response::canonical_text;
use crate::dialect::lenient::{self, str_of, u64_of};
use crate::dialect::observed::{
    note_error, note_model, parse_json, str_field, Observed, ResponseReader,
};
use crate::dialect::turn::{Call, CapturedTurn, Carrier};
use crate::dialect::usage;
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
    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        if !ev.event.is_some_and(acts_on) && event_view(ev, out) {
            return Ok(());
        }
        self.value_event(ev, out)
    }

    /// An event read through a `serde_json::Value` (the events [`acts_on`] names, and every
    /// event the typed view does not take).
    fn value_event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
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

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
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
    fn shed(&mut self) {
        *self = Self::default();
    }

    /// The turn seen: the streamed items in `output_index` order, else the final `output`.
    fn turn(&mut self) -> CapturedTurn {
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

impl ResponseReader for Stream {
    fn is_end_marker(&self, ev: &SseEvent<'_>) -> bool {
        matches!(
            ev.event,
            Some("response.completed" | "response.incomplete" | "response.failed")
        )
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

/// The event types the observer reads more of than `sequence_number` (the `match` of
/// [`Stream::value_event`]); every other type (`response.output_text.delta`,
/// `response.output_item.added`, …) is read through [`event_view`].
fn acts_on(kind: &str) -> bool {
    matches!(
        kind,
        "response.created"
            | "response.in_progress"
            | "response.output_item.done"
            | "response.completed"
            | "response.incomplete"
            | "response.failed"
            | "error"
    )
}

/// An event the observer takes only its `sequence_number` from, read through the typed view
/// ([`lenient::ResponsesEvent`]): `true` when it was one and is applied, `false` when the
/// `Value` path must read it (the view could not take it, or its type is one [`acts_on`]).
fn event_view(ev: &SseEvent<'_>, out: &mut Observed) -> bool {
    let Some(view) = lenient::read::<lenient::ResponsesEvent<'_>>(ev.data) else {
        return false;
    };
    if acts_on(str_of(&view.kind).or(ev.event).unwrap_or("")) {
        return false;
    }
    if let Some(n) = u64_of(&view.sequence_number) {
        out.sequence_number = Some(n);
    }
    true
}

/// `error.code` of a response object (or `error.type`).
fn response_error(response: &Value) -> Option<&str> {
    let e = response.get("error")?;
    str_field(e, "code").or_else(|| str_field(e, "type"))
}

/// The turn of a list of output items, each as JSON text (as received, or as a client echoes
/// them as input items). Items that are not JSON objects, and item types other than
/// `message` (role assistant; `type` may be omitted, as in the SDK's easy input form),
/// `function_call` and `reasoning`, count for positions only. The items' `id`s, in order,
/// are [`CapturedTurn::item_ids`] when every item has one.
pub(crate) fn items_turn<S: AsRef<str>>(items: &[S]) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    let mut ids = Some(Vec::with_capacity(items.len()));
    for (position, raw) in items.iter().enumerate() {
        let Ok(item) = serde_json::from_str::<Value>(raw.as_ref()) else {
            ids = None;
            continue;
        };
        match (
            ids.as_mut(),
            str_field(&item, "id").filter(|i| !i.is_empty()),
        ) {
            (Some(ids), Some(id)) => ids.push(id.to_owned()),
            _ => ids = None,
        }
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
                item: raw.as_ref().to_owned(),
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
    turn.item_ids = ids.unwrap_or_default();
    turn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::testing::{fixture, one_byte_mutations, skipped_value_hazards, split_sse};

    /// One stream fed `events` in order: through [`Stream::event`] (the typed view first) or
    /// the `Value` path alone. Per event whether it was read without error, then the turn
    /// and what was observed.
    fn fed(events: &[(Option<&str>, &[u8])], typed: bool) -> (Vec<bool>, CapturedTurn, Observed) {
        let mut s = Stream::default();
        let mut out = Observed::default();
        let mut ok = Vec::new();
        for &(event, data) in events {
            let ev = SseEvent { event, data };
            let r = if typed {
                s.event(&ev, &mut out)
            } else {
                s.value_event(&ev, &mut out)
            };
            ok.push(r.is_ok());
        }
        (ok, s.turn(), out)
    }

    fn same_both_ways(events: &[(Option<&str>, &[u8])]) {
        let typed = fed(events, true);
        let value = fed(events, false);
        let shown: Vec<_> = events
            .iter()
            .map(|(e, d)| (e, String::from_utf8_lossy(d)))
            .collect();
        assert_eq!(typed, value, "{shown:?}");
    }

    const DELTA: &[u8] = br#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hi \"x\"","logprobs":[],"obfuscation":"ab"}"#;
    const CREATED: &[u8] = br#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"gpt-x","output":[]}}"#;

    #[test]
    fn the_recorded_stream_reads_the_same_both_ways() {
        let events = split_sse(&fixture("responses_reasoning_tool.sse"));
        let named: Vec<(Option<&str>, &[u8])> = events
            .iter()
            .map(|(n, d)| (n.as_deref(), d.as_slice()))
            .collect();
        same_both_ways(&named);
        // The same without `event:` lines (the type read from the data alone).
        let unnamed: Vec<(Option<&str>, &[u8])> = named.iter().map(|&(_, d)| (None, d)).collect();
        same_both_ways(&unnamed);
        assert!(fed(&named, true).1 == fed(&unnamed, true).1);
    }

    /// Odd shapes read the same: a `type` naming an event the observer acts on under another
    /// event name, a missing or mistyped `type` or `sequence_number`, not an object.
    #[test]
    fn odd_events_read_the_same_both_ways() {
        let delta = Some("response.output_text.delta");
        let events: [(Option<&str>, &[u8]); 13] = [
            (delta, DELTA),
            (None, DELTA),
            (delta, CREATED),
            (None, CREATED),
            (Some("response.created"), DELTA),
            (
                delta,
                br#"{"type":"error","sequence_number":9,"code":"server_error"}"#,
            ),
            (delta, br#"{"sequence_number":10}"#),
            (Some("error"), br#"{"sequence_number":11,"code":"e2"}"#),
            (delta, br#"{"type":7,"sequence_number":-1}"#),
            (
                delta,
                br#"{"type":"x","sequence_number":12,"sequence_number":13}"#,
            ),
            (delta, br#"[1,2]"#),
            (delta, br#"{"type":"x","sequence_number":1.5}"#),
            (delta, b"not json"),
        ];
        same_both_ways(&events);
        let (_, _, out) = fed(&events[..2], true);
        assert_eq!(out.sequence_number, Some(7));
    }

    #[test]
    fn every_one_byte_mutation_reads_the_same_both_ways() {
        let mut checked = 0;
        for base in [DELTA, CREATED] {
            for m in one_byte_mutations(base) {
                for event in [None, Some("response.output_text.delta")] {
                    same_both_ways(&[(None, CREATED), (event, &m)]);
                    checked += 1;
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn skipped_values_the_value_parse_rejects_fail_both_ways() {
        for m in skipped_value_hazards(DELTA) {
            same_both_ways(&[(Some("response.output_text.delta"), &m)]);
        }
    }

    /// Only the events the observer acts on go to the `Value` path.
    #[test]
    fn a_text_delta_is_read_by_the_view() {
        let mut out = Observed::default();
        let ev = |event, data| SseEvent { event, data };
        assert!(event_view(&ev(None, DELTA), &mut out));
        assert_eq!(out.sequence_number, Some(7));
        assert!(!event_view(&ev(None, CREATED), &mut out));
        assert!(!event_view(
            &ev(Some("error"), br#"{"code":"x"}"#),
            &mut out
        ));
    }
}
