//! One request's context: created once when the request arrives, filled in phase by phase
//! ([`super::phases`]), and turned into the request's log line and `x-cachekeeper-rewrites`
//! value at the end. Nothing else carries per-request state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, Uri};

use crate::accounting::session::{turn_record, SessionTracker};
use crate::accounting::TurnAccount;
use crate::dialect::fingerprint::Digest;
use crate::dialect::format::Endpoint;
use crate::dialect::usage::Usage;
use crate::dialect::Dialect;
use crate::images::recovery::ImageRejectionKind;
use crate::metrics::{Metrics, RequestSample};
use crate::proxy::errors::ProxyError;
use crate::proxy::overhead_value;
use crate::rewrite::RewriteReport;
use crate::route::Route;
use crate::state::seal::SealKey;
use crate::telemetry::{redact_query, Outcome};

/// What a masked secret shows as in the log line ([`RequestCtx::mask_secret`]).
const SECRET_MASK: &str = "***";

/// What happened to the request body; the `body` field of the log line and header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum BodyFate {
    /// Not a generation path (or not a POST): streamed through unread.
    #[default]
    Passthrough,
    /// Read and parsed; no pass changed anything: the original bytes went upstream.
    Unchanged,
    /// A pass changed it: the rewritten bytes went upstream.
    Rewritten,
    /// Dry run: the passes would have changed it; the original bytes went upstream.
    DryRun,
    /// Not JSON of the dialect's shape, or an undecodable `content-encoding`: sent unchanged.
    Unparsed,
    /// Larger than `max_rewrite_bytes`: streamed through unread.
    TooLarge,
    /// No room in the buffer budget (`max_buffered_bytes`) within `buffer_wait_ms`: streamed
    /// through unread.
    OverBudget,
    /// A pass failed (panicked): the original bytes went upstream.
    PassFailed,
    /// AWS SigV4-signed (Amazon Bedrock): the passes would have changed the body or a
    /// header, but the signature covers them and the proxy does not sign this request again
    /// (no credentials of its own, other credentials, `crate::proxy::aws`): the original
    /// went upstream.
    Signed,
}

impl BodyFate {
    /// The name in logs and `x-cachekeeper-rewrites`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BodyFate::Passthrough => "passthrough",
            BodyFate::Unchanged => "unchanged",
            BodyFate::Rewritten => "rewritten",
            BodyFate::DryRun => "dry_run",
            BodyFate::Unparsed => "unparsed",
            BodyFate::TooLarge => "too_large",
            BodyFate::OverBudget => "over_budget",
            BodyFate::PassFailed => "pass_failed",
            BodyFate::Signed => "signed",
        }
    }
}

/// Why the one retry was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Retried {
    /// The upstream named these fields as unknown (comma-separated, as learned).
    Without(String),
    /// The upstream rejected an image; the request was rebuilt with it repaired / shrunk /
    /// replaced.
    Image(ImageRejectionKind),
    /// The upstream rejected a thinking signature; this many signed blocks were remembered
    /// as rejected and stripped.
    Signatures(usize),
    /// The upstream rejected what carrier restore added; sent again with the client's own
    /// carriers only (restore off for the host and model from now on).
    NoRestore,
    /// The upstream rejected `anthropic-beta` values (written `beta:<value>`,
    /// comma-separated, as learned); sent again without them and the body fields they
    /// enable.
    Betas(String),
}

impl Retried {
    /// The reason's kind, for metrics: `unknown_field`, `image`, `thinking_signatures`,
    /// `restore`, `beta`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Retried::Without(_) => "unknown_field",
            Retried::Image(_) => "image",
            Retried::Signatures(_) => "thinking_signatures",
            Retried::NoRestore => "restore",
            Retried::Betas(_) => "beta",
        }
    }

    /// The `retried_without=` value.
    pub(crate) fn label(&self) -> String {
        match self {
            Retried::Without(fields) => fields.clone(),
            Retried::Image(kind) => format!("image:{}", kind.label()),
            Retried::Signatures(n) => format!("thinking_signatures:{n}"),
            Retried::NoRestore => "restore".to_owned(),
            Retried::Betas(fields) => fields.clone(),
        }
    }
}

