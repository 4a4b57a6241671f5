//! The response side's per-dialect observers (`docs/usage.md`): from the events of a streamed
//! response, or the JSON body of a non-streaming one, they read the four usage numbers, the
//! model the response names, and the assistant turn with its reasoning carriers.
//!
//! [`observer`] builds one [`ResponseSink`] per response; the tee
//! ([`crate::wire::tee`]) feeds it events ([`Sink::on_event`]) or the whole body
//! ([`Sink::on_json`]), then [`Sink::on_end`]; after that [`ResponseSink::observed`] holds what
//! was seen. The sinks do no I/O and hold no lock; memory grows with the turn's text, calls and
//! carriers only (each event is parsed, used and dropped), from at most
//! [`MAX_TURN_SOURCE_BYTES`] of event data.
//!
//! Rules, shared by every dialect:
//! - An event whose data is empty (or only whitespace) is skipped; OpenAI's `data: [DONE]` is
//!   the end marker; events of a type a dialect does not read (`ping`, unknown types) are
//!   ignored. Data that is not JSON (or not UTF-8) is a [`SinkError`]: the tee stops feeding
//!   this sink.
//! - Fields of the wrong type, or missing, are "not reported" (never an error, never a panic).
//! - Usage is kept whatever happens after it (a response that broke after `message_start`
//!   still reports its input figures). The turn ([`Observed::turn`]) is kept only for a
//!   response that ended complete ([`End::Complete`]), with no error event or error body and
//!   no observing error: a half turn is never a carrier to restore.
//!
//! The fingerprint of a turn (what the restore side keys carriers by) is in [`fingerprint`].

pub(crate) mod anthropic;
pub(crate) mod chat;
pub(crate) mod fingerprint;
pub(crate) mod gemini;
pub(crate) mod responses;
// moved: re-export until issue 28's merge
pub(crate) use crate::dialect::{lenient, turn, usage};

pub(crate) use turn::CapturedTurn;
pub(crate) use usage::Usage;

use serde_json::Value;

use crate::dialect::Dialect;
use crate::wire::sse::SseEvent;
use crate::wire::stream::End;
use crate::wire::tee::{Sink, SinkError};

/// What an observer saw in one response.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Observed {
    /// The four usage numbers (each `None` when not reported).
    pub usage: Usage,
    /// How many reasoning carriers the response carried (the captured turn's carriers, also
    /// counted when the turn itself is dropped as incomplete; not counted past
    /// [`MAX_TURN_SOURCE_BYTES`]).
    pub reasoning_seen: u32,
    /// The assistant turn (choice / candidate 0), when the response ended complete.
    pub turn: Option<CapturedTurn>,
    /// The model the response names (Anthropic `model`, Chat `model`, Responses
    /// `response.model`, Gemini `modelVersion`): may be a dated alias of the requested one.
    pub response_model: Option<String>,
    /// The provider's error code when the response carried an error (an Anthropic
    /// `event: error`, an OpenAI `{"error":…}` chunk, a Responses `error` / `response.failed`
    /// event, a Gemini `{"error":…}` body): its `type` / `code` / `status`, or `"error"`.
    pub error: Option<String>,
    /// The last `sequence_number` a Responses stream carried, so an error event the proxy
    /// appends when the stream breaks continues the numbering.
    pub sequence_number: Option<u64>,
    /// The response's `id` (OpenAI Responses only): what a later request's
    /// `previous_response_id` names, so the two are one session.
    pub response_id: Option<String>,
}

/// The observer of one response, per dialect.
pub struct ResponseSink {
    state: State,
    observed: Observed,
    /// An event or body could not be read: the turn is incomplete.
    failed: bool,
    /// The stream's own end marker went by (see [`ResponseSink::saw_end_marker`]).
    end_marker: bool,
    ended: bool,
    /// Event data fed so far, bytes.
    fed: usize,
}

enum State {
    Anthropic(anthropic::Stream),
    Chat(chat::Stream),
    Responses(responses::Stream),
    Gemini(gemini::Stream),
}

/// The observer for a response of `dialect`.
pub fn observer(dialect: Dialect) -> ResponseSink {
    let state = match dialect {
        Dialect::Anthropic => State::Anthropic(anthropic::Stream::default()),
        Dialect::Openai => State::Chat(chat::Stream::default()),
        Dialect::OpenaiResponses => State::Responses(responses::Stream::default()),
        Dialect::Gemini => State::Gemini(gemini::Stream::default()),
    };
    ResponseSink {
        state,
        observed: Observed::default(),
        failed: false,
        end_marker: false,
        ended: false,
        fed: 0,
    }
}

/// The most event data, bytes, a turn is captured from: the tee's cap on a non-streaming body
/// ([`crate::wire::tee::MAX_JSON_BYTES`]), so a streamed turn is held within the same bound.
/// Past it, usage is still read, but the turn is no longer kept (memory stays bounded by one
/// event), and [`Observed::turn`] is `None`.
pub(crate) const MAX_TURN_SOURCE_BYTES: usize = crate::wire::tee::MAX_JSON_BYTES;

