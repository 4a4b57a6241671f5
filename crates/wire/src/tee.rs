//! The response tee: a copy of each chunk the client receives, decoded and framed, handed to
//! a [`Sink`]. Knows nothing of LLMs: what the events or the JSON body mean is the sink's
//! business.
//!
//! Path of a copy: `content-encoding` decoding ([`crate::decode`]), then either the
//! event-stream framer ([`crate::sse`], one [`Sink::on_event`] per event) or, for a
//! non-streaming body, accumulation up to [`MAX_JSON_BYTES`] and one [`Sink::on_json`] at the
//! end. Any failure on that path (a decode error, a sink error, a cap) stops observing that
//! response, with one warning; the client's bytes never depend on it.

use bytes::Bytes;

use crate::decode::{Coding, DecodeError, Decoder, PushError, MAX_DECODED_BYTES};
use crate::eventstream::{self, Message};
use crate::sse::{SseEvent, SseFramer, MAX_EVENT_BYTES};
use crate::stream::{BodyObserver, Break, End};

/// The largest non-streaming body the tee buffers for [`Sink::on_json`], decoded bytes
/// (16 MiB). A larger body is not observed (the sink gets only `on_end`), and the buffer never
/// grows past this.
///
/// Source: our own bound, above real generation responses (a long completion is well under
/// 1 MB of JSON; a Gemini image output holds a few MB of base64), so that a garbage or
/// hostile body cannot make the proxy hold it whole.
pub const MAX_JSON_BYTES: usize = 16 * 1024 * 1024;

/// Why a sink stopped observing a response (a parse error in the copy, an unexpected shape).
/// The tee stops feeding it and logs a warning with this text, so the text names the problem
/// and never quotes the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// What the tee feeds: the events of an event stream, or the whole body of a non-streaming
/// JSON response. Called synchronously inside the response body's poll: no I/O, no waiting.
pub trait Sink: Send {
    /// One complete event of a `text/event-stream` response, in order.
    fn on_event(&mut self, _event: &SseEvent<'_>) -> Result<(), SinkError> {
        Ok(())
    }
    /// One message of an AWS event stream (`application/vnd.amazon.eventstream`), in order.
    fn on_aws_message(&mut self, _message: &Message) -> Result<(), SinkError> {
        Ok(())
    }
    /// The whole decoded body of a non-streaming response (only when it ended complete, is
    /// not empty, and is within the tee's size cap, [`MAX_JSON_BYTES`]).
    fn on_json(&mut self, _body: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
    /// The body ended (after every other call; exactly once, also when observing stopped).
    fn on_end(&mut self, _end: End) {}
}

/// How the decoded body is cut for the sink; the caller decides from the response's
/// `content-type` (`text/event-stream` or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: one [`Sink::on_event`] per event.
    EventStream,
    /// One body: [`Sink::on_json`] with all of it at a complete end.
    Json,
    /// AWS event-stream frames ([`crate::eventstream`]): one [`Sink::on_aws_message`] per
    /// message (Amazon Bedrock's streaming operations).
    AwsEventStream,
}

/// The tee's caps, bytes. [`Limits::default`] is [`MAX_EVENT_BYTES`], [`MAX_DECODED_BYTES`]
/// and [`MAX_JSON_BYTES`]; tests use smaller ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One event's size, an SSE event's or an AWS event-stream frame's (prelude and CRC
    /// included) ([`MAX_EVENT_BYTES`]): the one cap on what a stream's copy holds at once.
    pub event_bytes: usize,
    /// The decoded bytes of a compressed body ([`MAX_DECODED_BYTES`]).
    pub decoded_bytes: u64,
    /// A non-streaming body ([`MAX_JSON_BYTES`]).
    pub json_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            event_bytes: MAX_EVENT_BYTES,
            decoded_bytes: MAX_DECODED_BYTES,
            json_bytes: MAX_JSON_BYTES,
        }
    }
}

enum Body {
    Events(SseFramer),
    Json {
        buf: Vec<u8>,
        max: usize,
    },
    /// The decoder and its reused output.
    Aws(eventstream::Decoder, Vec<Message>),
}

/// Why feeding decoded bytes stopped.
enum Stop {
    Sink(SinkError),
    JsonTooLarge(usize),
    EventStream(eventstream::Error),
}