/// What the response observer read, for the log line.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResponseSeen {
    /// The four usage numbers (each absent when the provider did not report it).
    pub usage: Usage,
    /// Reasoning carriers the response carried.
    pub reasoning_seen: u32,
    /// The response's turn was captured with its carriers (in the store's memory).
    pub turn_captured: bool,
    /// The provider's error inside a successful response (an Anthropic `event: error`, an
    /// OpenAI `{"error":…}` chunk, a Responses `response.failed`): its type / code.
    pub upstream_error: Option<String>,
    /// Why observing stopped early ([`crate::wire::tee::Tee::stopped`]), if it did.
    pub observe_error: Option<&'static str>,
    /// The response's id (OpenAI Responses), for `previous_response_id` session chains.
    pub response_id: Option<String>,
}

/// The request's context.
pub(crate) struct RequestCtx {
    /// When the request arrived.
    pub started: Instant,
    pub method: Method,
    /// The request path as the client sent it.
    pub path: String,
    /// The query with credential parameters redacted ([`redact_query`]); for logs only.
    pub query_redacted: Option<String>,
    /// The path as the log line shows it when it differs from `path`: with the client token
    /// masked ([`RequestCtx::mask_secret`]).
    log_path: Option<String>,
    /// The matched route (phase "route").
    pub route: Option<Arc<Route>>,
    /// Upstream URI: route base URL + rest of the path + the original query.
    pub upstream_uri: Option<Uri>,
    /// The path after the route prefix.
    pub rest: String,
    /// The body's wire format: pinned by the route, else from the path.
    pub dialect: Option<Dialect>,
    /// Which generation endpoint the path is (`None`: not parsed, streamed through).
    pub endpoint: Option<Endpoint>,
    /// The model: the body's `model`, else the one named in the path (Gemini).
    pub model: Option<String>,
    /// What happened to the body.
    pub body: BodyFate,
    /// What the passes saw and did (the last run's, after a retry).
    pub report: RewriteReport,
    /// Request body bytes received from the client (as sent, before decoding).
    pub bytes_in: u64,
    /// Request body bytes sent upstream (the last attempt's).
    pub bytes_out: u64,
    /// Response body bytes sent to the client.
    pub response_bytes: u64,
    /// Status sent to the client.
    pub status: u16,
    /// When the (last) request was handed to the upstream client.
    pub upstream_started: Option<Instant>,
    /// Upstream time to first byte (response headers), ms.
    pub ttfb_ms: Option<u64>,
    /// The one retry, if it was sent.
    pub retried: Option<Retried>,
    /// What the proxy did to the request's credential: the `upstream_auth=` log value
    /// ([`crate::proxy::outbound::Outbound::label`]; empty when nothing).
    pub upstream_auth: &'static str,
    /// The proxy's own error, or how the response body broke: a low-cardinality label.
    pub error: Option<&'static str>,
    /// Where [`RequestCtx::error`] came from (`downstream`, `upstream`).
    pub error_source: Option<&'static str>,
    /// [`crate::credential::identify`]'s scope of the request (phase "plan"; `""` without a
    /// credential): what the captured carriers are scoped to.
    pub credential_scope: String,
    /// The request credential's sealing key (phase "plan"; `None` without a credential):
    /// captured carriers are stored sealed under it, or kept in memory only without one.
    pub sealing: Option<SealKey>,
    /// The digest of the message the response answers (the request's last message, as the
    /// client sent it; phase "rewrite"), which fingerprints the response's turn.
    pub answers: Option<Digest>,
    /// What the response observer read ([`crate::response`]); default until the body ends.
    pub seen: ResponseSeen,
    /// From [`RequestCtx::started`] to handing the request to the upstream client, first
    /// attempt (`None`: never sent).
    pub request_overhead: Option<Duration>,
    /// When the (last) upstream response head arrived.
    pub upstream_head: Option<Instant>,
    /// From [`RequestCtx::upstream_head`] to handing the response back to the client.
    pub response_overhead: Option<Duration>,
    /// Where the request is counted when its log line is written (`None`: nowhere, as in
    /// tests that build a context by hand).
    pub metrics: Option<Arc<Metrics>>,
    /// When the request arrived, Unix ms (the turn's time).
    pub arrived_ms: i64,
    /// The generation turn this request is (phase "rewrite"; `None` for requests that are no
    /// turn: other paths, unparsed bodies, `count_tokens`).
    pub turn: Option<TurnAccount>,
    /// Where the finished turn is recorded (set with `turn`).
    pub sessions: Option<Arc<SessionTracker>>,
    /// The response is an event stream (phase "respond").
    pub streamed: bool,
    /// The log line has been written (exactly one per request: a context dropped without
    /// one, because the client went away before the response, writes it on drop).
    emitted: bool,
}