impl ResponseSink {
    /// What was seen; complete after [`Sink::on_end`] (before it, the usage so far and no
    /// turn).
    pub(crate) fn observed(&self) -> &Observed {
        &self.observed
    }

    /// The stream's own end marker went by: OpenAI Chat `data: [DONE]`, Anthropic
    /// `message_stop`, Responses `response.completed` / `response.incomplete` /
    /// `response.failed`. A client that leaves right after it (the official OpenAI SDK stops
    /// reading at `[DONE]`, before the body's last empty chunk) still had the whole
    /// response. Gemini streams have no marker.
    pub(crate) fn saw_end_marker(&self) -> bool {
        self.end_marker
    }

    fn guard(&mut self, r: Result<(), SinkError>) -> Result<(), SinkError> {
        if r.is_err() {
            self.failed = true;
        }
        r
    }
}

impl Sink for ResponseSink {
    fn on_event(&mut self, event: &SseEvent<'_>) -> Result<(), SinkError> {
        if self.ended || self.failed || event.data.trim_ascii().is_empty() {
            return Ok(());
        }
        self.end_marker |= match &self.state {
            State::Chat(_) => event.data.trim_ascii() == b"[DONE]",
            State::Anthropic(_) => event.event == Some("message_stop"),
            State::Responses(_) => matches!(
                event.event,
                Some("response.completed" | "response.incomplete" | "response.failed")
            ),
            State::Gemini(_) => false,
        };
        let out = &mut self.observed;
        let r = match &mut self.state {
            State::Anthropic(s) => s.event(event, out),
            State::Chat(s) => s.event(event, out),
            State::Responses(s) => s.event(event, out),
            State::Gemini(s) => s.event(event, out),
        };
        self.fed = self.fed.saturating_add(event.data.len());
        if self.fed > MAX_TURN_SOURCE_BYTES {
            match &mut self.state {
                State::Anthropic(s) => s.shed(),
                State::Chat(s) => s.shed(),
                State::Responses(s) => s.shed(),
                State::Gemini(s) => s.shed(),
            }
        }
        self.guard(r)
    }

    fn on_json(&mut self, body: &[u8]) -> Result<(), SinkError> {
        if self.ended || self.failed {
            return Ok(());
        }
        let out = &mut self.observed;
        let r = match &mut self.state {
            State::Anthropic(s) => s.body(body, out),
            State::Chat(s) => s.body(body, out),
            State::Responses(s) => s.body(body, out),
            State::Gemini(s) => s.body(body, out),
        };
        self.guard(r)
    }

    fn on_end(&mut self, end: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        let turn = match &mut self.state {
            State::Anthropic(s) => s.turn(),
            State::Chat(s) => s.turn(),
            State::Responses(s) => s.turn(),
            State::Gemini(s) => s.turn(),
        };
        let out = &mut self.observed;
        out.reasoning_seen = u32::try_from(turn.carriers.len()).unwrap_or(u32::MAX);
        let complete = end == End::Complete
            && !self.failed
            && out.error.is_none()
            && self.fed <= MAX_TURN_SOURCE_BYTES;
        out.turn = (complete && !turn.is_empty()).then_some(turn);
    }
}

/// Observe a whole recorded event stream at once (replays, benchmarks): every event in order,
/// stopping at the first observing error, then the end. The result is what a sink fed by the
/// tee would hold.
#[cfg(test)]
pub(crate) fn observe_events<'a>(
    dialect: Dialect,
    events: impl IntoIterator<Item = SseEvent<'a>>,
    end: End,
) -> Observed {
    let mut sink = observer(dialect);
    for ev in events {
        if sink.on_event(&ev).is_err() {
            break;
        }
    }
    sink.on_end(end);
    sink.observed
}

/// Observe a whole non-streaming body at once (replays, benchmarks).
#[cfg(test)]
pub(crate) fn observe_body(dialect: Dialect, body: &[u8], end: End) -> Observed {
    let mut sink = observer(dialect);
    let _ = sink.on_json(body);
    sink.on_end(end);
    sink.observed
}

/// `data` as JSON; a [`SinkError`] naming `what` when it is not (the message carries the
/// parser's position only, never response content). UTF-8 is checked once for the whole of
/// `data`, then it is read as text (as [`lenient::read`]); data that is not UTF-8 is read as
/// bytes, for serde_json's own error.
pub(crate) fn parse_json(data: &[u8], what: &str) -> Result<Value, SinkError> {
    match std::str::from_utf8(data) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(data),
    }
    .map_err(|e| SinkError(format!("{what} is not JSON: {e}")))
}

/// A string field of `v`, when it is a string.
pub(crate) fn str_field<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// Record the first model name a response gives.
fn note_model(out: &mut Observed, model: Option<&str>) {
    if out.response_model.is_none() {
        if let Some(m) = model.filter(|m| !m.is_empty()) {
            out.response_model = Some(m.to_owned());
        }
    }
}

/// Record an error the response carried (the first one wins).
fn note_error(out: &mut Observed, code: Option<&str>) {
    if out.error.is_none() {
        out.error = Some(code.filter(|c| !c.is_empty()).unwrap_or("error").to_owned());
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
