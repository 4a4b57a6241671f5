//! The response observer every proxied response passes through: counts the bytes, turns a
//! mid-stream break into the dialect's error event, feeds a copy of the body through the tee
//! ([`crate::wire::tee`]) to the dialect's response observer ([`crate::response`]), and once
//! the body has ended writes what that observer read into the context — usage, carriers seen,
//! the captured turn into the store ([`carriers::save`]) — and then hands the request's
//! bookkeeping (log line, metrics, the turn's accounting) to a task after the response
//! ([`RequestCtx::emit`]).
//!
//! Everything here runs synchronously in the body's poll: memory writes and a queued write
//! to the store's writer thread, no I/O, no lock held across an await. Nothing here can
//! change the client's bytes. With a shared store (Redis) the chunk that completes the turn
//! is held until the turn's writes reach it, at most `[state] write_wait_ms`
//! ([`crate::state::settle`]), so the next turn finds them on any instance.

use bytes::Bytes;

use crate::dialect::fingerprint;
use crate::dialect::Dialect;
use crate::proxy::ctx::RequestCtx;
use crate::proxy::errors::midstream_error_event;
use crate::reasoning::carriers;
use crate::response::{self, ResponseSink};
use crate::state::Store;
use crate::telemetry::Outcome;
use crate::wire::stream::{BodyObserver, Break, End, Hold};
use crate::wire::tee::{Framing, Tee};

/// The copy of a generation response being observed, and where its turn goes.
pub(crate) struct Observing {
    tee: Tee<ResponseSink>,
    /// The store that receives the captured turn.
    store: Store,
}

impl Observing {
    /// Observe a response of `dialect` framed as `framing` (from its content type:
    /// `text/event-stream`, an AWS event stream, else JSON) with the given `content-encoding`.
    pub(crate) fn new(
        dialect: Dialect,
        framing: Framing,
        content_encoding: Option<&str>,
        store: Store,
    ) -> Self {
        Self {
            tee: Tee::new(framing, content_encoding, response::observer(dialect)),
            store,
        }
    }
}

/// Observes one response on behalf of its request.
pub(crate) struct ResponseObserver {
    ctx: RequestCtx,
    /// The response is an event stream the observer may end with the dialect's error event
    /// (not when it has a `content-encoding`: plain text cannot be appended to it).
    event_stream: bool,
    /// The last bytes sent to the client (at most 4), to tell whether an event was cut
    /// mid-way.
    tail: Vec<u8>,
    /// The copy fed to the dialect's response observer (generation responses only); taken
    /// when observing finishes.
    observing: Option<Observing>,
    /// The stream's own end marker went by ([`ResponseSink::saw_end_marker`]).
    end_marker: bool,
    /// Further observers of the body (tests); each sees every chunk, a break, and the end,
    /// before the log line is written.
    taps: Vec<Box<dyn BodyObserver>>,
    /// The wait for the turn's writes ([`crate::state::Store::settled`]), made when the
    /// response completed; taken by the body ([`BodyObserver::hold`]).
    hold: Option<Hold>,
}

impl ResponseObserver {
    /// Observe a response for `ctx`; `event_stream` when its content type is
    /// `text/event-stream`.
    pub(crate) fn new(ctx: RequestCtx, event_stream: bool, observing: Option<Observing>) -> Self {
        Self {
            ctx,
            event_stream,
            tail: Vec::with_capacity(8),
            observing,
            end_marker: false,
            taps: Vec::new(),
            hold: None,
        }
    }

    /// Observing is done (the stream's end marker went by, or the body ended): what the
    /// dialect's observer read goes into the context, and the turn with its carriers into the
    /// store ([`carriers::save`]: sealed under the credential's key, or memory only without
    /// one), keyed by (credential scope, upstream host, model as the request named it, turn
    /// fingerprint). A complete response then waits for those writes with a shared store
    /// ([`crate::state::Store::settled`]; the body asks [`BodyObserver::hold`]).
    fn finish_observing(&mut self, end: End) {
        let Some(mut o) = self.observing.take() else {
            return;
        };
        o.tee.on_end(end);
        self.record_turn(&o);
        if end == End::Complete && o.store.holds_for_writes() {
            // Queued after every write of this turn (its session record now, its carriers
            // just now): the wait ends when they are all stored. Without a wait the session's
            // record is queued after the response, with the rest of the bookkeeping.
            self.ctx.write_session_state();
            self.hold = o.store.settled();
        }
    }

