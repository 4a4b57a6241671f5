//! The response side's observer (`docs/usage.md`): from the events of a streamed response,
//! or the JSON body of a non-streaming one, it reads the four usage numbers, the model the
//! response names, and the assistant turn with its reasoning carriers. What differs per
//! dialect is its reader ([`crate::dialect::observed::ResponseReader`], built by
//! [`crate::dialect::format::WireFormat::response_reader`]; each format's `response` module);
//! the rules below are this module's.
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
//! The fingerprint of a turn (what the restore side keys carriers by) is in
//! `crate::dialect::fingerprint`.

pub use crate::dialect::observed::Observed;

use crate::dialect::observed::ResponseReader;
use crate::dialect::Dialect;
use crate::wire::eventstream::{Message, MessageType};
use crate::wire::sse::SseEvent;
use crate::wire::stream::End;
use crate::wire::tee::{Sink, SinkError};

mod aws;

/// The observer of one response: the generic rules around its dialect's reader.
pub struct ResponseSink {
    reader: Box<dyn ResponseReader>,
    observed: Observed,
    /// An event or body could not be read: the turn is incomplete.
    failed: bool,
    /// The stream's own end marker went by (see [`ResponseSink::saw_end_marker`]).
    end_marker: bool,
    ended: bool,
    /// Event data fed so far, bytes.
    fed: usize,
}

/// The observer for a response of `dialect`.
pub fn observer(dialect: Dialect) -> ResponseSink {
    ResponseSink {
        reader: dialect.format().response_reader(),
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
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    /// The stream's own end marker went by: OpenAI Chat `data: [DONE]`, Anthropic
    /// `message_stop`, Responses `response.completed` / `response.incomplete` /
    /// `response.failed`. A client that leaves right after it (the official OpenAI SDK stops
    /// reading at `[DONE]`, before the body's last empty chunk) still had the whole
    /// response. Gemini streams have no marker.
    pub fn saw_end_marker(&self) -> bool {
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
        self.end_marker |= self.reader.is_end_marker(event);
        let r = self.reader.event(event, &mut self.observed);
        self.fed = self.fed.saturating_add(event.data.len());
        if self.fed > MAX_TURN_SOURCE_BYTES {
            self.reader.shed();
        }
        self.guard(r)
    }

    /// Amazon Bedrock's event streams. InvokeModelWithResponseStream: each `chunk` event
    /// carries one event of the model's own stream ([`aws::invoke_chunk`]), read as that
    /// event; other events are not read. ConverseStream (a reader that
    /// [reads AWS events](ResponseReader::reads_aws_events)): each event message is read as
    /// the event its `:event-type` names, its payload the data. An exception message is the
    /// response's error (its turn is not kept).
    fn on_aws_message(&mut self, message: &Message) -> Result<(), SinkError> {
        if self.ended || self.failed {
            return Ok(());
        }
        if matches!(
            message.message_type,
            Some(MessageType::Exception | MessageType::Error)
        ) {
            let kind = message.event_type.as_deref().unwrap_or("exception");
            self.observed.error.get_or_insert_with(|| kind.to_owned());
            return Ok(());
        }
        if self.reader.reads_aws_events() {
            if message.message_type != Some(MessageType::Event) {
                return Ok(());
            }
            return self.on_event(&SseEvent {
                event: message.event_type.as_deref(),
                data: &message.payload,
            });
        }
        match aws::invoke_chunk(message) {
            Ok(Some(event)) => self.on_event(&SseEvent {
                event: event.kind.as_deref(),
                data: &event.data,
            }),
            Ok(None) => Ok(()),
            Err(e) => self.guard(Err(e)),
        }
    }

    fn on_json(&mut self, body: &[u8]) -> Result<(), SinkError> {
        if self.ended || self.failed {
            return Ok(());
        }
        let r = self.reader.body(body, &mut self.observed);
        self.guard(r)
    }

    fn on_end(&mut self, end: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        let turn = self.reader.turn();
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

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