/// Why observing stopped.
enum Failure {
    Decode(DecodeError),
    Stop(Stop),
}

impl From<PushError<Stop>> for Failure {
    fn from(e: PushError<Stop>) -> Self {
        match e {
            PushError::Decode(d) => Failure::Decode(d),
            PushError::Output(s) => Failure::Stop(s),
        }
    }
}

impl Failure {
    /// The short, low-cardinality reason for the request's log line.
    fn reason(&self) -> &'static str {
        match self {
            Failure::Decode(DecodeError::Unsupported(_)) => "unsupported_encoding",
            Failure::Decode(DecodeError::Stacked(_)) => "stacked_encoding",
            Failure::Decode(DecodeError::TooLarge(_)) => "decoded_too_large",
            Failure::Decode(DecodeError::Truncated(_)) => "decode_truncated",
            Failure::Decode(DecodeError::Corrupt { .. }) => "decode_error",
            Failure::Stop(Stop::Sink(_)) => "sink_error",
            Failure::Stop(Stop::JsonTooLarge(_)) => "json_too_large",
            Failure::Stop(Stop::EventStream(_)) => "eventstream_error",
        }
    }

    fn detail(&self) -> String {
        match self {
            Failure::Decode(e) => e.to_string(),
            Failure::Stop(Stop::Sink(e)) => e.to_string(),
            Failure::Stop(Stop::JsonTooLarge(max)) => format!("body exceeds {max} bytes"),
            Failure::Stop(Stop::EventStream(e)) => e.to_string(),
        }
    }
}

/// Hand decoded bytes to the framer or the JSON buffer.
fn feed<S: Sink>(body: &mut Body, sink: &mut S, bytes: &[u8]) -> Result<(), Stop> {
    match body {
        Body::Events(framer) => framer.push(bytes, &mut |e: &SseEvent<'_>| {
            sink.on_event(e).map_err(Stop::Sink)
        }),
        Body::Aws(decoder, out) => {
            // The messages decoded before an error in this chunk still reach the sink.
            let pushed = decoder.push(bytes, out);
            for m in out.drain(..) {
                sink.on_aws_message(&m).map_err(Stop::Sink)?;
            }
            pushed.map_err(Stop::EventStream)
        }
        Body::Json { buf, max } => {
            let len = buf.len().saturating_add(bytes.len());
            if len > *max {
                return Err(Stop::JsonTooLarge(*max));
            }
            if len > buf.capacity() {
                // Grow by doubling, but never reserve past the cap.
                let target = len.max(buf.capacity().saturating_mul(2)).min(*max);
                buf.reserve_exact(target - buf.len());
            }
            buf.extend_from_slice(bytes);
            Ok(())
        }
    }
}

/// A [`BodyObserver`] that decodes and frames a copy of the response for a [`Sink`].
///
/// It never alters, delays or ends the client's stream: [`BodyObserver::on_break`] returns
/// `None`, and every failure only stops observing ([`Tee::stopped`] says why). It never panics
/// on any input, and its memory is bounded by [`Limits`].
pub struct Tee<S: Sink> {
    sink: S,
    decoder: Option<Decoder>,
    body: Body,
    stopped: Option<&'static str>,
    truncated: bool,
    ended: bool,
}