    /// What the dialect's observer read goes into the context, and the turn with its
    /// carriers into the store (see [`Self::finish_observing`]).
    fn record_turn(&mut self, o: &Observing) {
        let seen = &mut self.ctx.seen;
        seen.observe_error = o.tee.stopped();
        let observed = o.tee.sink().observed();
        seen.usage = observed.usage;
        seen.reasoning_seen = observed.reasoning_seen;
        seen.upstream_error.clone_from(&observed.error);
        seen.response_id.clone_from(&observed.response_id);
        if let (Some(id), Some(sessions), Some(account)) = (
            observed.response_id.as_deref(),
            self.ctx.sessions.as_ref(),
            self.ctx.turn.as_ref(),
        ) {
            // Before the write wait below, so the next turn finds the link on any instance.
            sessions.link_response(&self.ctx.credential_scope, id, &account.session);
        }
        let seen = &mut self.ctx.seen;
        let (Some(turn), Some(answers), Some(model), Some(route)) = (
            observed.turn.as_ref(),
            self.ctx.answers.as_ref(),
            self.ctx.model.as_deref(),
            self.ctx.route.as_deref(),
        ) else {
            return;
        };
        if turn.carriers.is_empty() {
            return;
        }
        let fp = fingerprint::turn_fingerprint(answers, turn);
        seen.turn_captured = carriers::save(
            &o.store,
            &self.ctx.credential_scope,
            self.ctx.sealing.as_ref(),
            &route.provider.host,
            model,
            &fp,
            turn,
        );
    }

    /// Add a tap (tests): it sees the body after the observer's own counting, and its
    /// `on_end` runs before the log line is written.
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
        if let Some(o) = &mut self.observing {
            o.tee.on_data(chunk);
            self.end_marker = o.tee.sink().saw_end_marker();
        }
        if self.end_marker {
            // The turn is complete: record it now, before this chunk reaches the client, so
            // the agent's next turn (which may follow at once) finds it.
            self.finish_observing(End::Complete);
        }
        for t in &mut self.taps {
            t.on_data(chunk);
        }
    }

    fn on_break(&mut self, why: Break, detail: &str) -> Option<Bytes> {
        if why == Break::Shutdown {
            tracing::info!(
                target: "cachekeeper::stream",
                route = self.ctx.route_name(),
                "shutdown grace over; response ended after its last complete event"
            );
        } else {
            tracing::warn!(
                target: "cachekeeper::stream",
                route = self.ctx.route_name(),
                detail = %detail,
                "upstream response broke mid-way"
            );
        }
        if let Some(o) = &mut self.observing {
            // The tee never decides what the client sees.
            let _ = o.tee.on_break(why, detail);
        }
        for t in &mut self.taps {
            // A tap never decides what the client sees.
            let _ = t.on_break(why, detail);
        }
        self.ctx.error = Some(outcome(End::Broken(why)).as_str());
        // A shutdown cut is the proxy's own doing: no source.
        self.ctx.error_source = (why != Break::Shutdown).then_some("upstream");
        // Anthropic and OpenAI event streams end with their error event; Gemini streams and
        // non-streaming bodies are aborted.
        if !self.event_stream {
            return None;
        }
        let last_sequence = self
            .observing
            .as_ref()
            .and_then(|o| o.tee.sink().observed().sequence_number);
        // The upstream may have broken inside an event. After a whole line (the event's
        // blank line missing) a line end completes the event as sent, and the error event
        // follows as an event of its own. Inside a line, any ending would hand the client
        // the cut line as an event (`data: {"id":…,"system_fin`: a JSON error in the SDK
        // instead of the break): the stream is aborted instead, and the client sees the break.
        let t = self.tail.as_slice();
        let ending: &[u8] = if t.is_empty()
            || t.ends_with(b"\n\n")
            || t.ends_with(b"\r\n\r\n")
            || t.ends_with(b"\r\r")
        {
            b""
        } else if t.ends_with(b"\n") {
            b"\n"
        } else if t.ends_with(b"\r") {
            // A `\n` here would pair with the `\r` into one line end: two make the blank line.
            b"\n\n"
        } else {
            return None;
        };
        // The request's dialect, else (a path the proxy did not parse) the one its errors take.
        let dialect = self.ctx.dialect.or_else(|| self.ctx.error_dialect());
        let event = midstream_error_event(dialect, why, detail, last_sequence)?;
        if ending.is_empty() {
            return Some(event);
        }
        let mut framed = Vec::with_capacity(event.len() + 2);
        framed.extend_from_slice(ending);
        framed.extend_from_slice(&event);
        Some(Bytes::from(framed))
    }

    fn on_end(&mut self, end: End) {
        // The client left after the stream's own end marker: it had the whole response (the
        // official OpenAI SDK stops reading at `[DONE]`).
        let end = match end {
            End::ClientGone if self.end_marker => End::Complete,
            other => other,
        };
        self.finish_observing(end);
        for t in &mut self.taps {
            t.on_end(end);
        }
        self.ctx.emit(outcome(end));
    }

    fn hold(&mut self) -> Option<Hold> {
        self.hold.take()
    }
}