impl RequestCtx {
    /// A fresh context for a request (phase 0).
    pub(crate) fn new(method: &Method, uri: &Uri) -> Self {
        Self {
            started: Instant::now(),
            method: method.clone(),
            path: uri.path().to_owned(),
            query_redacted: uri.query().map(redact_query),
            log_path: None,
            route: None,
            upstream_uri: None,
            rest: String::new(),
            dialect: None,
            endpoint: None,
            model: None,
            body: BodyFate::Passthrough,
            report: RewriteReport::default(),
            bytes_in: 0,
            bytes_out: 0,
            response_bytes: 0,
            status: 0,
            upstream_started: None,
            ttfb_ms: None,
            retried: None,
            upstream_auth: "",
            error: None,
            error_source: None,
            credential_scope: String::new(),
            sealing: None,
            answers: None,
            seen: ResponseSeen::default(),
            request_overhead: None,
            upstream_head: None,
            response_overhead: None,
            metrics: None,
            arrived_ms: now_ms(),
            turn: None,
            sessions: None,
            streamed: false,
            emitted: false,
        }
    }

    /// Move the context out, leaving one that writes no log line (for a phase that takes
    /// the request over, such as an upgrade).
    pub(crate) fn take(&mut self) -> RequestCtx {
        let mut spent = RequestCtx::new(&self.method, &Uri::from_static("/"));
        spent.emitted = true;
        std::mem::replace(self, spent)
    }

    /// The route's name, or `-` before routing.
    pub(crate) fn route_name(&self) -> &str {
        self.route.as_deref().map_or("-", |r| r.name.as_str())
    }

    /// The dialect of the proxy's own error response to this request ([`crate::route::error_dialect`]):
    /// the matched route's (with [`RequestCtx::rest`]), else the path's.
    pub(crate) fn error_dialect(&self) -> Option<Dialect> {
        crate::route::error_dialect(
            self.route.as_deref().map(|r| (r, self.rest.as_str())),
            &self.path,
        )
    }

    /// Whether the route runs in dry-run mode.
    pub(crate) fn dry_run(&self) -> bool {
        self.route.as_deref().is_some_and(|r| r.dry_run)
    }

    /// Record the proxy's own error.
    pub(crate) fn set_error(&mut self, err: &ProxyError) {
        self.status = err.status().as_u16();
        self.error = Some(err.label());
        self.error_source = Some(err.source_kind().as_str());
    }

