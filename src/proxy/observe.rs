//! The response observer every proxied response passes through: counts the bytes, turns a
//! mid-stream break into the dialect's error event, lets the taps see the body, and writes
//! the request's log line from its context once the body has ended and every tap is done.

use bytes::Bytes;

use crate::proxy::ctx::RequestCtx;
use crate::proxy::errors::midstream_error_event;
use crate::telemetry::Outcome;
use crate::wire::stream::{BodyObserver, Break, End};

/// Observes one response on behalf of its request.
pub(crate) struct ResponseObserver {
    ctx: RequestCtx,
    /// The response is an event stream the observer may end with the dialect's error event
    /// (not when it has a `content-encoding`: plain text cannot be appended to it).
    event_stream: bool,
    /// The last bytes sent to the client (at most 4), to tell whether an event was cut
    /// mid-way.
    tail: Vec<u8>,
    /// Further observers of the body (the response side plugs in here); each sees every
    /// chunk, a break, and the end, before the log line is written.
    taps: Vec<Box<dyn BodyObserver>>,
}

impl ResponseObserver {
    /// Observe a response for `ctx`; `event_stream` when its content type is
    /// `text/event-stream`.
    pub(crate) fn new(ctx: RequestCtx, event_stream: bool) -> Self {
        Self {
            ctx,
            event_stream,
            tail: Vec::with_capacity(8),
            taps: Vec::new(),
        }
    }

    /// Add a tap: it sees the body after the observer's own counting, and its `on_end` runs
    /// before the log line is written. (The response side's per-dialect observers plug in
    /// here.)
    #[cfg(test)]
    pub(crate) fn tap(mut self, tap: Box<dyn BodyObserver>) -> Self {
        self.taps.push(tap);
        self
    }
}

impl BodyObserver for ResponseObserver {
    fn on_data(&mut self, chunk: &Bytes) {
        self.ctx.response_bytes += chunk.len() as u64;
        self.tail
            .extend_from_slice(&chunk[chunk.len().saturating_sub(4)..]);
        let excess = self.tail.len().saturating_sub(4);
        self.tail.drain(..excess);
        for t in &mut self.taps {
            t.on_data(chunk);
        }
    }

    fn on_break(&mut self, why: Break, detail: &str) -> Option<Bytes> {
        tracing::warn!(
            target: "cachekeeper::stream",
            route = self.ctx.route_name(),
            detail = %detail,
            "upstream response broke mid-way"
        );
        for t in &mut self.taps {
            // A tap never decides what the client sees.
            let _ = t.on_break(why, detail);
        }
        self.ctx.error = Some(outcome(End::Broken(why)).as_str());
        self.ctx.error_source = Some("upstream");
        // Anthropic and OpenAI event streams end with their error event; Gemini streams and
        // non-streaming bodies are aborted.
        if !self.event_stream {
            return None;
        }
        let event = midstream_error_event(self.ctx.dialect, detail)?;
        // The upstream may have broken inside an event: end that event first (a blank line
        // ends an event), so the error event is read as an event of its own.
        let t = self.tail.as_slice();
        let ending: &[u8] = if t.is_empty()
            || t.ends_with(b"\n\n")
            || t.ends_with(b"\r\n\r\n")
            || t.ends_with(b"\r\r")
        {
            b""
        } else if t.ends_with(b"\n") || t.ends_with(b"\r") {
            b"\n"
        } else {
            b"\n\n"
        };
        if ending.is_empty() {
            return Some(event);
        }
        let mut framed = Vec::with_capacity(event.len() + 2);
        framed.extend_from_slice(ending);
        framed.extend_from_slice(&event);
        Some(Bytes::from(framed))
    }

    fn on_end(&mut self, end: End) {
        for t in &mut self.taps {
            t.on_end(end);
        }
        self.ctx.emit(outcome(end));
    }
}