fn outcome(end: End) -> Outcome {
    match end {
        End::Complete => Outcome::Complete,
        End::Broken(Break::UpstreamBroken) => Outcome::UpstreamBroken,
        End::Broken(Break::IdleTimeout) => Outcome::IdleTimeout,
        End::Broken(Break::Shutdown) => Outcome::Shutdown,
        End::ClientGone => Outcome::ClientDisconnected,
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
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
            let mut o = ResponseObserver::new(ctx(Dialect::Anthropic), true, None)
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

    /// The upstream reset after a whole line of an event (its blank line missing, or cut
    /// between CR and LF): the event is ended as sent, then the error event. Reset inside a
    /// line (`data: {"type":"content_block_delta","ind`): no ending makes the cut line a
    /// valid event (it would be handed to the SDK as one: a JSON error instead of the break),
    /// so nothing is appended and the stream is aborted.
    #[test]
    fn an_event_cut_after_a_line_is_ended_before_the_error_event_and_inside_one_aborted() {
        for (sent, sep) in [
            (
                &b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"ind"[..],
                None,
            ),
            (b"event: ping\ndata: {}\n", Some("\n")),
            (b"event: ping\r\ndata: {}\r\n", Some("\n")),
            // An earlier failing input: cut between CR and LF; one `\n` joined the two events.
            (b"event: ping\r\ndata: {}\r", Some("\n\n")),
            (b"event: ping\ndata: {}\n\n", Some("")),
            (b"event: ping\r\ndata: {}\r\n\r\n", Some("")),
            (b"", Some("")),
        ] {
            let mut o = ResponseObserver::new(ctx(Dialect::Anthropic), true, None);
            // Split anywhere: the tail is tracked across chunks.
            for piece in sent.chunks(3) {
                o.on_data(&Bytes::copy_from_slice(piece));
            }
            let last = o.on_break(Break::UpstreamBroken, "reset");
            match sep {
                None => assert!(last.is_none(), "{sent:?}: {last:?}"),
                Some(sep) => {
                    let last = last.unwrap();
                    let text = std::str::from_utf8(&last).unwrap();
                    assert!(
                        text.starts_with(&format!("{sep}event: error\ndata: {{")),
                        "{sent:?}: {text:?}"
                    );
                }
            }
            o.on_end(End::Broken(Break::UpstreamBroken));
        }
    }

    #[test]
    fn gemini_and_plain_bodies_are_aborted_not_ended_cleanly() {
        let mut o = ResponseObserver::new(ctx(Dialect::Gemini), true, None);
        assert!(o.on_break(Break::UpstreamBroken, "reset").is_none());
        let mut o = ResponseObserver::new(ctx(Dialect::Anthropic), false, None);
        assert!(o.on_break(Break::IdleTimeout, "idle").is_none());
    }

    /// The failing input: an event stream on a path the proxy does not parse (no request
    /// dialect) broke mid-way and was ended with OpenAI's error event whatever the path: a
    /// Gemini path's stream is aborted, an Anthropic path's ends with Anthropic's event.
    #[test]
    fn an_unparsed_streams_break_takes_the_dialect_of_the_paths_errors() {
        let unparsed = |path: &str| {
            let uri: http::Uri = path.parse().unwrap();
            RequestCtx::new(&http::Method::GET, &uri)
        };
        let mut o = ResponseObserver::new(
            unparsed("/x/v1beta/models/g:streamGenerateContent"),
            true,
            None,
        );
        assert!(o.on_break(Break::UpstreamBroken, "reset").is_none());
        o.on_end(End::Broken(Break::UpstreamBroken));
        let mut o = ResponseObserver::new(unparsed("/anthropic/v1/messages"), true, None);
        let last = o.on_break(Break::UpstreamBroken, "reset").unwrap();
        assert!(last.starts_with(b"event: error\ndata: {"), "{last:?}");
        assert!(std::str::from_utf8(&last)
            .unwrap()
            .contains(r#""type":"api_error""#));
        o.on_end(End::Broken(Break::UpstreamBroken));
    }

    fn memory_store() -> Store {
        Store::with_backend(
            Box::new(crate::state::MemoryBackend::new()),
            0,
            u64::MAX,
            1 << 20,
        )
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/responses")
                .join(name),
        )
        .unwrap()
    }

    /// Request → response → the next request echoing the turn: the record the observer put
    /// in memory is found under the key the echoed turn gives (what the restore side reads),
    /// and the log line carries the usage the stream reported.
    #[test]
    fn a_streamed_turn_is_captured_under_the_key_its_echo_gives() {
        let route = {
            let (c, _) = crate::config::Config::from_toml(
                "[[routes]]\nname='a'\nprefix='/anthropic'\nupstream='https://api.anthropic.com'\n",
            )
            .unwrap();
            crate::route::RouteTable::new(&c)
                .unwrap()
                .find("/anthropic/v1/messages", None)
                .unwrap()
                .route
        };
        let request = fixture("anthropic_request.json");
        let doc = crate::dialect::parse(&request, Dialect::Anthropic).unwrap();
        let answers = crate::dialect::last_message(&doc).unwrap();
        let store = memory_store();
        let mut c = ctx(Dialect::Anthropic);
        c.route = Some(route);
        c.endpoint = Some(crate::dialect::format::Endpoint::Generate);
        c.model = doc.model.clone();
        c.credential_scope = "scope-a".into();
        let sealing = crate::state::seal::SealKey::from_bytes([3; 32]);
        c.sealing = Some(sealing.clone());
        c.answers = Some(fingerprint::message_digest(
            Dialect::Anthropic,
            &request[answers],
        ));
        let sse = fixture("anthropic_thinking_tool.sse");
        let lines = capture(|| {
            let observing = Observing::new(
                Dialect::Anthropic,
                Framing::EventStream,
                None,
                store.clone(),
            );
            let mut o = ResponseObserver::new(c, true, Some(observing));
            for piece in sse.chunks(37) {
                o.on_data(&Bytes::copy_from_slice(piece));
            }
            // Recorded when `message_stop` went by, before the body's end.
            assert!(
                store.cached_bytes() > 0,
                "the turn is in memory before the end"
            );
            o.on_end(End::Complete);
        });
        let line = lines
            .iter()
            .find(|l| l["target"] == "cachekeeper::request")
            .unwrap();
        assert!(line["reasoning_seen"].as_u64().unwrap() >= 1, "{line}");
        assert_eq!(line["turn_captured"], true);
        assert!(line["output_tokens"].as_u64().is_some(), "{line}");
        assert!(line.get("observe_error").is_none(), "{line}");

        // The next request echoes the turn (here with its carriers; without them the
        // fingerprint is the same, which the response module's tests show).
        let next: serde_json::Value =
            serde_json::from_slice(&fixture("anthropic_next_request.json")).unwrap();
        let m = &next["messages"];
        let prev = fingerprint::message_digest(Dialect::Anthropic, m[0].to_string().as_bytes());
        let echoed =
            fingerprint::echoed_turn(Dialect::Anthropic, m[1].to_string().as_bytes()).unwrap();
        let fp = fingerprint::turn_fingerprint(&prev, &echoed);
        let model = doc.model.as_deref().unwrap();
        let key = crate::state::RecordKey {
            kind: crate::state::Kind::Carrier,
            scope: "scope-a".into(),
            key: carriers::carrier_key("api.anthropic.com", model, &fp),
        };
        let rec = store
            .get_cached(&key)
            .expect("the captured turn is in memory");
        // Sealed under the request credential's key: not JSON.
        assert!(serde_json::from_slice::<serde_json::Value>(&rec.value).is_err());
        use carriers::TurnLookup;
        let found = crate::state::load::with_load(&store, |r| {
            carriers::StoreLookup::new(r, "scope-a", Some(&sealing), "api.anthropic.com")
                .find(model, &fp)
        })
        .expect("the lookup opens it");
        assert!(!found.carriers.is_empty());
        // Another credential does not see it.
        let other = crate::state::seal::SealKey::from_bytes([4; 32]);
        assert!(crate::state::load::with_load(&store, |r| {
            carriers::StoreLookup::new(r, "scope-b", Some(&other), "api.anthropic.com")
                .find(model, &fp)
        })
        .is_none());
    }

    /// Garbage instead of JSON: the client's bytes are untouched (the observer only reads),
    /// observing stops with a reason, usage is absent, no panic.
    #[test]
    fn garbage_is_not_usage() {
        let lines = capture(|| {
            let observing = Observing::new(Dialect::Openai, Framing::Json, None, memory_store());
            let mut c = ctx(Dialect::Openai);
            c.endpoint = Some(crate::dialect::format::Endpoint::Generate);
            let mut o = ResponseObserver::new(c, false, Some(observing));
            o.on_data(&Bytes::from_static(b"<html>\xff\xfe not json"));
            o.on_end(End::Complete);
        });
        let line = lines
            .iter()
            .find(|l| l["target"] == "cachekeeper::request")
            .unwrap();
        for f in [
            "uncached_input_tokens",
            "cache_read_tokens",
            "output_tokens",
        ] {
            assert!(line.get(f).is_none(), "{f}: {line}");
        }
        assert_eq!(line["reasoning_seen"], 0);
        assert!(line["observe_error"].is_string(), "{line}");
    }

    /// The failing input: the official OpenAI SDK stops reading at `data: [DONE]`, so the
    /// body was dropped before its end and the line said `client_disconnected`, and the turn
    /// (with its `reasoning_content`) was never captured.
    #[test]
    fn a_client_that_leaves_after_done_had_the_whole_response() {
        let sse = fixture("deepseek_reasoning.sse");
        let mut c = ctx(Dialect::Openai);
        c.endpoint = Some(crate::dialect::format::Endpoint::Generate);
        let lines = capture(|| {
            let observing =
                Observing::new(Dialect::Openai, Framing::EventStream, None, memory_store());
            let mut o = ResponseObserver::new(c, true, Some(observing));
            o.on_data(&Bytes::from(sse));
            o.on_end(End::ClientGone);
        });
        let line = lines
            .iter()
            .find(|l| l["target"] == "cachekeeper::request")
            .unwrap();
        assert_eq!(line["outcome"], "complete", "{line}");
        assert!(line["reasoning_seen"].as_u64().unwrap() >= 1, "{line}");
        // Before the marker, leaving is leaving.
        let mut c = ctx(Dialect::Openai);
        c.endpoint = Some(crate::dialect::format::Endpoint::Generate);
        let lines = capture(|| {
            let observing =
                Observing::new(Dialect::Openai, Framing::EventStream, None, memory_store());
            let mut o = ResponseObserver::new(c, true, Some(observing));
            o.on_data(&Bytes::from_static(b"data: {\"choices\":[]}\n\n"));
            o.on_end(End::ClientGone);
        });
        let line = lines
            .iter()
            .find(|l| l["target"] == "cachekeeper::request")
            .unwrap();
        assert_eq!(line["outcome"], "client_disconnected");
    }
}