    /// The `x-cachekeeper-rewrites` value: the report's counters and the body's fate, e.g.
    /// `images_seen=21; …; body=rewritten`, then `; dry_run=1` and
    /// `; retried_without=<fields>` when they apply. Bodies the passes never ran on say only
    /// `passthrough` / `too_large` / `over_budget`.
    pub(crate) fn rewrites_header(&self) -> String {
        if matches!(
            self.body,
            BodyFate::Passthrough | BodyFate::TooLarge | BodyFate::OverBudget
        ) {
            return self.body.as_str().to_owned();
        }
        let mut s = String::with_capacity(320);
        let mut digits = itoa::Buffer::new();
        for (name, value) in self.report.counters() {
            // Into the one buffer, the number by `itoa`: a `write!` per counter cost 16 k
            // instructions a request (callgrind, `benches/instructions.py`), a `String` per
            // counter 12 k more.
            s.push_str(name);
            s.push('=');
            s.push_str(digits.format(value));
            s.push_str("; ");
        }
        s.push_str("body=");
        s.push_str(self.body.as_str());
        if self.dry_run() {
            s.push_str("; dry_run=1");
        }
        if let Some(r) = &self.retried {
            s.push_str("; retried_without=");
            s.push_str(&r.label());
        }
        s
    }

    /// The `x-cachekeeper-overhead-ms` value: the request overhead, or for an answer the
    /// proxy gives before sending anything upstream, the time until now.
    pub(crate) fn overhead_header(&self) -> HeaderValue {
        let d = self
            .request_overhead
            .unwrap_or_else(|| self.started.elapsed());
        HeaderValue::from_str(&overhead_value(d)).unwrap_or(HeaderValue::from_static("0.000"))
    }

