//! What a response observer reads (`docs/usage.md`): [`Observed`], filled by one
//! [`ResponseReader`] per response, built by the wire format
//! ([`super::format::WireFormat::response_reader`]) and driven by the tee's sink
//! (`crate::response::ResponseSink`), with the helpers the readers share.

use serde_json::Value;

use super::turn::CapturedTurn;
use super::usage::Usage;
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// What an observer saw in one response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The four usage numbers (each `None` when not reported).
    pub usage: Usage,
    /// How many reasoning carriers the response carried (the captured turn's carriers, also
    /// counted when the turn itself is dropped as incomplete; not counted past
    /// `crate::response::MAX_TURN_SOURCE_BYTES`).
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

/// One dialect's reader of one response: fed its events (a stream) or its whole JSON body,
/// it writes what it reads into an [`Observed`] and holds the turn until [`Self::turn`].
/// Rules shared by every dialect are the sink's (`crate::response`): each event is parsed,
/// used and dropped; a field of the wrong type is "not reported", never an error; data that
/// is not JSON is a [`SinkError`].
pub trait ResponseReader: Send {
    /// Whether `event` is the stream's own end marker (OpenAI Chat `data: [DONE]`, Anthropic
    /// `message_stop`, Responses `response.completed` / `response.incomplete` /
    /// `response.failed`; Gemini streams have none).
    fn is_end_marker(&self, event: &SseEvent<'_>) -> bool;
    /// Read one event of a stream (its data not empty).
    fn event(&mut self, event: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError>;
    /// Read a whole non-streaming JSON body.
    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError>;
    /// Drop the turn read so far and keep no more of it (the response passed the most event
    /// data a turn is captured from); usage is still read.
    fn shed(&mut self);
    /// The turn read (choice / candidate 0), taken; empty when none.
    fn turn(&mut self) -> CapturedTurn;
    /// Whether each event message of an AWS event stream is itself one of this format's
    /// events (Bedrock ConverseStream: the JSON payload, named by `:event-type`), rather than a
    /// `chunk` wrapping an event of the model's own stream (InvokeModelWithResponseStream,
    /// the default).
    fn reads_aws_events(&self) -> bool {
        false
    }
}

/// `data` as JSON; a [`SinkError`] naming `what` when it is not (the message carries the
/// parser's position only, never response content). UTF-8 is checked once for the whole of
/// `data`, then it is read as text (as [`super::lenient::read`]); data that is not UTF-8 is read as
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
pub(crate) fn note_model(out: &mut Observed, model: Option<&str>) {
    if out.response_model.is_none() {
        if let Some(m) = model.filter(|m| !m.is_empty()) {
            out.response_model = Some(m.to_owned());
        }
    }
}

/// Record an error the response carried (the first one wins).
pub(crate) fn note_error(out: &mut Observed, code: Option<&str>) {
    if out.error.is_none() {
        out.error = Some(code.filter(|c| !c.is_empty()).unwrap_or("error").to_owned());
    }
}
