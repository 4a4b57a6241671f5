//! Server-sent events framing, with no knowledge of LLMs: bytes in, complete events out.
//! (The framer itself is built in the response-side work; this file fixes the event type
//! every consumer reads.)

/// One server-sent event as the framer dispatches it.
///
/// Shape (WHATWG HTML, "Server-sent events", event stream interpretation): `event` is the last
/// `event:` field of the event (`None` when absent: the default type `message`); `data` is the
/// event's `data:` lines joined with `\n`, without a trailing newline. Comment lines (`:` first)
/// and unknown fields are not part of it. `data` is the bytes as sent (not checked as UTF-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SseEvent<'a> {
    /// The `event:` field, if any.
    pub event: Option<&'a str>,
    /// The joined `data:` lines.
    pub data: &'a [u8],
}
