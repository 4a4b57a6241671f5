//! AWS event-stream framing (`application/vnd.amazon.eventstream`), with no knowledge of LLMs:
//! bytes in, in any split, decoded messages out. Amazon Bedrock streams its responses
//! (ConverseStream, InvokeModelWithResponseStream) in this encoding; the proxy passes those
//! bytes through untouched and an observer reads a decoded copy through a [`Decoder`].
//!
//! # The frame format
//!
//! Source: the Smithy "Amazon Event Stream Specification"
//! (<https://smithy.io/2.0/aws/amazon-eventstream.html>), restated with byte offsets in
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html>, and used by
//! Amazon Transcribe (<https://docs.aws.amazon.com/transcribe/latest/dg/event-stream.html>) and
//! Amazon Bedrock
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html>).
//! Integers are big-endian; lengths are bytes.
//!
//! ```text
//! offset  size  field
//! 0       4     total length (the whole frame, these 4 bytes and the message CRC included)
//! 4       4     headers length
//! 8       4     prelude CRC32 (of bytes 0..8)
//! 12      h     headers: name length (1), name (UTF-8), value type (1), value
//!               (string, type 7: length (2) then UTF-8 bytes)
//! 12 + h  p     payload (p = total length - headers length - 16)
//! end - 4 4     message CRC32 (of every byte before it)
//! ```
//!
//! The headers a response's messages carry: `:message-type` (`event`, `exception` or `error`),
//! `:event-type` (events), `:exception-type` (exceptions), `:error-code` and `:error-message`
//! (unmodeled errors), `:content-type` (the payload's media type, e.g. `application/json`).
//!
//! # What the crate does and what this wrapper does
//!
//! A whole frame is decoded by `aws-smithy-eventstream`'s `read_message_from` (headers, payload,
//! both CRCs). Its streaming `MessageFrameDecoder` is not used: it takes the 12-byte prelude and
//! then waits for the stated total length without checking the prelude CRC or any size, so a
//! corrupt length would have the caller buffer up to 4 GiB. This wrapper therefore reads the
//! prelude itself as soon as its 12 bytes arrive, which is what the prelude's own CRC is for
//! (a corrupt length is detected at once, before any buffer is sized by it:
//! <https://docs.aws.amazon.com/lexv2/latest/dg/event-stream-encoding.html>). It checks the
//! prelude CRC and the size limit before buffering the rest of the frame, and checks the
//! message CRC before the crate sees the frame, so both mismatches are typed [`Error`]s (the
//! crate's own error kinds are private).

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::{Header, HeaderValue};
use bytes::Bytes;

/// The prelude's size, bytes: total length (4), headers length (4), prelude CRC32 (4).
pub const PRELUDE_BYTES: usize = 12;

/// The message CRC's size at the end of a frame, bytes.
pub const MESSAGE_CRC_BYTES: usize = 4;

/// The smallest frame, bytes: a prelude and a message CRC, no headers, no payload.
pub const MIN_FRAME_BYTES: usize = PRELUDE_BYTES + MESSAGE_CRC_BYTES;

/// The largest encoded headers of a message, bytes (131,072, 128 KiB).
///
/// Source: <https://smithy.io/2.0/aws/amazon-eventstream.html#message-format> ("The encoded
/// headers of a message MUST NOT exceed 131,072 bytes").
pub const MAX_HEADERS_BYTES: usize = 131_072;

/// The largest payload of a message, bytes (25,165,824, 24 MiB).
///
/// Source: <https://smithy.io/2.0/aws/amazon-eventstream.html#message-format> ("The payload of
/// a message MUST NOT exceed 25,165,824 bytes").
pub const MAX_PAYLOAD_BYTES: usize = 25_165_824;