fn outcome(end: End) -> Outcome {
    match end {
        End::Complete => Outcome::Complete,
        End::Broken(Break::UpstreamBroken) => Outcome::UpstreamBroken,
        End::Broken(Break::IdleTimeout) => Outcome::IdleTimeout,
        End::ClientGone => Outcome::ClientDisconnected,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::dialect::Dialect;
    use crate::proxy::ctx::tests::capture;
    use std::sync::{Arc, Mutex};

    struct Tap(Arc<Mutex<Vec<String>>>);

    impl BodyObserver for Tap {
        fn on_data(&mut self, chunk: &Bytes) {
            self.0.lock().unwrap().push(format!("data {}", chunk.len()));
        }
        fn on_break(&mut self, _why: Break, _detail: &str) -> Option<Bytes> {
            self.0.lock().unwrap().push("break".into());
            // A tap's chunk is ignored: only the proxy decides what the client sees.
            Some(Bytes::from_static(b"tap"))
        }
        fn on_end(&mut self, end: End) {
            self.0.lock().unwrap().push(format!("end {end:?}"));
        }
    }

    fn ctx(dialect: Dialect) -> RequestCtx {
        let uri: http::Uri = "/anthropic/v1/messages".parse().unwrap();
        let mut ctx = RequestCtx::new(&http::Method::POST, &uri);
        ctx.dialect = Some(dialect);
        ctx
    }

    #[test]
    fn taps_finish_before_the_log_line_which_counts_every_byte() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let lines = capture(|| {
            let mut o = ResponseObserver::new(ctx(Dialect::Anthropic), true)
                .tap(Box::new(Tap(seen.clone())));
            o.on_data(&Bytes::from_static(b"event: ping\n\n"));
            let last = o.on_break(Break::UpstreamBroken, "reset").unwrap();
            assert!(last.starts_with(b"event: error\ndata: {"));
            o.on_data(&last);
            o.on_end(End::Broken(Break::UpstreamBroken));
            // The log line is written only in on_end, after every tap.
            assert_eq!(
                seen.lock().unwrap().last().unwrap(),
                "end Broken(UpstreamBroken)"
            );
        });
        let request: Vec<_> = lines
            .iter()
            .filter(|l| l["target"] == "cachekeeper::request")
            .collect();
        assert_eq!(request.len(), 1);
        let l = request[0];
        assert_eq!(l["outcome"], "upstream_broken");
        assert_eq!(l["error"], "upstream_broken");
        let error_event_len = seen.lock().unwrap()[2]
            .trim_start_matches("data ")
            .parse::<u64>()
            .unwrap();
        assert_eq!(l["response_bytes"], 13 + error_event_len);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                "data 13".to_owned(),
                "break".to_owned(),
                format!("data {error_event_len}"),
                "end Broken(UpstreamBroken)".to_owned()
            ]
        );
    }

    /// The failing input: the upstream reset inside `data: {...` of a delta event; the error
    /// event was glued onto the partial line (`…"indevent: error`), so the Anthropic SDK
    /// ended the stream without an error.
    #[test]
    fn an_event_cut_mid_way_is_ended_before_the_error_event() {
        for (sent, sep) in [
            (
                &b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"ind"[..],
                "\n\n",
            ),
            (b"event: ping\ndata: {}\n", "\n"),
            (b"event: ping\r\ndata: {}\r\n", "\n"),
            (b"event: ping\ndata: {}\n\n", ""),
            (b"event: ping\r\ndata: {}\r\n\r\n", ""),
            (b"", ""),
        ] {
            let mut o = ResponseObserver::new(ctx(Dialect::Anthropic), true);
            // Split anywhere: the tail is tracked across chunks.
            for piece in sent.chunks(3) {
                o.on_data(&Bytes::copy_from_slice(piece));
            }
            let last = o.on_break(Break::UpstreamBroken, "reset").unwrap();
            let text = std::str::from_utf8(&last).unwrap();
            assert!(
                text.starts_with(&format!("{sep}event: error\ndata: {{")),
                "{sent:?}: {text:?}"
            );
            o.on_end(End::Broken(Break::UpstreamBroken));
        }
    }

    #[test]
    fn gemini_and_plain_bodies_are_aborted_not_ended_cleanly() {
        let mut o = ResponseObserver::new(ctx(Dialect::Gemini), true);
        assert!(o.on_break(Break::UpstreamBroken, "reset").is_none());
        let mut o = ResponseObserver::new(ctx(Dialect::Anthropic), false);
        assert!(o.on_break(Break::IdleTimeout, "idle").is_none());
    }
}
