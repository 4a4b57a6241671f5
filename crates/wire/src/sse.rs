//! Server-sent events framing, with no knowledge of LLMs: bytes in, in any split, complete
//! events out.
//!
//! The rules are the WHATWG HTML Standard's "event stream interpretation" (§9.2.6, "Server-sent
//! events"): lines end with `\n`, `\r\n` or a lone `\r`; a UTF-8 byte order mark at the start of
//! the stream is dropped; a line starting with `:` is a comment; `field:value` strips one space
//! after the colon; a line without a colon is a field with an empty value; `data` lines join
//! with `\n`; `event` sets the type; `id`, `retry` and unknown fields do not shape an event; a
//! blank line dispatches the event when it has data; bytes after the last blank line at the end
//! of the stream are discarded.

/// The largest event the framer holds, bytes (16 MiB): its joined data (with the `\n`
/// between `data` lines) plus its type, counting the value of each `data` / `event` line as it
/// arrives (field names, the optional space, comments and other fields do not count, and
/// lines of other fields are not held). A larger event is skipped (its bytes discarded up to
/// its blank line) and counted in [`SseFramer::skipped`]; the events after it are framed as
/// usual. The verdict does not depend on where the chunks split the stream.
///
/// Source: our own bound, above the largest events providers send: a Gemini image-output
/// event carries the whole image as base64 (several MB).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// A buffer that grew past this after an event is released rather than kept for the next,
/// bytes (1 MiB), so one large event does not pin its memory for the rest of a stream.
const KEEP_CAPACITY: usize = 1024 * 1024;

/// The UTF-8 byte order mark.
const BOM: [u8; 3] = [0xef, 0xbb, 0xbf];

/// One server-sent event as the framer dispatches it.
///
/// Shape (WHATWG HTML, "Server-sent events", event stream interpretation): `event` is the last
/// `event:` field of the event (`None` when absent or empty: the default type `message`);
/// `data` is the event's `data:` lines joined with `\n`, without a trailing newline. Comment
/// lines (`:` first) and unknown fields are not part of it. `data` is the bytes as sent (not
/// checked as UTF-8); `event` is decoded as UTF-8 with replacement characters, as the standard
/// decodes the whole stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, if any.
    pub event: Option<&'a str>,
    /// The joined `data:` lines.
    pub data: &'a [u8],
}

/// An incremental event-stream parser: [`SseFramer::push`] bytes as they arrive, split
/// anywhere; each complete event is handed to a callback, borrowed from the framer's reused
/// buffers (no allocation per event once the buffers have grown to the stream's event size).
/// Memory is bounded by [`MAX_EVENT_BYTES`] (or the limit given to
/// [`SseFramer::with_max_event_bytes`]).
#[derive(Debug)]
pub(crate) struct SseFramer {
    max_event_bytes: usize,
    /// The current unterminated line, when it is kept.
    line: Vec<u8>,
    /// The current unterminated line has bytes that are not kept (a comment, or a line of an
    /// event being skipped).
    line_ignored: bool,
    /// The data buffer: `data` values joined with `\n`.
    data: Vec<u8>,
    /// A `data` field was seen (the data buffer is not empty in the standard's terms).
    has_data: bool,
    /// The event type buffer.
    event: String,
    /// A chunk ended with `\r`: a `\n` first in the next chunk ends the same line.
    after_cr: bool,
    /// `Some(n)`: still at the stream's start, the first `n` bytes of a BOM seen.
    bom: Option<usize>,
    /// Bytes arrived since the last blank line.
    pending: bool,
    /// Discarding an over-cap event up to its blank line.
    skipping: bool,
    skipped: u64,
}

impl Default for SseFramer {
    fn default() -> Self {
        Self::new()
    }
}

impl SseFramer {
    /// A framer holding at most [`MAX_EVENT_BYTES`] per event.
    pub(crate) fn new() -> Self {
        Self::with_max_event_bytes(MAX_EVENT_BYTES)
    }