/// The largest frame the [`Decoder`] holds, bytes (25,296,912): the largest headers and payload
/// the specification allows ([`MAX_HEADERS_BYTES`], [`MAX_PAYLOAD_BYTES`]) plus the prelude and
/// the message CRC. A frame whose prelude states more is [`Error::TooLarge`] as soon as the
/// prelude arrives.
///
/// The specification says a client must not enforce those limits; the decoder is not the
/// client: it reads the proxy's copy of the stream, and the client still receives every byte.
/// The response tee holds a frame to its event cap instead (`crate::tee::Limits::event_bytes`,
/// [`crate::sse::MAX_EVENT_BYTES`] by default), as it holds an SSE event.
pub const MAX_FRAME_BYTES: usize =
    PRELUDE_BYTES + MAX_HEADERS_BYTES + MAX_PAYLOAD_BYTES + MESSAGE_CRC_BYTES;

/// A buffer that grew past this for one frame is released rather than kept for the next,
/// bytes (1 MiB), so one large frame does not pin its memory for the rest of a stream.
const KEEP_CAPACITY: usize = 1024 * 1024;

/// A message's `:message-type` header.
///
/// Source: <https://smithy.io/2.0/aws/amazon-eventstream.html#amazon-event-semantics>.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageType {
    /// `event`: a modeled event; its type is in `:event-type`.
    Event,
    /// `exception`: a modeled error; its type is in `:exception-type`.
    Exception,
    /// `error`: an unmodeled error; its code is in `:error-code`, its text in `:error-message`.
    Error,
    /// Any other value, as sent.
    Other(String),
}

impl MessageType {
    fn from_header(value: &str) -> Self {
        match value {
            "event" => Self::Event,
            "exception" => Self::Exception,
            "error" => Self::Error,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One decoded message.
///
/// Only string-typed headers are read (every header below is a string in the specification);
/// a header that is absent or of another type is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `:message-type`.
    pub message_type: Option<MessageType>,
    /// What the message is: `:event-type` for an event, `:exception-type` for an exception,
    /// `:error-code` for an error (for another or absent message type, the first of those
    /// present, in that order).
    pub event_type: Option<String>,
    /// `:content-type`: the payload's media type (`application/json` on Bedrock).
    pub content_type: Option<String>,
    /// `:error-message` (unmodeled errors).
    pub error_message: Option<String>,
    /// The payload, bytes as sent.
    pub payload: Bytes,
}

impl Message {
    /// The message the crate decoded, its headers read.
    fn from_smithy(message: &aws_smithy_types::event_stream::Message) -> Self {
        let headers = message.headers();
        let message_type = header_str(headers, ":message-type").map(MessageType::from_header);
        let event_type = match message_type {
            Some(MessageType::Event) => header_str(headers, ":event-type"),
            Some(MessageType::Exception) => header_str(headers, ":exception-type"),
            Some(MessageType::Error) => header_str(headers, ":error-code"),
            Some(MessageType::Other(_)) | None => header_str(headers, ":event-type")
                .or_else(|| header_str(headers, ":exception-type"))
                .or_else(|| header_str(headers, ":error-code")),
        };
        Self {
            message_type,
            event_type: event_type.map(str::to_owned),
            content_type: header_str(headers, ":content-type").map(str::to_owned),
            error_message: header_str(headers, ":error-message").map(str::to_owned),
            payload: message.payload().clone(),
        }
    }
}

/// The value of the string header `name`, if the message has one.
fn header_str<'a>(headers: &'a [Header], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(s) => Some(s.as_str()),
            _ => None,
        })
}