    /// What the metrics read of the request.
    fn sample(&self, outcome: Outcome) -> RequestSample<'_> {
        RequestSample {
            route: self.route_name(),
            dialect: self.dialect.map_or("-", Dialect::as_str),
            status: self.status,
            outcome,
            error: self.error,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            response_bytes: self.response_bytes,
            report: &self.report,
            retry: self.retried.as_ref().map(Retried::kind),
            generation: self.endpoint == Some(Endpoint::Generate),
            model: self.model.as_deref(),
            usage: &self.seen.usage,
            collapse: self
                .turn
                .as_ref()
                .and_then(|t| t.collapse.as_ref())
                .map(|c| (c.cause.as_str(), c.write_tokens)),
            request_overhead: self.request_overhead,
            response_overhead: self.response_overhead,
        }
    }

    /// Mask every copy of `secret` (the configured client token) in the path and query the
    /// log line shows, as `***`. `admit` strips the token only from its one place, a leading
    /// `/t/<token>` segment; a copy anywhere else (`//t/<token>/…`, `/anthropic/t/<token>/…`,
    /// a query parameter) would otherwise be logged. The request itself is not changed.
    pub(crate) fn mask_secret(&mut self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        if self.path.contains(secret) {
            self.log_path = Some(self.path.replace(secret, SECRET_MASK));
        }
        if let Some(q) = self.query_redacted.as_mut().filter(|q| q.contains(secret)) {
            *q = q.replace(secret, SECRET_MASK);
        }
    }

    /// The request is over: its bookkeeping — the turn's accounting ([`Self::finish_turn`]),
    /// the one JSON log line (target `cachekeeper::request`) and the metrics — runs after
    /// it, on a task of its own ([`after_response`]): never in the body's poll that hands
    /// the client its last bytes, nor in this context's `Drop`, which only moves the context
    /// there. Once per request: a second call does nothing.
    pub(crate) fn emit(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.emitted, true) {
            return;
        }
        let total_ms = ms_since(self.started);
        let mut ended = self.take();
        after_response(move || ended.write_line(outcome, total_ms));
    }

    /// Queue the session's record of the request's turn now, ahead of the write wait a
    /// shared store makes the response's last chunk take
    /// ([`crate::state::Store::settled`]), so the next turn finds it on any instance.
    pub(crate) fn write_session_state(&mut self) {
        if let (Some(sessions), Some(turn)) = (self.sessions.as_ref(), self.turn.as_mut()) {
            sessions.write_state(turn);
        }
    }

    /// The bookkeeping of [`Self::emit`].
    fn write_line(&mut self, outcome: Outcome, total_ms: u64) {
        self.finish_turn();
        let turn = self.turn.as_ref();
        let collapse = turn.and_then(|t| t.collapse.as_ref());
        let r = &self.report;
        let c = &r.shape;
        let retried = self.retried.as_ref().map(Retried::label);
        let u = &self.seen.usage;
        tracing::info!(
            target: "cachekeeper::request",
            route = self.route_name(),
            dialect = self.dialect.map_or("-", Dialect::as_str),
            model = self.model.as_deref().unwrap_or("-"),
            method = %self.method,
            path = self.log_path.as_deref().unwrap_or(&self.path),
            query = self.query_redacted.as_deref().unwrap_or(""),
            status = self.status,
            bytes_in = self.bytes_in,
            bytes_out = self.bytes_out,
            response_bytes = self.response_bytes,
            images_seen = r.images.seen,
            images_repaired = r.images.repaired,
            images_downscaled = r.images.downscaled,
            images_repeat_capped = r.images.repeat_capped,
            images_replaced = r.images.replaced,
            images_failed_open = r.images.failed_open,
            images_retired = r.images.retired,
            carriers_retired = r.images.carriers_retired,
            images_set_retired = r.images.set_retired,
            images_cold_retired = r.images.cold_retired,
            reasoning_edits = r.reasoning_edits(),
            carriers_dropped = c.carriers_dropped,
            carriers_filled = c.carriers_filled,
            echo_pads = c.pads,
            thinking_stripped = c.thinking_stripped,
            thinking_rejected = c.thinking_rejected,
            cache_control_moved = c.cache_control_moved,
            params_dropped = c.params_dropped,
            flags_added = c.flags_added,
            binding_set = usize::from(c.binding_set),
            usage_in_streams = usize::from(r.usage_in_streams),
            breakpoints_added = r.breakpoints_added,
            stabilized = r.stabilized,
            reasoning_restored = r.restore.turns,
            restored_reasoning_content = r.restore.reasoning_content,
            restored_reasoning = r.restore.reasoning,
            restored_reasoning_details = r.restore.reasoning_details,
            restored_thought_signature = r.restore.thought_signature,
            restored_thinking = r.restore.thinking,
            restored_redacted_thinking = r.restore.redacted_thinking,
            restored_reasoning_item = r.restore.reasoning_item,
            restored_placeholder_signature = r.restore.placeholder_signature,
            body = self.body.as_str(),
            dry_run = self.dry_run(),
            ttfb_ms = self.ttfb_ms,
            total_ms = total_ms,
            outcome = outcome.as_str(),
            error = self.error.unwrap_or(""),
            error_source = self.error_source.unwrap_or(""),
            retried_without = retried.as_deref().unwrap_or(""),
            upstream_auth = self.upstream_auth,
            uncached_input_tokens = u.uncached_input_tokens,
            cache_read_tokens = u.cache_read_tokens,
            cache_write_tokens = u.cache_write_tokens,
            cache_write_5m_tokens = u.cache_write_5m_tokens,
            cache_write_1h_tokens = u.cache_write_1h_tokens,
            output_tokens = u.output_tokens,
            reasoning_seen = self.seen.reasoning_seen,
            turn_captured = self.seen.turn_captured,
            observe_error = self.seen.observe_error,
            upstream_error = self.seen.upstream_error.as_deref(),
            session = turn.map(|t| t.session.as_str()),
            turn = turn.map(|t| t.turn),
            collapse_at = collapse.map(|c| c.at.as_str()),
            collapse_cause = collapse.map(|c| c.cause.as_str()),
            collapse_write_tokens = collapse.and_then(|c| c.write_tokens),
            "request"
        );
        if let Some(m) = &self.metrics {
            m.record(&self.sample(outcome));
        }
    }

    /// The turn has ended: its accounting is settled (the collapse comparison, the
    /// session's record queued), its collapse gets the write tokens the provider reported,
    /// and its record goes to the store (queued; no I/O here).
    fn finish_turn(&mut self) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if let Some(sessions) = &self.sessions {
            sessions.settle(turn);
        }
        if (200..300).contains(&self.status) {
            if let Some(c) = turn.collapse.as_mut() {
                c.write_tokens = self.seen.usage.cache_write_tokens;
            }
        } else {
            // Refused: the provider wrote nothing; the client's next attempt is compared with
            // the turn before this one and carries the collapse ([`SessionTracker::end`]).
            turn.collapse = None;
        }
        let (Some(sessions), Some(route)) = (self.sessions.as_ref(), self.route.as_deref()) else {
            return;
        };
        let record = turn_record(
            turn,
            self.arrived_ms,
            &route.name,
            route.provider.row.name,
            self.model.as_deref().unwrap_or(""),
            self.streamed,
            self.status,
            self.seen.usage,
            &self.report,
        );
        sessions.end(
            &self.credential_scope,
            self.seen.response_id.as_deref(),
            &record,
        );
    }
}