impl<S: Sink> std::fmt::Debug for Tee<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tee")
            .field("decoder", &self.decoder)
            .field("stopped", &self.stopped)
            .field("truncated", &self.truncated)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<S: Sink> Tee<S> {
    /// A tee for a response cut by `framing`, whose `content-encoding` header is
    /// `content_encoding` (`None` when absent), feeding `sink`, with the default [`Limits`].
    ///
    /// An unknown or stacked coding is not an error here: the tee starts stopped
    /// (`unsupported_encoding` / `stacked_encoding`) and the sink gets only `on_end`.
    pub fn new(framing: Framing, content_encoding: Option<&str>, sink: S) -> Self {
        Self::with_limits(framing, content_encoding, sink, Limits::default())
    }

    /// [`Tee::new`] with other caps.
    pub fn with_limits(
        framing: Framing,
        content_encoding: Option<&str>,
        sink: S,
        limits: Limits,
    ) -> Self {
        let body = match framing {
            Framing::EventStream => {
                Body::Events(SseFramer::with_max_event_bytes(limits.event_bytes))
            }
            Framing::Json => Body::Json {
                buf: Vec::new(),
                max: limits.json_bytes,
            },
            Framing::AwsEventStream => Body::Aws(
                eventstream::Decoder::with_max_frame_bytes(limits.event_bytes),
                Vec::new(),
            ),
        };
        let mut tee = Self {
            sink,
            decoder: None,
            body,
            stopped: None,
            truncated: false,
            ended: false,
        };
        match Coding::from_header(content_encoding) {
            Ok(None) => {}
            Ok(Some(coding)) => {
                tee.decoder = Some(Decoder::new(coding, limits.decoded_bytes));
            }
            Err(e) => tee.stop(&Failure::Decode(e)),
        }
        tee
    }

    /// Why observing stopped, if it did: a short low-cardinality reason for the request's log
    /// line (`unsupported_encoding`, `stacked_encoding`, `decode_error`, `decode_truncated`,
    /// `decoded_too_large`, `sink_error`, `json_too_large`, `eventstream_error`).
    pub fn stopped(&self) -> Option<&'static str> {
        self.stopped
    }

    /// The event stream ended inside an event (bytes after its last blank line, discarded);
    /// known after the end.
    pub fn truncated_event(&self) -> bool {
        self.truncated
    }

    /// Events skipped because they were larger than the event cap.
    pub fn skipped_events(&self) -> u64 {
        match &self.body {
            Body::Events(f) => f.skipped(),
            Body::Json { .. } | Body::Aws(..) => 0,
        }
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The sink, mutably.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// The sink, taking the tee apart.
    pub fn into_sink(self) -> S {
        self.sink
    }

    fn stop(&mut self, failure: &Failure) {
        let reason = failure.reason();
        self.stopped = Some(reason);
        tracing::warn!(
            target: "cachekeeper::observe",
            reason,
            error = %failure.detail(),
            "stopped observing the response (the client's bytes are unaffected)"
        );
        // Release what observing held.
        self.decoder = None;
        if let Body::Json { buf, .. } = &mut self.body {
            *buf = Vec::new();
        }
    }

    fn end(&mut self, end: End) -> Result<(), Failure> {
        let Self {
            sink,
            decoder,
            body,
            ..
        } = self;
        if let (Some(d), End::Complete) = (decoder, end) {
            d.finish(&mut |b: &[u8]| feed(body, sink, b))?;
        }
        match body {
            Body::Events(framer) => self.truncated = framer.finish(),
            // Ended inside a frame: its bytes are dropped, as a cut event's are.
            Body::Aws(decoder, _) => self.truncated = decoder.finish().is_err(),
            Body::Json { buf, .. } => {
                let whole = std::mem::take(buf);
                if end == End::Complete && !whole.is_empty() {
                    sink.on_json(&whole)
                        .map_err(|e| Failure::Stop(Stop::Sink(e)))?;
                }
            }
        }
        Ok(())
    }
}

impl<S: Sink> BodyObserver for Tee<S> {
    fn on_data(&mut self, chunk: &Bytes) {
        if self.ended || self.stopped.is_some() {
            return;
        }
        let Self {
            sink,
            decoder,
            body,
            ..
        } = self;
        let r = match decoder {
            Some(d) => d
                .push(chunk, &mut |b: &[u8]| feed(body, sink, b))
                .map_err(Failure::from),
            None => feed(body, sink, chunk).map_err(Failure::Stop),
        };
        if let Err(f) = r {
            self.stop(&f);
        }
    }

    fn on_break(&mut self, _why: Break, _detail: &str) -> Option<Bytes> {
        None
    }

    fn on_end(&mut self, end: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        if self.stopped.is_none() {
            if let Err(f) = self.end(end) {
                self.stop(&f);
            }
        }
        self.sink.on_end(end);
    }
}