/// Why the [`Decoder`] stopped. After any of these it is poisoned: it yields nothing more, and
/// every later [`Decoder::push`] or [`Decoder::finish`] returns [`Error::Poisoned`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The prelude's CRC32 (bytes 8..12) does not match bytes 0..8: the lengths cannot be
    /// trusted. Reported as soon as the prelude's 12 bytes arrive.
    #[error("event-stream prelude CRC32 mismatch: computed {computed:#010x}, frame states {stated:#010x}")]
    PreludeCrc {
        /// The CRC32 of the prelude's first 8 bytes.
        computed: u32,
        /// The CRC32 the frame carries.
        stated: u32,
    },
    /// The message CRC32 (the frame's last 4 bytes) does not match the bytes before it.
    #[error("event-stream message CRC32 mismatch: computed {computed:#010x}, frame states {stated:#010x}")]
    MessageCrc {
        /// The CRC32 of the frame's bytes before its last 4.
        computed: u32,
        /// The CRC32 the frame carries.
        stated: u32,
    },
    /// The prelude states a frame larger than the decoder's limit ([`MAX_FRAME_BYTES`] by
    /// default), bytes. Reported as soon as the prelude arrives; nothing more is buffered.
    #[error("event-stream frame of {length} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The frame's stated total length, bytes.
        length: u32,
        /// The decoder's limit, bytes.
        max: usize,
    },
    /// The prelude states a total length below [`MIN_FRAME_BYTES`].
    #[error("event-stream frame length {0} is below the 16-byte minimum")]
    TooShort(u32),
    /// The frame's CRCs match but `aws-smithy-eventstream` could not decode it (a headers
    /// length that does not fit, a bad header name or value type, a non-UTF-8 string); its
    /// message.
    #[error("malformed event-stream frame: {0}")]
    Malformed(String),
    /// [`Decoder::finish`]: the stream ended inside a frame.
    #[error("event stream ended inside a frame ({buffered} bytes of it received)")]
    Truncated {
        /// The bytes of the unfinished frame received, bytes.
        buffered: usize,
    },
    /// An earlier error stopped the decoder ([`Decoder::error`] returns it).
    #[error("event-stream decoder stopped by an earlier error")]
    Poisoned,
}

/// An incremental event-stream decoder: [`Decoder::push`] the stream's bytes as they arrive,
/// split anywhere (a frame across chunks, several frames in one chunk); each complete frame is
/// decoded into a [`Message`]. [`Decoder::finish`] at the end says whether the stream ended
/// inside a frame.
///
/// It never panics on any input. It holds at most one unfinished frame, and never more than
/// the frame limit ([`MAX_FRAME_BYTES`], or the one given to [`Decoder::with_max_frame_bytes`]):
/// the prelude's stated length is checked before the rest of the frame is buffered. Frames
/// wholly inside one chunk are decoded from the chunk without being copied to the buffer.
#[derive(Debug)]
pub struct Decoder {
    max_frame_bytes: usize,
    /// The unfinished frame's bytes so far (its prelude first).
    buf: Vec<u8>,
    /// The unfinished frame's total length, once its prelude has been checked.
    frame_len: Option<usize>,
    /// The error that stopped the decoder.
    error: Option<Error>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder holding frames of at most [`MAX_FRAME_BYTES`].
    pub fn new() -> Self {
        Self::with_max_frame_bytes(MAX_FRAME_BYTES)
    }

    /// A decoder holding frames of at most `max` bytes (a frame's total length, prelude and
    /// CRC included). A `max` below [`MIN_FRAME_BYTES`] refuses every frame.
    pub fn with_max_frame_bytes(max: usize) -> Self {
        Self {
            max_frame_bytes: max,
            buf: Vec::new(),
            frame_len: None,
            error: None,
        }
    }