impl Drop for RequestCtx {
    fn drop(&mut self) {
        // The request future was dropped before a response: the client went away (while the
        // body was read, the passes ran, or the upstream was thinking).
        self.emit(Outcome::ClientDisconnected);
    }
}

/// Run a finished request's bookkeeping after its response: on a task of the runtime the
/// request ran on, so it never delays the bytes the client is waiting for; where there is no
/// runtime (unit tests, a context dropped at shutdown), here.
fn after_response(work: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move { work() });
        }
        Err(_) => work(),
    }
}

/// Now, Unix ms.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Milliseconds since `t`, saturating.
pub(crate) fn ms_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use std::io::Write;

    thread_local! {
        /// The capture buffer of this thread's [`capture`], when one runs.
        static CAPTURED: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
    }

    /// Writes to this thread's [`CAPTURED`] buffer, or nowhere.
    struct ThreadCapture;

    impl Write for ThreadCapture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            CAPTURED.with(|c| {
                if let Some(v) = c.borrow_mut().as_mut() {
                    v.extend_from_slice(buf);
                }
            });
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Run `f` with the JSON log format the proxy uses; returns the JSON lines it wrote on
    /// this thread.
    ///
    /// One global subscriber for the whole test binary, writing to a per-thread buffer: with
    /// a subscriber per capture (`with_default`), tracing's per-callsite interest cache, shared
    /// by the tests running in parallel, could hold "never" for a callsite first hit while no
    /// capture ran, and a capture then saw nothing (flaky on CI twice, the second time after a
    /// first fix that rebuilt the cache).
    pub(crate) fn capture(f: impl FnOnce()) -> Vec<serde_json::Value> {
        static INIT: std::sync::Once = std::sync::Once::new();
        INIT.call_once(|| {
            let sub = tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_writer(|| ThreadCapture)
                .finish();
            tracing::subscriber::set_global_default(sub).unwrap();
        });
        CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
        f();
        let bytes = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
        let text = String::from_utf8(bytes).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn sample() -> RequestCtx {
        let uri: Uri = "/anthropic/v1/messages?key=SECRET&alt=sse".parse().unwrap();
        let mut ctx = RequestCtx::new(&Method::POST, &uri);
        ctx.body = BodyFate::Rewritten;
        ctx.dialect = Some(Dialect::Anthropic);
        ctx.model = Some("claude-x".into());
        // Distinct values, so a counter wired to the wrong field shows.
        ctx.report = RewriteReport {
            images: crate::images::passes::ImageReport {
                seen: 21,
                repaired: 2,
                downscaled: 3,
                repeat_capped: 4,
                replaced: 5,
                retired: 8,
                carriers_retired: 6,
                set_retired: 31,
                cold_retired: 32,
                failed_open: 7,
                deferred: 0,
                decode_bytes: 0,
                reasons: Vec::new(),
            },
            shape: crate::reasoning::ShapeCounts {
                carriers_dropped: 11,
                carriers_filled: 12,
                pads: 13,
                thinking_stripped: 14,
                thinking_rejected: 18,
                cache_control_moved: 15,
                params_dropped: 16,
                flags_added: 17,
                binding_set: true,
            },
            restore: crate::reasoning::restore::RestoreCounts {
                turns: 19,
                reasoning_content: 20,
                reasoning: 21,
                reasoning_details: 22,
                thought_signature: 23,
                thinking: 24,
                redacted_thinking: 25,
                reasoning_item: 26,
                placeholder_signature: 27,
            },
            breakpoints_added: 28,
            stabilized: 29,
            ..RewriteReport::default()
        };
        ctx.retried = Some(Retried::Image(ImageRejectionKind::TooLarge {
            cap_px: Some(2000),
        }));
        ctx
    }

    #[test]
    fn log_line_and_header_carry_the_same_counters() {
        let mut ctx = sample();
        // Read before the line is written: writing it moves the context out.
        let header = ctx.rewrites_header();
        let counters = ctx.report.counters();
        let lines = capture(|| ctx.emit(Outcome::Complete));
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["target"], "cachekeeper::request");
        let parts: Vec<&str> = header.split("; ").collect();
        for (i, (name, value)) in counters.iter().enumerate() {
            assert_eq!(line[*name], serde_json::json!(value), "log field {name}");
            assert_eq!(parts[i], format!("{name}={value}"), "header entry {i}");
        }
        assert_eq!(
            line["reasoning_edits"],
            11 + 12 + 13 + 14 + 18 + 15 + 16 + 17 + 1
        );
        assert_eq!(line["body"], "rewritten");
        assert_eq!(parts[counters.len()], "body=rewritten");
        assert_eq!(parts[counters.len() + 1], "retried_without=image:too_large");
        assert_eq!(line["retried_without"], "image:too_large");
        assert_eq!(line["query"], "key=REDACTED&alt=sse");
        assert!(!line.to_string().contains("SECRET"));
    }

    /// Issue 27: the log line is assembled after the request, on a task of its own, not in
    /// `emit` (called from the body's poll that ends the response) nor in `Drop`.
    #[test]
    fn the_log_line_is_written_on_a_task_after_the_request() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut at_emit = None;
        let lines = capture(|| {
            rt.block_on(async {
                let mut ctx = sample();
                ctx.emit(Outcome::Complete);
                drop(sample());
                at_emit = Some(CAPTURED.with(|c| c.borrow().as_ref().map_or(0, Vec::len)));
                tokio::task::yield_now().await;
            });
        });
        assert_eq!(at_emit, Some(0), "nothing written in emit or drop");
        let outcomes: Vec<&str> = lines.iter().filter_map(|l| l["outcome"].as_str()).collect();
        assert_eq!(outcomes, ["complete", "client_disconnected"]);
    }

    /// The failing input: a client that gives up while the upstream is still thinking (no
    /// response headers yet) left no log line at all.
    #[test]
    fn a_dropped_context_writes_its_one_line_as_client_disconnected() {
        let lines = capture(|| drop(sample()));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["outcome"], "client_disconnected");
        let lines = capture(|| {
            let mut ctx = sample();
            ctx.emit(Outcome::Complete);
            drop(ctx);
        });
        assert_eq!(lines.len(), 1, "one line per request");
        let lines = capture(|| {
            let mut ctx = sample();
            let mut taken = ctx.take();
            drop(ctx);
            taken.emit(Outcome::Upgraded);
        });
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["outcome"], "upgraded");
    }

    #[test]
    fn bodies_the_passes_never_read_say_only_their_fate() {
        let uri: Uri = "/openai/v1/files".parse().unwrap();
        let mut ctx = RequestCtx::new(&Method::GET, &uri);
        assert_eq!(ctx.rewrites_header(), "passthrough");
        ctx.body = BodyFate::TooLarge;
        assert_eq!(ctx.rewrites_header(), "too_large");
        ctx.body = BodyFate::Unparsed;
        assert!(ctx.rewrites_header().ends_with("; body=unparsed"));
    }
}