    /// A framer holding at most `max` bytes per event.
    pub(crate) fn with_max_event_bytes(max: usize) -> Self {
        Self {
            max_event_bytes: max,
            line: Vec::new(),
            line_ignored: false,
            data: Vec::new(),
            has_data: false,
            event: String::new(),
            after_cr: false,
            bom: Some(0),
            pending: false,
            skipping: false,
            skipped: 0,
        }
    }

    /// Events skipped so far because they were larger than the cap.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Frame the next bytes of the stream, calling `on_event` for each event they complete,
    /// in order.
    ///
    /// Errors: the first error `on_event` returns, at once; the framer's state is then
    /// unspecified and it should not be pushed again.
    pub(crate) fn push<E>(
        &mut self,
        bytes: &[u8],
        on_event: &mut impl FnMut(&SseEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut input = bytes;
        if let Some(mut matched) = self.bom {
            while let (Some(&b), Some(&want)) = (input.first(), BOM.get(matched)) {
                if b != want {
                    break;
                }
                matched += 1;
                input = &input[1..];
            }
            if matched == BOM.len() {
                self.bom = None;
            } else if input.is_empty() {
                self.bom = Some(matched);
                return Ok(());
            } else {
                // Not a BOM: what looked like one is the first line's start.
                self.bom = None;
                self.partial(&BOM[..matched]);
            }
        }
        if self.after_cr {
            match input.first() {
                None => return Ok(()),
                Some(&b) => {
                    self.after_cr = false;
                    if b == b'\n' {
                        input = &input[1..];
                    }
                }
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', input) {
            let head = &input[..i];
            let mut rest = &input[i + 1..];
            if input[i] == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            self.complete_line(head, on_event)?;
            input = rest;
        }
        self.partial(input);
        Ok(())
    }

    /// The stream ended. Returns whether an incomplete event was discarded: bytes after the
    /// last blank line (the standard discards them; an event stream that ends cleanly ends
    /// with a blank line). The framer is then ready for a new stream.
    pub(crate) fn finish(&mut self) -> bool {
        let truncated = self.pending || self.bom.is_some_and(|n| n > 0);
        let skipped = self.skipped;
        *self = Self::with_max_event_bytes(self.max_event_bytes);
        self.skipped = skipped;
        truncated
    }

    /// Whether the current event stays within the cap once the line `line` (whole or its
    /// start) is applied: a `data` value is added to the data (with its joining `\n`), an
    /// `event` value replaces the type; other lines add nothing.
    fn within_cap(&self, line: &[u8]) -> bool {
        self.fits(classify(line))
    }

    /// Whether the current event stays within the cap once a line of kind `kind` is applied
    /// (see [`Self::within_cap`]; for a whole line whose field is already known).
    fn fits(&self, kind: LineKind) -> bool {
        match kind {
            LineKind::Data(n) => {
                self.data
                    .len()
                    .saturating_add(usize::from(self.has_data))
                    .saturating_add(self.event.len())
                    .saturating_add(n)
                    <= self.max_event_bytes
            }
            LineKind::Event(n) => self.data.len().saturating_add(n) <= self.max_event_bytes,
            LineKind::Undecided | LineKind::Ignored => true,
        }
    }

    /// Start discarding the current event: it is over the cap.
    fn skip(&mut self) {
        self.skipping = true;
        self.skipped += 1;
        self.reset_event();
        self.release_line();
    }

    fn reset_event(&mut self) {
        self.data.clear();
        self.event.clear();
        self.has_data = false;
        if self.data.capacity() > KEEP_CAPACITY {
            self.data = Vec::new();
        }
    }

    /// Bytes of a line whose end has not arrived yet.
    fn partial(&mut self, bytes: &[u8]) {
        let Some(&first) = bytes.first() else { return };
        self.pending = true;
        if self.line_ignored {
            return;
        }
        if self.skipping || (self.line.is_empty() && first == b':') {
            self.line_ignored = true;
            return;
        }
        self.line.extend_from_slice(bytes);
        if classify(&self.line) == LineKind::Ignored {
            // A field the events do not keep (`id`, `retry`, unknown): not held.
            self.line_ignored = true;
            self.release_line();
        } else if !self.within_cap(&self.line) {
            self.skip();
            self.line_ignored = true;
        }
    }

    fn release_line(&mut self) {
        self.line.clear();
        if self.line.capacity() > KEEP_CAPACITY {
            self.line = Vec::new();
        }
    }

    /// A line ends: `head` is its part in the current chunk.
    fn complete_line<E>(
        &mut self,
        head: &[u8],
        on_event: &mut impl FnMut(&SseEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.line_ignored {
            self.line_ignored = false;
            return Ok(());
        }
        if self.line.is_empty() {
            return self.line_end(head, on_event);
        }
        self.line.extend_from_slice(head);
        let line = std::mem::take(&mut self.line);
        let r = self.line_end(&line, on_event);
        self.line = line;
        self.release_line();
        r
    }

    /// One whole line (without its line ending).
    fn line_end<E>(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(&SseEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(&first) = line.first() else {
            // A blank line: dispatch.
            self.pending = false;
            if self.skipping {
                self.skipping = false;
                return Ok(());
            }
            if !self.has_data {
                self.event.clear();
                return Ok(());
            }
            let event = SseEvent {
                event: (!self.event.is_empty()).then_some(self.event.as_str()),
                data: &self.data,
            };
            let r = on_event(&event);
            self.reset_event();
            return r;
        };
        self.pending = true;
        if self.skipping || first == b':' {
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(c) => {
                let value = &line[c + 1..];
                (&line[..c], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                if !self.fits(LineKind::Data(value.len())) {
                    self.skip();
                    return Ok(());
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                if !self.fits(LineKind::Event(value.len())) {
                    self.skip();
                    return Ok(());
                }
                self.event.clear();
                // Checked first: a valid name (every real one) is copied without building
                // the lossy decoding.
                match std::str::from_utf8(value) {
                    Ok(name) => self.event.push_str(name),
                    Err(_) => self.event.push_str(&String::from_utf8_lossy(value)),
                }
            }
            // `id` sets the last event id and `retry` the reconnection time: both concern a
            // reconnecting client, not the events. Other fields are ignored by the standard.
            _ => {}
        }
        Ok(())
    }
}

/// What a line (whole, or its start) is, for the event cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind {
    /// A `data` field; its value's length so far (after the optional space).
    Data(usize),
    /// An `event` field; its value's length so far.
    Event(usize),
    /// No colon yet, and the bytes could still become `data` or `event` (a line of just a
    /// field name is that field with an empty value).
    Undecided,
    /// A comment, or any other field: nothing of it is kept.
    Ignored,
}

/// Classify `line` (the standard: the field name runs to the first colon; a line without one
/// is a field named by the whole line).
fn classify(line: &[u8]) -> LineKind {
    match memchr::memchr(b':', line) {
        None if b"data".starts_with(line) || b"event".starts_with(line) => LineKind::Undecided,
        None => LineKind::Ignored,
        Some(c) => {
            let value = &line[c + 1..];
            let n = value.strip_prefix(b" ").unwrap_or(value).len();
            match &line[..c] {
                b"data" => LineKind::Data(n),
                b"event" => LineKind::Event(n),
                _ => LineKind::Ignored,
            }
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
pub(super) mod tests {
    use super::*;

    /// An owned copy of an event, to compare.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Ev {
        pub event: Option<String>,
        pub data: Vec<u8>,
    }

    impl Ev {
        pub(crate) fn of(e: &SseEvent<'_>) -> Self {
            Ev {
                event: e.event.map(str::to_owned),
                data: e.data.to_vec(),
            }
        }
    }

    pub(crate) fn ev(event: Option<&str>, data: &str) -> Ev {
        Ev {
            event: event.map(str::to_owned),
            data: data.as_bytes().to_vec(),
        }
    }

    /// A recorded Anthropic Messages stream (shape of the real API: `event:` + `data:` pairs,
    /// a `ping`, a comment line as some gateways add, usage in `message_start` and
    /// `message_delta`).
    pub(crate) const ANTHROPIC: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":11800,\"output_tokens\":2}}}\n",
        "\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n",
        "\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n",
        "\n",
        ": OPENROUTER PROCESSING\n",
        "\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n",
        "\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"! How can I help?\"}}\n",
        "\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n",
        "\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":12}}\n",
        "\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n",
        "\n",
    );

    /// A recorded OpenAI Chat Completions stream: `data:`-only events, the usage chunk with
    /// empty `choices` (with `stream_options.include_usage`), then `data: [DONE]`.
    pub(crate) const OPENAI: &str = concat!(
        "data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n",
        "\n",
        "data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[],\"usage\":{\"prompt_tokens\":1117,\"completion_tokens\":46,\"total_tokens\":1163,\"prompt_tokens_details\":{\"cached_tokens\":1024,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n",
        "\n",
        "data: [DONE]\n",
        "\n",
    );

    /// Frame `chunks` in order; the events and whether `finish` reported a truncated event.
    pub(crate) fn frame(framer: &mut SseFramer, chunks: &[&[u8]]) -> (Vec<Ev>, bool) {
        let mut got = Vec::new();
        for c in chunks {
            framer
                .push(c, &mut |e: &SseEvent<'_>| -> Result<(), ()> {
                    got.push(Ev::of(e));
                    Ok(())
                })
                .unwrap();
        }
        (got, framer.finish())
    }

    fn frame_all(bytes: &[u8]) -> (Vec<Ev>, bool) {
        frame(&mut SseFramer::new(), &[bytes])
    }

    /// Every split of `stream` into two chunks gives `want`; so does byte-by-byte.
    fn every_split(stream: &[u8], want: &[Ev]) {
        for at in 0..=stream.len() {
            let (a, b) = stream.split_at(at);
            let (got, truncated) = frame(&mut SseFramer::new(), &[a, b]);
            assert_eq!(got, want, "split at {at}");
            assert!(!truncated, "split at {at}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(frame(&mut SseFramer::new(), &bytes).0, want);
    }

    fn anthropic_events() -> Vec<Ev> {
        let payload = |s: &str| s.strip_prefix("data: ").unwrap().to_owned();
        let mut want = Vec::new();
        let mut event = None;
        for line in ANTHROPIC.lines() {
            if let Some(name) = line.strip_prefix("event: ") {
                event = Some(name.to_owned());
            } else if line.starts_with("data: ") {
                want.push(Ev {
                    event: event.take(),
                    data: payload(line).into_bytes(),
                });
            }
        }
        want
    }

    #[test]
    fn anthropic_stream_in_every_two_chunk_split() {
        let want = anthropic_events();
        assert_eq!(want.len(), 8);
        assert_eq!(want[2], ev(Some("ping"), "{\"type\": \"ping\"}"));
        assert_eq!(frame_all(ANTHROPIC.as_bytes()).0, want);
        every_split(ANTHROPIC.as_bytes(), &want);
    }

    #[test]
    fn anthropic_stream_with_crlf_in_every_two_chunk_split() {
        let crlf = ANTHROPIC.replace('\n', "\r\n");
        every_split(crlf.as_bytes(), &anthropic_events());
    }

    #[test]
    fn lone_cr_line_endings_in_every_two_chunk_split() {
        let cr = ANTHROPIC.replace('\n', "\r");
        every_split(cr.as_bytes(), &anthropic_events());
    }

    #[test]
    fn openai_data_only_stream_in_every_two_chunk_split() {
        let (want, _) = frame_all(OPENAI.as_bytes());
        assert_eq!(want.len(), 5);
        assert!(want.iter().all(|e| e.event.is_none()));
        assert_eq!(want[4], ev(None, "[DONE]"));
        assert!(want[3]
            .data
            .starts_with(b"{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\""));
        every_split(OPENAI.as_bytes(), &want);
    }

    #[test]
    fn a_split_crlf_is_one_line_ending() {
        // "\r" | "\n": not a blank line between them.
        let (got, _) = frame(&mut SseFramer::new(), &[b"data: a\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(got, vec![ev(None, "a\nb")]);
        // An empty push between the halves changes nothing.
        let (got, _) = frame(
            &mut SseFramer::new(),
            &[b"data: a\r", b"", b"\ndata: b\r\n\r\n"],
        );
        assert_eq!(got, vec![ev(None, "a\nb")]);
    }

    #[test]
    fn multi_line_data_joins_with_newline_and_one_space_is_stripped() {
        let (got, _) = frame_all(b"data:first\ndata:  second\ndata\ndata:\n\n");
        assert_eq!(got, vec![ev(None, "first\n second\n\n")]);
    }

    #[test]
    fn fields_comments_and_dispatch_rules() {
        let s = b": comment\nid: 7\nretry: 1000\nfoo: bar\nevent: delta\ndata: x\n\n\
                  event: lonely\n\n\
                  data: after\n\n\
                  event\ndata: y\n\n";
        let (got, truncated) = frame_all(s);
        // The event without data is not dispatched and its type does not leak into the next;
        // `event` with no colon is an empty type: the default.
        assert_eq!(
            got,
            vec![ev(Some("delta"), "x"), ev(None, "after"), ev(None, "y")]
        );
        assert!(!truncated);
    }

    #[test]
    fn a_bom_at_the_start_is_dropped_even_when_split() {
        let s = b"\xef\xbb\xbfdata: a\n\n";
        every_split(s, &[ev(None, "a")]);
        // Not a BOM: bytes that begin like one are the line's start.
        let (got, _) = frame_all(b"\xef\xbbdata: a\n\n");
        assert!(got.is_empty(), "{got:?}");
        let (got, _) = frame_all(b"\xef\xbb\n\ndata: a\n\n");
        assert_eq!(got, vec![ev(None, "a")]);
        // Only at the stream's start.
        let (got, _) = frame_all(b"data: a\n\n\xef\xbb\xbfdata: b\n\n");
        assert_eq!(got, vec![ev(None, "a")]);
    }

    #[test]
    fn a_truncated_last_event_is_discarded_and_reported() {
        let s = b"data: one\n\ndata: tw";
        for at in 0..=s.len() {
            let (a, b) = s.split_at(at);
            let (got, truncated) = frame(&mut SseFramer::new(), &[a, b]);
            assert_eq!(got, vec![ev(None, "one")]);
            assert!(truncated);
        }
        let (got, truncated) = frame_all(b"data: one\n\ndata: two\n");
        assert_eq!(got, vec![ev(None, "one")]);
        assert!(truncated);
        assert!(!frame_all(b"data: one\n\n").1);
        assert!(!frame_all(b"").1);
    }

    #[test]
    fn an_over_cap_event_is_skipped_and_the_next_one_seen() {
        let big = format!("event: big\ndata: {}\ndata: more\n\n", "x".repeat(100));
        let s = format!("data: before\n\n{big}event: next\ndata: after\n\n");
        let want = vec![ev(None, "before"), ev(Some("next"), "after")];
        for at in 0..=s.len() {
            let (a, b) = s.as_bytes().split_at(at);
            let mut f = SseFramer::with_max_event_bytes(64);
            let (got, truncated) = frame(&mut f, &[a, b]);
            assert_eq!(got, want, "split at {at}");
            assert!(!truncated);
            assert_eq!(f.skipped(), 1, "split at {at}");
        }
        // Many data lines, each small, adding up past the cap.
        let many = format!("{}\ndata: after\n\n", "data: 0123456789\n".repeat(10));
        let mut f = SseFramer::with_max_event_bytes(64);
        assert_eq!(frame(&mut f, &[many.as_bytes()]).0, vec![ev(None, "after")]);
        assert_eq!(f.skipped(), 1);
        // An event of exactly the cap fits.
        let mut f = SseFramer::with_max_event_bytes(4);
        assert_eq!(
            frame(&mut f, &[b"data: abcd\n\n"]).0,
            vec![ev(None, "abcd")]
        );
    }

    /// Found by the framing property (`tests/properties_stream.rs`): with a 16-byte cap,
    /// `data:{"type":"ping"}` (15 bytes of data) was dispatched when its line arrived in one
    /// chunk and skipped when it arrived in pieces (the field name counted then). The cap
    /// counts values only, whatever the split; lines of other fields are never held.
    #[test]
    fn the_cap_does_not_depend_on_the_split() {
        let s = b"data:{\"type\":\"ping\"}\n\n";
        let want = vec![ev(None, "{\"type\":\"ping\"}")];
        for at in 0..=s.len() {
            let (a, b) = s.split_at(at);
            let mut f = SseFramer::with_max_event_bytes(16);
            assert_eq!(frame(&mut f, &[a, b]).0, want, "split at {at}");
            assert_eq!(f.skipped(), 0);
        }
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        let mut f = SseFramer::with_max_event_bytes(16);
        assert_eq!(frame(&mut f, &bytes).0, want);
        // An `id` line far over the cap, in pieces: not held, the event not skipped.
        let s = format!("id: {}\ndata: a\n\n", "7".repeat(1000));
        let chunks: Vec<&[u8]> = s.as_bytes().chunks(10).collect();
        let mut f = SseFramer::with_max_event_bytes(16);
        assert_eq!(frame(&mut f, &chunks).0, vec![ev(None, "a")]);
        assert_eq!(f.skipped(), 0);
        assert!(f.line.capacity() <= 32, "{}", f.line.capacity());
        // Over the cap by the joining newline: skipped in every split.
        let s = b"data: 01234567\ndata: 0123456\n\ndata: b\n\n";
        for at in 0..=s.len() {
            let (a, b) = s.split_at(at);
            let mut f = SseFramer::with_max_event_bytes(15);
            assert_eq!(
                frame(&mut f, &[a, b]).0,
                vec![ev(None, "b")],
                "split at {at}"
            );
            assert_eq!(f.skipped(), 1);
        }
    }

    #[test]
    fn long_comments_are_not_held() {
        let s = format!(": {}\ndata: a\n\n", "c".repeat(1000));
        let chunks: Vec<&[u8]> = s.as_bytes().chunks(10).collect();
        let mut f = SseFramer::with_max_event_bytes(16);
        assert_eq!(frame(&mut f, &chunks).0, vec![ev(None, "a")]);
        assert_eq!(f.skipped(), 0);
    }

    #[test]
    fn invalid_utf8_data_passes_as_bytes() {
        let s = b"event: \xff\xfe\ndata: \xc3\x28 \xa0\xa1\n\n";
        let (got, _) = frame_all(s);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data, b"\xc3\x28 \xa0\xa1");
        assert_eq!(got[0].event.as_deref(), Some("\u{fffd}\u{fffd}"));
    }

    #[test]
    fn garbage_never_panics() {
        // Deterministic noise with many line endings and colons, in odd chunk sizes.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let bytes: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                [b'\n', b'\r', b':', b' ', b'd', b'a', b't', 0xef, 0xbb, 0xbf][(x % 10) as usize]
            })
            .collect();
        for size in [1, 3, 7, 64, 4096] {
            let chunks: Vec<&[u8]> = bytes.chunks(size).collect();
            let mut f = SseFramer::with_max_event_bytes(32);
            frame(&mut f, &chunks);
        }
    }

    #[test]
    fn the_callbacks_error_stops_the_push() {
        let mut f = SseFramer::new();
        let mut n = 0;
        let r = f.push(b"data: a\n\ndata: b\n\n", &mut |_: &SseEvent<'_>| {
            n += 1;
            Err("stop")
        });
        assert_eq!(r, Err("stop"));
        assert_eq!(n, 1);
    }
}