    /// The error that stopped the decoder, if one did.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Bytes of an unfinished frame held, bytes.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Decode the next bytes of the stream, appending the messages of the frames they complete
    /// to `out`, in order.
    ///
    /// Errors: the first [`Error`] met; the messages of the frames before it are in `out`, and
    /// the decoder is poisoned (this and every later call returns [`Error::Poisoned`] without
    /// yielding). A chunk that ends inside a frame is not an error: its bytes are kept for the
    /// next call.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Message>) -> Result<(), Error> {
        if self.error.is_some() {
            return Err(Error::Poisoned);
        }
        match self.push_inner(chunk, out) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.poison(e)),
        }
    }

    /// The stream ended. `Ok` when it ended between frames; [`Error::Truncated`] (and the
    /// decoder poisoned) when it ended inside one; [`Error::Poisoned`] after an earlier error.
    /// After `Ok` the decoder is ready for a new stream.
    pub fn finish(&mut self) -> Result<(), Error> {
        if self.error.is_some() {
            return Err(Error::Poisoned);
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let e = Error::Truncated {
            buffered: self.buf.len(),
        };
        Err(self.poison(e))
    }

    fn poison(&mut self, e: Error) -> Error {
        self.error = Some(e.clone());
        self.buf = Vec::new();
        self.frame_len = None;
        e
    }

    fn push_inner(&mut self, chunk: &[u8], out: &mut Vec<Message>) -> Result<(), Error> {
        let mut input = chunk;
        if !self.buf.is_empty() {
            input = self.fill(input, out)?;
        }
        // Between frames: decode the frames wholly inside the chunk from it.
        while input.len() >= PRELUDE_BYTES {
            let len = self.check_prelude(&input[..PRELUDE_BYTES])?;
            let Some(frame) = input.get(..len) else { break };
            out.push(decode_frame(frame)?);
            input = &input[len..];
        }
        if !input.is_empty() {
            // The start of a frame: kept for the next chunk.
            self.fill(input, out)?;
        }
        Ok(())
    }

    /// Add `input` to the unfinished frame in the buffer, up to its end; decode the frame if it
    /// is then complete. Returns the bytes of `input` after the frame.
    fn fill<'a>(&mut self, input: &'a [u8], out: &mut Vec<Message>) -> Result<&'a [u8], Error> {
        let mut input = input;
        if self.frame_len.is_none() {
            let take = (PRELUDE_BYTES - self.buf.len()).min(input.len());
            self.buf.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.buf.len() < PRELUDE_BYTES {
                return Ok(input);
            }
            self.frame_len = Some(self.check_prelude(&self.buf)?);
        }
        let Some(len) = self.frame_len else {
            return Ok(input);
        };
        let take = (len - self.buf.len()).min(input.len());
        extend_bounded(&mut self.buf, &input[..take], len);
        input = &input[take..];
        if self.buf.len() == len {
            let message = decode_frame(&self.buf);
            self.buf.clear();
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf = Vec::new();
            }
            self.frame_len = None;
            out.push(message?);
        }
        Ok(input)
    }

    /// Check a frame's 12-byte prelude: its CRC, then its total length against the limits.
    /// Returns the total length, bytes.
    fn check_prelude(&self, prelude: &[u8]) -> Result<usize, Error> {
        let stated = be_u32(prelude, 8);
        let computed = crc32fast::hash(&prelude[..8]);
        if computed != stated {
            return Err(Error::PreludeCrc { computed, stated });
        }
        let length = be_u32(prelude, 0);
        let len = usize::try_from(length).unwrap_or(usize::MAX);
        if len < MIN_FRAME_BYTES {
            return Err(Error::TooShort(length));
        }
        if len > self.max_frame_bytes {
            return Err(Error::TooLarge {
                length,
                max: self.max_frame_bytes,
            });
        }
        Ok(len)
    }
}

/// Append `bytes` to `buf`, growing its capacity by doubling but never past `limit` bytes.
fn extend_bounded(buf: &mut Vec<u8>, bytes: &[u8], limit: usize) {
    let len = buf.len() + bytes.len();
    if len > buf.capacity() {
        let target = len.max(buf.capacity().saturating_mul(2)).min(limit);
        buf.reserve_exact(target - buf.len());
    }
    buf.extend_from_slice(bytes);
}

/// The big-endian `u32` at `at` in `bytes` (0 past the end; callers pass whole preludes and
/// frames, so it never is).
fn be_u32(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_be_bytes)
}

/// Decode one whole frame (its prelude already checked): its message CRC, then the crate's
/// decoding of headers and payload.
fn decode_frame(frame: &[u8]) -> Result<Message, Error> {
    let body = frame.len().saturating_sub(MESSAGE_CRC_BYTES);
    let stated = be_u32(frame, body);
    let computed = crc32fast::hash(&frame[..body]);
    if computed != stated {
        return Err(Error::MessageCrc { computed, stated });
    }
    let message = read_message_from(frame).map_err(|e| Error::Malformed(e.to_string()))?;
    Ok(Message::from_smithy(&message))
}

#[cfg(test)]
pub(crate) mod tests;
