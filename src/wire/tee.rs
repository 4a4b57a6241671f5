//! The response tee: a copy of each chunk the client receives, decoded and framed, handed to
//! a [`Sink`]. Knows nothing of LLMs: what the events or the JSON body mean is the sink's
//! business. (The tee itself is built in the response-side work; this file fixes the sink
//! interface.)

use crate::wire::sse::SseEvent;
use crate::wire::stream::End;

/// Why a sink stopped observing a response (a parse error in the copy, an unexpected shape).
/// The tee stops feeding it and logs a warning; the client's bytes are never affected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SinkError(pub String);

/// What the tee feeds: the events of an event stream, or the whole body of a non-streaming
/// JSON response. Called synchronously inside the response body's poll: no I/O, no waiting.
pub(crate) trait Sink: Send {
    /// One complete event of a `text/event-stream` response, in order.
    fn on_event(&mut self, _event: &SseEvent<'_>) -> Result<(), SinkError> {
        Ok(())
    }
    /// The whole decoded body of a non-streaming response (only when it ended complete and
    /// within the tee's size cap).
    fn on_json(&mut self, _body: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
    /// The body ended (after every other call; exactly once, also when observing stopped).
    fn on_end(&mut self, _end: End) {}
}