#[cfg(test)]
impl<S: Sink> Tee<S> {
    /// The JSON buffer's capacity, bytes.
    fn json_capacity(&self) -> usize {
        match &self.body {
            Body::Json { buf, .. } => buf.capacity(),
            Body::Events(_) | Body::Aws(..) => 0,
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;
    use crate::decode::tests::{brotli, gzip, raw_deflate, zlib, zstd};
    use crate::sse::tests::{ev, Ev, ANTHROPIC, OPENAI};

    #[derive(Default)]
    struct Rec {
        events: Vec<Ev>,
        aws: Vec<Message>,
        json: Vec<Vec<u8>>,
        ends: Vec<End>,
        /// Fail on the event with this index (0-based), or on JSON when 0.
        fail_at: Option<usize>,
    }

    impl Sink for Rec {
        fn on_event(&mut self, event: &SseEvent<'_>) -> Result<(), SinkError> {
            if self.fail_at == Some(self.events.len()) {
                return Err(SinkError("unexpected event shape".into()));
            }
            self.events.push(Ev::of(event));
            Ok(())
        }
        fn on_aws_message(&mut self, message: &Message) -> Result<(), SinkError> {
            self.aws.push(message.clone());
            Ok(())
        }
        fn on_json(&mut self, body: &[u8]) -> Result<(), SinkError> {
            if self.fail_at == Some(0) {
                return Err(SinkError("expected value at line 1 column 1".into()));
            }
            self.json.push(body.to_vec());
            Ok(())
        }
        fn on_end(&mut self, end: End) {
            self.ends.push(end);
        }
    }

    fn run(framing: Framing, ce: Option<&str>, body: &[u8], piece: usize, end: End) -> Tee<Rec> {
        run_with(
            framing,
            ce,
            body,
            piece,
            end,
            Limits::default(),
            Rec::default(),
        )
    }

    fn run_with(
        framing: Framing,
        ce: Option<&str>,
        body: &[u8],
        piece: usize,
        end: End,
        limits: Limits,
        rec: Rec,
    ) -> Tee<Rec> {
        let mut tee = Tee::with_limits(framing, ce, rec, limits);
        for c in body.chunks(piece) {
            tee.on_data(&Bytes::copy_from_slice(c));
        }
        tee.on_end(end);
        tee
    }

    /// A longer Anthropic-shaped stream: the recorded one with its content deltas repeated.
    fn long_stream() -> Vec<u8> {
        let mut s = Vec::new();
        for _ in 0..40 {
            s.extend_from_slice(ANTHROPIC.as_bytes());
        }
        s
    }

    #[test]
    fn plain_event_stream_reaches_the_sink_in_order() {
        let direct = run(
            Framing::EventStream,
            None,
            ANTHROPIC.as_bytes(),
            usize::MAX,
            End::Complete,
        );
        assert_eq!(direct.sink().events.len(), 8);
        assert_eq!(
            direct.sink().events[2],
            ev(Some("ping"), "{\"type\": \"ping\"}")
        );
        for piece in [1, 7, 4096] {
            let tee = run(
                Framing::EventStream,
                None,
                ANTHROPIC.as_bytes(),
                piece,
                End::Complete,
            );
            assert_eq!(tee.sink().events, direct.sink().events);
            assert_eq!(tee.sink().ends, vec![End::Complete]);
            assert_eq!(tee.stopped(), None);
            assert!(!tee.truncated_event());
        }
        let tee = run(
            Framing::EventStream,
            None,
            OPENAI.as_bytes(),
            5,
            End::Complete,
        );
        assert_eq!(tee.sink().events.last(), Some(&ev(None, "[DONE]")));
    }

    #[test]
    fn every_coding_in_1_7_and_4096_byte_pieces_gives_the_plain_events() {
        let plain = long_stream();
        let want = run(Framing::EventStream, None, &plain, 4096, End::Complete)
            .into_sink()
            .events;
        assert_eq!(want.len(), 8 * 40);
        for (ce, enc) in [
            ("gzip", gzip(&plain)),
            ("x-gzip", gzip(&plain)),
            ("deflate", zlib(&plain)),
            ("deflate", raw_deflate(&plain)),
            ("br", brotli(&plain)),
            ("zstd", zstd(&plain)),
        ] {
            for piece in [1, 7, 4096] {
                let tee = run(Framing::EventStream, Some(ce), &enc, piece, End::Complete);
                assert_eq!(tee.stopped(), None, "{ce} in pieces of {piece}");
                assert!(tee.sink().events == want, "{ce} in pieces of {piece}");
                assert_eq!(tee.sink().ends, vec![End::Complete]);
            }
        }
    }

    #[test]
    fn events_are_delivered_as_their_chunk_passes_not_at_the_end() {
        // The usage observer must see the last event before the body's end.
        for (ce, enc) in [
            ("gzip", gzip(ANTHROPIC.as_bytes())),
            ("zstd", zstd(ANTHROPIC.as_bytes())),
        ] {
            let mut tee = Tee::new(Framing::EventStream, Some(ce), Rec::default());
            tee.on_data(&Bytes::from(enc));
            assert_eq!(tee.sink().events.len(), 8, "{ce}");
        }
    }

    #[test]
    fn a_gzip_bomb_stops_observing_at_the_cap() {
        let bomb = gzip(&b"data: 0\n\n".repeat(4 * 1024 * 1024));
        let limits = Limits {
            decoded_bytes: 1024 * 1024,
            ..Limits::default()
        };
        let tee = run_with(
            Framing::EventStream,
            Some("gzip"),
            &bomb,
            4096,
            End::Complete,
            limits,
            Rec::default(),
        );
        assert_eq!(tee.stopped(), Some("decoded_too_large"));
        assert!(tee.sink().events.len() <= 1024 * 1024 / 9);
        assert_eq!(tee.sink().ends, vec![End::Complete]);
    }

    #[test]
    fn a_50_mb_json_body_is_not_buffered_past_the_cap() {
        let chunk = Bytes::from(vec![b' '; 64 * 1024]);
        let mut tee = Tee::new(Framing::Json, None, Rec::default());
        tee.on_data(&Bytes::from_static(b"{\"pad\":\""));
        for _ in 0..(50 * 1024 * 1024 / chunk.len()) {
            tee.on_data(&chunk);
            assert!(tee.json_capacity() <= MAX_JSON_BYTES);
        }
        tee.on_data(&Bytes::from_static(b"\"}"));
        tee.on_end(End::Complete);
        assert_eq!(tee.stopped(), Some("json_too_large"));
        assert_eq!(tee.json_capacity(), 0);
        assert!(tee.sink().json.is_empty());
        assert_eq!(tee.sink().ends, vec![End::Complete]);
    }

    #[test]
    fn a_json_body_is_handed_whole_at_a_complete_end_only() {
        let body =
            br#"{"id":"msg_01","type":"message","usage":{"input_tokens":12,"output_tokens":3}}"#;
        let tee = run(Framing::Json, None, body, 7, End::Complete);
        assert_eq!(tee.sink().json, vec![body.to_vec()]);
        let tee = run(Framing::Json, Some("gzip"), &gzip(body), 3, End::Complete);
        assert_eq!(tee.sink().json, vec![body.to_vec()]);
        assert_eq!(tee.sink().ends, vec![End::Complete]);
        let broken = End::Broken(Break::UpstreamBroken);
        let tee = run(Framing::Json, None, &body[..20], 7, broken);
        assert!(tee.sink().json.is_empty());
        assert_eq!(tee.sink().ends, vec![broken]);
        let tee = run(Framing::Json, None, body, 7, End::ClientGone);
        assert!(tee.sink().json.is_empty());
        assert_eq!(tee.sink().ends, vec![End::ClientGone]);
        // An empty body (a 204, a HEAD) is not handed on.
        let tee = run(Framing::Json, None, b"", 7, End::Complete);
        assert!(tee.sink().json.is_empty());
        assert_eq!(tee.stopped(), None);
        assert_eq!(tee.sink().ends, vec![End::Complete]);
        // A JSON body at exactly the cap is observed.
        let limits = Limits {
            json_bytes: body.len(),
            ..Limits::default()
        };
        let tee = run_with(
            Framing::Json,
            None,
            body,
            7,
            End::Complete,
            limits,
            Rec::default(),
        );
        assert_eq!(tee.sink().json, vec![body.to_vec()]);
    }

    #[test]
    fn a_truncated_compressed_body_is_not_observed_as_whole() {
        let body = br#"{"usage":{"input_tokens":12}}"#;
        let enc = gzip(body);
        let tee = run(
            Framing::Json,
            Some("gzip"),
            &enc[..enc.len() - 4],
            4096,
            End::Complete,
        );
        assert_eq!(tee.stopped(), Some("decode_truncated"));
        assert!(tee.sink().json.is_empty());
        assert_eq!(tee.sink().ends, vec![End::Complete]);
    }

    #[test]
    fn unknown_stacked_and_corrupt_codings_stop_observing() {
        for (ce, reason) in [
            ("compress", "unsupported_encoding"),
            ("gzip, br", "stacked_encoding"),
            ("gzip", "decode_error"),
            ("br", "decode_error"),
            ("zstd", "decode_error"),
        ] {
            let tee = run(
                Framing::EventStream,
                Some(ce),
                ANTHROPIC.as_bytes(),
                100,
                End::Complete,
            );
            assert_eq!(tee.stopped(), Some(reason), "{ce}");
            assert!(tee.sink().events.is_empty(), "{ce}");
            assert_eq!(tee.sink().ends, vec![End::Complete]);
        }
        // identity is no coding.
        let tee = run(
            Framing::EventStream,
            Some("identity"),
            ANTHROPIC.as_bytes(),
            100,
            End::Complete,
        );
        assert_eq!(tee.sink().events.len(), 8);
    }

    #[test]
    fn a_sink_error_stops_observing_and_logs_no_body_content() {
        let secret = "the user's private words";
        let stream =
            format!("data: {{\"text\":\"{secret}\"}}\n\ndata: {{\"text\":\"{secret}\"}}\n\n");
        let logs = capture_logs(|| {
            let rec = Rec {
                fail_at: Some(1),
                ..Rec::default()
            };
            let tee = run_with(
                Framing::EventStream,
                None,
                stream.as_bytes(),
                3,
                End::Complete,
                Limits::default(),
                rec,
            );
            assert_eq!(tee.stopped(), Some("sink_error"));
            assert_eq!(tee.sink().events.len(), 1);
            assert_eq!(tee.sink().ends, vec![End::Complete]);
        });
        assert_eq!(logs.matches("stopped observing").count(), 1, "{logs}");
        assert!(logs.contains("cachekeeper::observe"), "{logs}");
        assert!(logs.contains("sink_error"), "{logs}");
        assert!(!logs.contains(secret), "{logs}");
    }

    #[test]
    fn invalid_utf8_and_garbage_pass_without_panic() {
        let tee = run(
            Framing::EventStream,
            None,
            b"data: \xff\xfe\x00\n\n",
            1,
            End::Complete,
        );
        assert_eq!(
            tee.sink().events,
            vec![Ev {
                event: None,
                data: b"\xff\xfe\x00".to_vec()
            }]
        );
        let tee = run(
            Framing::EventStream,
            None,
            b"<html>502 Bad Gateway</html>",
            4,
            End::Complete,
        );
        assert!(tee.sink().events.is_empty());
        assert!(tee.truncated_event());
        let tee = run(Framing::Json, None, b"\xff not json", 4, End::Complete);
        assert_eq!(tee.sink().json, vec![b"\xff not json".to_vec()]);
    }

    #[test]
    fn an_over_cap_event_is_skipped_and_observing_continues() {
        let s = format!("data: {}\n\ndata: next\n\n", "x".repeat(1000));
        let limits = Limits {
            event_bytes: 100,
            ..Limits::default()
        };
        let tee = run_with(
            Framing::EventStream,
            None,
            s.as_bytes(),
            64,
            End::Complete,
            limits,
            Rec::default(),
        );
        assert_eq!(tee.sink().events, vec![ev(None, "next")]);
        assert_eq!(tee.skipped_events(), 1);
        assert_eq!(tee.stopped(), None);
    }

    #[test]
    fn on_end_is_told_once_and_nothing_after_it() {
        let mut tee = Tee::new(Framing::EventStream, None, Rec::default());
        tee.on_data(&Bytes::from_static(b"data: a\n\ndata: trunc"));
        assert_eq!(tee.on_break(Break::IdleTimeout, "idle"), None);
        tee.on_end(End::Broken(Break::IdleTimeout));
        tee.on_data(&Bytes::from_static(b"\n\n"));
        tee.on_end(End::Complete);
        assert_eq!(tee.sink().events, vec![ev(None, "a")]);
        assert_eq!(tee.sink().ends, vec![End::Broken(Break::IdleTimeout)]);
        assert!(tee.truncated_event());
    }

    #[tokio::test]
    async fn a_broken_body_reaches_the_client_unchanged_and_ends_broken_once() {
        use crate::stream::ObservedBody;
        use crate::upstream::BoxError;
        use http_body::Frame;
        use http_body_util::{BodyExt, StreamBody};
        let enc = gzip(&long_stream());
        let (a, b) = enc.split_at(enc.len() / 2);
        let chunks: Vec<Result<Frame<Bytes>, BoxError>> = vec![
            Ok(Frame::data(Bytes::copy_from_slice(a))),
            Ok(Frame::data(Bytes::copy_from_slice(&b[..10]))),
            Err("connection reset".into()),
        ];
        let upstream = StreamBody::new(futures_util::stream::iter(chunks)).boxed_unsync();
        /// The recording sink, shared so the test reads it after the body is gone.
        struct Shared(std::sync::Arc<std::sync::Mutex<Rec>>);
        impl Sink for Shared {
            fn on_event(&mut self, event: &SseEvent<'_>) -> Result<(), SinkError> {
                self.0.lock().unwrap().on_event(event)
            }
            fn on_end(&mut self, end: End) {
                self.0.lock().unwrap().on_end(end);
            }
        }
        let rec = std::sync::Arc::new(std::sync::Mutex::new(Rec::default()));
        let tee = Tee::new(Framing::EventStream, Some("gzip"), Shared(rec.clone()));
        let mut body = ObservedBody::new(upstream, std::time::Duration::from_secs(5), true, tee);
        let mut got = Vec::new();
        let mut broke = false;
        while let Some(f) = body.frame().await {
            match f {
                Ok(f) => got.extend_from_slice(&f.into_data().unwrap()),
                Err(_) => broke = true,
            }
        }
        assert!(broke);
        assert_eq!(got, &enc[..a.len() + 10]);
        drop(body);
        let rec = rec.lock().unwrap();
        assert_eq!(rec.ends, vec![End::Broken(Break::UpstreamBroken)]);
        assert!(!rec.events.is_empty());
        assert!(rec.events.len() < 8 * 40);
    }

    /// Run `f` with a subscriber writing formatted events into a string.
    fn capture_logs(f: impl FnOnce()) -> String {
        let buf = crate::testing::LogBuf::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_target(true)
            .with_writer(buf.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        buf.text()
    }

    /// An AWS event-stream frame is held to the tee's event cap, as an SSE event is: a frame
    /// over it stops the decoded copy (a warning, `eventstream_error`) as soon as its prelude
    /// states its length, the frames before it having reached the sink. The failing input: the
    /// decoder held frames up to the specification's ~25 MiB whatever the cap.
    #[test]
    fn an_aws_frame_over_the_event_cap_stops_the_copy() {
        use crate::eventstream::tests::{bedrock_event, prelude, spec_frame};

        let small = spec_frame(&bedrock_event("messageStart"), br#"{"role":"assistant"}"#);
        let big = spec_frame(&bedrock_event("contentBlockDelta"), &[b'x'; 2000]);
        let limits = Limits {
            event_bytes: 1024,
            ..Limits::default()
        };
        let body = [small.as_slice(), big.as_slice(), small.as_slice()].concat();
        for piece in [1, 7, body.len()] {
            let tee = run_with(
                Framing::AwsEventStream,
                None,
                &body,
                piece,
                End::Complete,
                limits,
                Rec::default(),
            );
            assert_eq!(tee.stopped(), Some("eventstream_error"), "piece {piece}");
            assert_eq!(tee.sink().aws.len(), 1, "piece {piece}");
            assert_eq!(tee.sink().ends.len(), 1);
        }
        // Within the cap: every frame decoded.
        let tee = run(Framing::AwsEventStream, None, &body, 5, End::Complete);
        assert_eq!(tee.stopped(), None);
        assert_eq!(tee.sink().aws.len(), 3);

        // The default cap is the SSE event cap: a frame stating one byte more is refused at
        // its prelude, nothing of it held.
        let over = u32::try_from(MAX_EVENT_BYTES + 1).unwrap();
        let mut tee = Tee::new(Framing::AwsEventStream, None, Rec::default());
        tee.on_data(&Bytes::from(prelude(over, 0)));
        assert_eq!(tee.stopped(), Some("eventstream_error"));
        match &tee.body {
            Body::Aws(d, _) => assert_eq!(d.buffered(), 0),
            _ => unreachable!(),
        }
        let at = u32::try_from(MAX_EVENT_BYTES).unwrap();
        let mut tee = Tee::new(Framing::AwsEventStream, None, Rec::default());
        tee.on_data(&Bytes::from(prelude(at, 0)));
        assert_eq!(tee.stopped(), None);
    }
}
