//! Running the request passes for the proxy: the plan (everything the passes read besides
//! the body, gathered once per request), then the passes in their lane ([`Pools`]: inline for a
//! small body, else on the blocking pool under a text permit; image work that needs a decode
//! under an image permit, [`Schedule`]) with the `content-encoding` decoded, failing open at
//! every step.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};

use crate::accounting::prefix::Prefix;
use crate::accounting::session::ColdMemo;
use crate::accounting::TurnAccount;
use crate::dialect::doc::ParsedBody;
use crate::dialect::fingerprint::Digest;
use crate::dialect::ParseError;
use crate::images::recovery::ImageRejectionKind;
use crate::images::retired::RetiredSet;
pub(crate) use crate::pipeline::Plan;
use crate::pipeline::{self, is_identity, RunFor, Step, Unread};
use crate::proxy::ctx::BodyFate;
use crate::reasoning::ResolvedRoute;
use crate::rewrite::RewriteReport;
use crate::state::load::{Snapshot, MAX_LOADS};
use crate::wire::body::BufferBudget;

/// What one run of the passes decided.
pub(crate) struct Passed {
    /// The bytes to send upstream.
    pub sent: Bytes,
    pub fate: BodyFate,
    /// What the passes saw and did (default when they did not run).
    pub report: RewriteReport,
    /// Headers to set on the upstream request (not in dry run).
    pub set_headers: Vec<(String, String)>,
    /// The reasoning route shaping used, for reading a 4xx.
    pub reasoning_route: Option<ResolvedRoute>,
    /// The digest of the message the response answers, as the client sent it
    /// ([`crate::dialect::fingerprint::message_digest`]); `None` when the body was not read.
    pub answers: Option<Digest>,
    /// The turn this request began (the first run of a generation request whose body
    /// parsed); `None` otherwise.
    pub turn: Option<TurnAccount>,
    /// The forwarded positions of a generation request (what the next turn compares with).
    pub forwarded_prefix: Option<Prefix>,
    /// The cold-cache inputs this run used (a retry reuses them); `None` when no session.
    pub cold: Option<ColdMemo>,
    /// The session's new retired-image set, when cold-cache eviction changed it.
    pub retired: Option<RetiredSet>,
}

impl Passed {
    fn unchanged(original: Bytes, fate: BodyFate) -> Self {
        Self {
            sent: original,
            fate,
            report: RewriteReport::default(),
            set_headers: Vec::new(),
            reasoning_route: None,
            answers: None,
            turn: None,
            forwarded_prefix: None,
            cold: None,
            retired: None,
        }
    }

    /// Apply to the upstream request's headers: `content-length`, the passes' headers (not
    /// in dry run; an empty value removes the header), and no `content-encoding` on a
    /// rewritten body (the passes worked on the decoded bytes, which are what is sent).
    pub(crate) fn apply_headers(&self, headers: &mut HeaderMap) {
        if self.fate == BodyFate::Rewritten {
            headers.remove(header::CONTENT_ENCODING);
        }
        if matches!(self.fate, BodyFate::Rewritten | BodyFate::Unchanged) {
            for (name, value) in &self.set_headers {
                let Ok(n) = http::HeaderName::from_bytes(name.as_bytes()) else {
                    continue;
                };
                if value.trim().is_empty() {
                    headers.remove(n);
                } else if let Ok(v) = HeaderValue::from_str(value) {
                    headers.insert(n, v);
                }
            }
        }
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(self.sent.len()));
    }
}

/// Bodies up to this many bytes (as received, identity-encoded) with no image data
/// ([`may_carry_images`]) run their passes inline on the async thread: a pass run over 64 KiB
/// of JSON text takes tens of microseconds, less than a hop to the blocking pool and back
/// (measured with `benches/load.sh`, `docs/performance.md`). Larger bodies run on the blocking
/// pool so a multi-megabyte parse never stalls the async thread.
pub(crate) const INLINE_MAX_BYTES: usize = 64 * 1024;

/// The bounded lanes the passes run in, shared by every request (and kept across a config
/// reload: held in an `Arc` by [`crate::proxy::AppState`]). Bounds are counts of concurrent
/// runs, never time, so they change when a body is rewritten, never how.
pub(crate) struct Pools {
    /// Runs that decode images (an image needs a transcode not in the cache, or the body is
    /// encoded; [`Schedule`]): one per CPU, so concurrent decodes (each at most
    /// [`crate::images::codec::MAX_ALLOC`] bytes) stay bounded and leave the async threads
    /// CPU time.
    images: tokio::sync::Semaphore,
    /// Runs of large bodies that decode no image (the first, deferring run of a body with
    /// images included): two per CPU (bounds the parse memory of concurrent large bodies).
    /// A decode never holds one, so these never wait for image work.
    text: tokio::sync::Semaphore,
    /// The memory budget the bodies are read into (`[server] max_buffered_bytes`): an image
    /// decode reserves what it will allocate ([`crate::images::codec::decode_cost`]) in it
    /// before it runs.
    budget: Arc<BufferBudget>,
}

impl Pools {
    /// Lanes for a machine with `cpus` CPUs (at least 1): `cpus` image runs, `2 × cpus`
    /// text runs at once; image decodes reserve their memory in `budget`.
    pub(crate) fn new(cpus: usize, budget: Arc<BufferBudget>) -> Self {
        let cpus = cpus.max(1);
        Self {
            images: tokio::sync::Semaphore::new(cpus),
            text: tokio::sync::Semaphore::new(cpus * 2),
            budget,
        }
    }
}

/// Where one run of a request's passes runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// On the async thread, at once (a small identity body).
    Inline,
    /// On the blocking pool under a [`Pools::text`] permit.
    Text,
    /// On the blocking pool under a [`Pools::images`] permit.
    Images,
}

/// How a request's passes are run: the first run's lane, and whether that run defers image
/// work ([`crate::rewrite::RewriteContext::defer_image_work`]), to be run again on the image
/// lane when it deferred any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Schedule {
    first: Lane,
    defer: bool,
}

impl Schedule {
    /// The schedule of a body as received with `encoding` (`content-encoding`):
    /// - an encoded body cannot be scanned before it is decoded (a decode that may itself be
    ///   large): the image lane, decoding as needed;
    /// - an identity body: inline up to [`INLINE_MAX_BYTES`], else the text lane; when it may
    ///   carry image data ([`may_carry_images`]) that run defers image work, so a request
    ///   whose images need no decode (within limits, or transcoded before and cached) never
    ///   waits for an image permit.
    fn of(encoding: Option<&str>, body: &[u8]) -> Schedule {
        if !is_identity(encoding) {
            // Deferring too: the images' decode memory is then known and reserved first.
            return Schedule {
                first: Lane::Images,
                defer: true,
            };
        }
        let first = if body.len() <= INLINE_MAX_BYTES {
            Lane::Inline
        } else {
            Lane::Text
        };
        Schedule {
            first,
            defer: may_carry_images(body),
        }
    }
}

/// Whether a JSON body may carry image data an image pass would decode. Conservative (a
/// `false` is certain, a `true` may be text about images): every decodable payload is either a
/// data URL, which names `;base64,` (OpenAI Chat / Responses; matched in any case, as
/// [`crate::dialect::doc`] reads it), or a string member named `data` (Anthropic
/// `source.data`, Gemini `inlineData.data`). A key or URL can hide those words behind JSON
/// escapes of ASCII letters (`\u0064ata`), so any such escape counts as image data too. One
/// pass of SIMD substring search per pattern ([`memchr::memmem`]).
pub(crate) fn may_carry_images(body: &[u8]) -> bool {
    let base64 = memchr::memmem::find_iter(body, b"64")
        .any(|i| i >= 4 && body[i - 4..i].eq_ignore_ascii_case(b"base"));
    base64
        || memchr::memmem::find_iter(body, b"\"data\"")
            .any(|i| string_value_follows(&body[i + 6..]))
        || memchr::memmem::find_iter(body, b"\\u00").any(|i| {
            body.get(i + 4..i + 6)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .is_some_and(|c| c.is_ascii_alphabetic())
        })
}

/// Whether `rest` (the bytes after a key) starts with optional JSON whitespace, `:`, optional
/// whitespace and a string.
fn string_value_follows(rest: &[u8]) -> bool {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut it = rest.iter().skip_while(|b| ws(b));
    if it.next() != Some(&b':') {
        return false;
    }
    it.find(|b| !ws(b)) == Some(&b'"')
}

/// Run the passes on `original` (the client's body as received, still encoded) and decide
/// which bytes go upstream. `recovery` is set when rebuilding after an image rejection;
/// `begin_turn` on the first run of a request (a retry is not a turn of its own), which opens
/// the request's session first (cold-cache eviction reads its idle time and retired images);
/// a retry passes the first run's [`Passed::cold`] as `memo`. A (host, model) learned to see
/// no images gets its images replaced up front: the first run tells the model, a second run
/// replaces them.
///
/// Where it runs ([`Schedule`]): a small identity body inline, at once; a larger one on the
/// blocking pool under a text permit; an encoded body under an image permit. A body that may
/// carry image data first runs deferring image work, and only when an image needs a decode
/// (a transcode not in the cache) runs again under an image permit. A request with nothing
/// to decode therefore never waits for another request's image work.
///
/// Never fails: an undecodable body, a body the dialect does not describe, or a pass that
/// panics all send the original bytes (logged).
pub(crate) async fn run(
    plan: &Arc<Plan>,
    pools: &Pools,
    original: Bytes,
    recovery: Option<ImageRejectionKind>,
    begin_turn: bool,
    memo: Option<ColdMemo>,
) -> Passed {
    let schedule = Schedule::of(plan.encoding.as_deref(), &original);
    let before = Arc::new(Snapshot::before_load());
    let run_for = RunFor {
        recovery,
        begin_turn,
        memo,
        defer: schedule.defer,
        decode_allowance: u64::MAX,
        reuse: None,
    };
    let mut input = Input::Received(original.clone());
    let mut joined = in_lane(schedule.first, plan, pools, &input, &run_for, &before).await;
    let mut snapshot = before;
    let mut round = 0;
    while let Ok(Ok((parsed, Ok(Step::Load(wants))))) = &joined {
        // The load phase: what the run wanted, with one bounded async wait (none while the
        // store does not answer); then the passes again on it (after the last round, reading
        // memory only for anything else), over the same parse.
        round += 1;
        input = Input::Parsed(Arc::clone(parsed));
        let read = plan.store.load(wants).await;
        snapshot = Arc::new(Snapshot::clone(&snapshot).after(read, round));
        joined = in_lane(schedule.first, plan, pools, &input, &run_for, &snapshot).await;
    }
    if let Ok(Ok((
        parsed,
        Ok(Step::Deferred {
            decode_bytes,
            reuse,
        }),
    ))) = &joined
    {
        let image_lane = ImageLane {
            need: *decode_bytes,
            reuse: Arc::clone(reuse),
            input: Input::Parsed(Arc::clone(parsed)),
        };
        joined = image_lane.run(plan, pools, run_for, &snapshot).await;
    }
    finish(plan, original, joined)
}

/// The run on the image lane after a run deferred image work ([`Step::Deferred`]).
struct ImageLane {
    /// Decoded bytes the deferred images need.
    need: u64,
    reuse: Arc<pipeline::Reuse>,
    /// The deferred run's parse.
    input: Input,
}

impl ImageLane {
    /// Reserve the decode's memory in the budget the bodies use (`max_buffered_bytes`),
    /// waiting for room as a body does (no room in time, or more than the whole budget, leaves
    /// the images that need it as sent), then run the passes on the image lane.
    async fn run(
        self,
        plan: &Arc<Plan>,
        pools: &Pools,
        mut run_for: RunFor,
        snapshot: &Arc<Snapshot>,
    ) -> Result<Ran, String> {
        let need = self.need;
        let deadline = tokio::time::Instant::now() + plan.decode_wait;
        let reserved = pools.budget.reserve_working(need, deadline).await;
        if reserved.is_none() {
            tracing::info!(target: "cachekeeper::rewrite", route = %plan.route.name, need_bytes = need, budget_bytes = pools.budget.total_bytes(), "no room in the memory budget (max_buffered_bytes) for an image decode; images that need one are left as sent");
        }
        run_for.defer = false;
        run_for.decode_allowance = if reserved.is_some() { need } else { 0 };
        run_for.reuse = Some(self.reuse);
        // Memory and what was loaded only: this run never stops for a load.
        let snapshot = Arc::new(Snapshot::clone(snapshot).after(Snapshot::default(), MAX_LOADS));
        // The image work on the image lane, over the same parse, from what the deferred run
        // computed (it committed nothing): the image passes run again, the others are reused,
        // so what is sent never depends on the lane.
        let joined = in_lane(Lane::Images, plan, pools, &self.input, &run_for, &snapshot).await;
        drop(reserved);
        joined
    }
}

/// What goes upstream after the last run: the rewritten body, or `original` when nothing
/// changed, the route is a dry run, or the passes could not read or failed (logged).
fn finish(plan: &Plan, original: Bytes, joined: Result<Ran, String>) -> Passed {
    let route = &plan.route.name;
    let (outcome, (turn, forwarded_prefix), memo) = match joined {
        Ok(Ok((_, Ok(Step::Done(done))))) => *done,
        Ok(Ok((_, Ok(Step::Load(_) | Step::Deferred { .. })))) => {
            // Cannot happen: a run after the load reads memory only and wants nothing, and the
            // image lane's run defers nothing.
            tracing::warn!(target: "cachekeeper::rewrite", route = %route, "the passes stopped after the load phase or on the image lane; forwarding the original request");
            return Passed::unchanged(original, BodyFate::PassFailed);
        }
        Ok(Ok((_, Err(e)))) | Ok(Err(Unread::Shape(e))) => {
            tracing::info!(target: "cachekeeper::rewrite", route = %route, reason = %e, "body left unchanged");
            return Passed::unchanged(original, BodyFate::Unparsed);
        }
        Ok(Err(Unread::Decode(e))) => {
            tracing::info!(target: "cachekeeper::rewrite", route = %route, encoding = plan.encoding.as_deref().unwrap_or(""), reason = %e, "body could not be decoded; left unchanged");
            return Passed::unchanged(original, BodyFate::Unparsed);
        }
        Err(e) => {
            tracing::warn!(target: "cachekeeper::rewrite", route = %route, error = %e, "a rewrite pass failed; forwarding the original request");
            return Passed::unchanged(original, BodyFate::PassFailed);
        }
    };
    let dry_run = plan.keeps_original();
    for reason in &outcome.report.reasons {
        tracing::info!(target: "cachekeeper::rewrite", route = %route, dry_run, reason = %reason, "rewrite");
    }
    let changes = outcome.body.is_some() || !outcome.set_headers.is_empty();
    if plan.signed && changes {
        tracing::warn!(target: "cachekeeper::rewrite", route = %route, "a SigV4-signed request (Authorization: AWS4-HMAC-SHA256) the proxy does not sign again is forwarded as the client signed it, its bytes and host unchanged, without these rewrites: the proxy re-signs only requests signed with its own AWS credentials ([routes.aws], or every request with sign_all = true). Or send a Bedrock API key (Authorization: Bearer)");
    }
    let (sent, fate) = match outcome.body {
        _ if plan.signed && changes => (original, BodyFate::Signed),
        None => (original, BodyFate::Unchanged),
        Some(_) if dry_run => (original, BodyFate::DryRun),
        Some(new) => (Bytes::from(new), BodyFate::Rewritten),
    };
    Passed {
        sent,
        fate,
        report: outcome.report,
        set_headers: outcome.set_headers,
        reasoning_route: outcome.reasoning_route,
        answers: outcome.answers,
        turn,
        forwarded_prefix,
        cold: memo,
        retired: outcome.retired,
    }
}

/// What a run of the passes starts from: the body as received (the first run decodes and
/// parses it, [`pipeline::prepare`]) or the parse of an earlier run of the same request.
#[derive(Clone)]
enum Input {
    Received(Bytes),
    Parsed(Arc<ParsedBody>),
}

/// What one run in a lane gave: the body's parse (for the next run) and the pipeline's step,
/// or why the body could not be read.
type Ran = Result<(Arc<ParsedBody>, Result<Step, ParseError>), Unread>;

/// One run of the pipeline ([`pipeline::run`], after [`pipeline::prepare`] on a first run)
/// in `lane` on `snapshot` (what the load phase read, or [`Snapshot::before_load`]); `Err`
/// carries a panic's or a failed blocking task's message.
async fn in_lane(
    lane: Lane,
    plan: &Arc<Plan>,
    pools: &Pools,
    input: &Input,
    run_for: &RunFor,
    snapshot: &Arc<Snapshot>,
) -> Result<Ran, String> {
    if lane == Lane::Inline {
        // The same fail-open as a blocking run's `JoinError`: a panicking pass sends the
        // original bytes.
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_on(plan, input, run_for.clone(), snapshot)
        }))
        .map_err(|p| panic_text(p.as_ref()));
    }
    let pool = if lane == Lane::Images {
        &pools.images
    } else {
        &pools.text
    };
    // Closed only if the state is torn down; then run unbounded rather than fail.
    let _permit = pool.acquire().await.ok();
    let job = Arc::clone(plan);
    let input = input.clone();
    let snapshot = Arc::clone(snapshot);
    let run_for = run_for.clone();
    tokio::task::spawn_blocking(move || run_on(&job, &input, run_for, &snapshot))
        .await
        .map_err(|e| e.to_string())
}

/// [`pipeline::run`] on `input`, parsing it first when it is the body as received.
fn run_on(plan: &Plan, input: &Input, run_for: RunFor, snapshot: &Snapshot) -> Ran {
    let parsed = match input {
        Input::Parsed(p) => Arc::clone(p),
        Input::Received(b) => pipeline::prepare(plan, b)?,
    };
    let step = pipeline::run(plan, &parsed, run_for, snapshot);
    Ok((parsed, step))
}

/// A panic's message, for the log line (`"a pass panicked"` when it carries no text).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a pass panicked".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use crate::accounting::prefix::DigestKey;
    use crate::dialect::Dialect;
    use crate::images::cache::TranscodeCache;
    use crate::state::{MemoryBackend, Store};

    #[test]
    fn the_image_scan_is_conservative() {
        let text = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        assert!(!may_carry_images(text));
        // A tool schema's `data` property is no string member named `data`.
        let schema = br#"{"tools":[{"input_schema":{"properties":{"data": {"type":"string"}}}}]}"#;
        assert!(!may_carry_images(schema));
        // Non-ASCII escapes (Python's `ensure_ascii`) and Go's `\u003c` are not letters.
        assert!(!may_carry_images(
            br#"{"content":"caf\u00e9 \u003cb\u003e 64 bits"}"#
        ));
        for image in [
            &br#"{"source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}"#[..],
            br#"{"source":{"data" :  "iVBORw0KGgo="}}"#,
            br#"{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}"#,
            br#"{"image_url":{"url":"data:image/png;BASE64,iVBORw0KGgo="}}"#,
            br#"{"source":{"\u0064ata":"iVBORw0KGgo="}}"#,
            br#"{"image_url":"data:image/png;b\u0061se64,iVBORw0KGgo="}"#,
        ] {
            assert!(
                may_carry_images(image),
                "{}",
                String::from_utf8_lossy(image)
            );
        }
    }

    #[test]
    fn schedules_by_size_encoding_and_image_data() {
        let at = |first, defer| Schedule { first, defer };
        let small = br#"{"messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(Schedule::of(None, small), at(Lane::Inline, false));
        assert_eq!(
            Schedule::of(Some(" Identity "), small),
            at(Lane::Inline, false)
        );
        assert_eq!(Schedule::of(Some("gzip"), small), at(Lane::Images, true));
        let large = format!(r#"{{"content":"{}"}}"#, "a".repeat(INLINE_MAX_BYTES));
        assert_eq!(Schedule::of(None, large.as_bytes()), at(Lane::Text, false));
        let image = br#"{"source":{"type":"base64","data":"iVBORw0KGgo="}}"#;
        assert_eq!(Schedule::of(None, image), at(Lane::Inline, true));
        let large_image = format!(
            r#"{{"source":{{"type":"base64","data":"{}"}}}}"#,
            "A".repeat(INLINE_MAX_BYTES)
        );
        assert_eq!(
            Schedule::of(None, large_image.as_bytes()),
            at(Lane::Text, true)
        );
    }

    #[test]
    fn a_panic_payload_names_its_message() {
        assert_eq!(panic_text(&"boom"), "boom");
        assert_eq!(panic_text(&String::from("bang")), "bang");
        assert_eq!(panic_text(&42_u8), "a pass panicked");
    }

    fn plan(store: &Store) -> Arc<Plan> {
        let (config, _) = crate::config::Config::from_toml(
            "[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"http://127.0.0.1:9/\"\n",
        )
        .unwrap();
        let routes = crate::route::RouteTable::new(&config).unwrap();
        Arc::new(Plan {
            dialect: Dialect::Anthropic,
            route: Arc::clone(&routes.routes()[0]),
            upstream_uri: http::Uri::from_static("http://127.0.0.1:9/v1/messages"),
            upstream_path: "/v1/messages".to_owned(),
            path_model: None,
            credential_scope: "k".to_owned(),
            sealing: None,
            digest_key: DigestKey::for_credential(None),
            encoding: None,
            anthropic_beta: None,
            droppable: Arc::new([]),
            droppable_betas: Arc::new([]),
            store: store.clone(),
            transcodes: Arc::new(TranscodeCache::new(0)),
            limit: 1 << 26,
            decode_wait: std::time::Duration::from_secs(30),
            sessions: None,
            client_session: None,
            arrived_ms: 0,
            signed: false,
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn text_requests_never_wait_for_image_permits() {
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        let plan = plan(&store);
        let pools = Pools::new(1, Arc::new(BufferBudget::new(1 << 30)));
        // Every image permit is held, as by requests decoding images.
        let _held = pools.images.try_acquire_many(1).unwrap();
        let small = Bytes::from_static(
            br#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#,
        );
        // Inline: done on the first poll, without waiting for anything.
        let passed = futures_util::FutureExt::now_or_never(run(
            &plan,
            &pools,
            small.clone(),
            None,
            true,
            None,
        ))
        .unwrap();
        assert_eq!(passed.sent, small);
        assert_eq!(passed.fate, BodyFate::Unchanged);
        // A large text body takes a text permit, never an image one (the guard only stops a
        // hang; it is no latency bound).
        let large = Bytes::from(format!(
            r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":"{}"}}]}}"#,
            "a".repeat(INLINE_MAX_BYTES)
        ));
        let passed = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            run(&plan, &pools, large.clone(), None, true, None),
        )
        .await
        .unwrap();
        assert_eq!(passed.sent, large);
        assert_eq!(passed.fate, BodyFate::Unchanged);
    }

    /// An Anthropic request with one user image of `format` (8×8 pixels, one colour).
    fn image_request(format: image::ImageFormat) -> Bytes {
        sized_image_request(format, 8)
    }

    /// An Anthropic request with one user image of `format`, `side` × `side` px, one colour.
    fn sized_image_request(format: image::ImageFormat, side: u32) -> Bytes {
        use base64::Engine as _;
        let mut out = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(side, side, image::Rgb([200, 30, 30]))
            .write_to(&mut out, format)
            .unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(out.into_inner());
        let mime = format.to_mime_type();
        Bytes::from(format!(
            r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":[{{"type":"image","source":{{"type":"base64","media_type":"{mime}","data":"{b64}"}}}},{{"type":"text","text":"what is it?"}}]}}]}}"#
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn images_that_need_no_decode_never_wait_for_image_permits() {
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        let plan = plan(&store);
        let pools = Pools::new(1, Arc::new(BufferBudget::new(1 << 30)));
        let held = pools.images.try_acquire_many(1).unwrap();
        // A PNG within every limit: nothing to decode, done inline on the first poll.
        let png = image_request(image::ImageFormat::Png);
        let passed = futures_util::FutureExt::now_or_never(run(
            &plan,
            &pools,
            png.clone(),
            None,
            true,
            None,
        ))
        .unwrap();
        assert_eq!(passed.sent, png);
        assert_eq!(passed.report.images.seen, 1);
        assert_eq!(passed.report.images.deferred, 0);
        // A BMP, which Anthropic does not accept: converting it needs a decode, so the run
        // waits for an image permit ...
        let bmp = image_request(image::ImageFormat::Bmp);
        let pending = run(&plan, &pools, bmp.clone(), None, true, None);
        tokio::pin!(pending);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(200), &mut pending)
                .await
                .is_err(),
            "a decode ran without an image permit"
        );
        // ... and once one is free, converts it exactly as a run that never deferred.
        drop(held);
        let passed = pending.await;
        assert_eq!(passed.fate, BodyFate::Rewritten);
        assert_eq!(passed.report.images.repaired, 1);
        assert_eq!(passed.report.images.deferred, 0);
        assert!(std::str::from_utf8(&passed.sent)
            .unwrap()
            .contains(r#""media_type":"image/png""#));
        let before = Arc::new(Snapshot::before_load());
        let run_for = RunFor::whole_turn();
        let input = Input::Received(bmp.clone());
        let (_, direct) = in_lane(Lane::Images, &plan, &pools, &input, &run_for, &before)
            .await
            .unwrap()
            .unwrap();
        let Ok(Step::Done(direct)) = direct else {
            panic!("the run wanted records of a memory store");
        };
        assert_eq!(direct.0.body.as_deref(), Some(&passed.sent[..]));
    }

    /// Issue 27: an image decode charges the memory budget by what it will allocate, known
    /// from the header before decoding. A 1000×1000 BMP (which Anthropic does not accept: it
    /// needs a decode to be converted) costs 28,000,000 bytes (two 4-byte frames, the resize's
    /// 16-byte buffer and the 4-byte result, each 1,000,000 px): with a 16 MiB budget it could
    /// never fit and is forwarded as sent, with the reason; with 64 MiB it is converted, and
    /// the reservation is returned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_image_decode_is_charged_to_the_memory_budget() {
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        let plan = plan(&store);
        let bmp = sized_image_request(image::ImageFormat::Bmp, 1000);
        let small = Arc::new(BufferBudget::new(16 << 20));
        let passed = run(
            &plan,
            &Pools::new(1, small.clone()),
            bmp.clone(),
            None,
            true,
            None,
        )
        .await;
        assert_eq!(passed.fate, BodyFate::Unchanged);
        assert_eq!(passed.sent, bmp);
        assert_eq!(passed.report.images.failed_open, 1);
        assert_eq!(passed.report.images.repaired, 0);
        assert!(
            passed.report.reasons.iter().any(|r| r.contains(
                "left image messages[0].content[0] as sent: image/bmp needs converting but decoding would take 28000000 bytes of memory, and the memory budget (max_buffered_bytes) could not reserve that much for it"
            )),
            "{:?}",
            passed.report.reasons
        );
        assert_eq!(small.reserved_bytes(), 0);
        let large = Arc::new(BufferBudget::new(64 << 20));
        let passed = run(&plan, &Pools::new(1, large.clone()), bmp, None, true, None).await;
        assert_eq!(passed.fate, BodyFate::Rewritten);
        assert_eq!(passed.report.images.repaired, 1);
        assert_eq!(passed.report.images.failed_open, 0);
        assert_eq!(large.reserved_bytes(), 0, "returned after the decode");
    }

    /// Issue 27 item 5: a body whose image needs a decode runs only the image work again on
    /// the image lane. The deferred run opens the session, restores, runs the prompt-cache
    /// passes and shaping; the run that does the decode reuses all of that (shaping too, as the
    /// first changed byte it reads is the same: a media-type repair before the BMP) and runs
    /// only the image passes, over the same parse; its bytes are those of a run that never
    /// deferred.
    #[test]
    fn a_decode_runs_only_the_image_work_again() {
        use crate::accounting::session::SessionTracker;
        use crate::rewrite::PASS_RUNS;
        use base64::Engine as _;
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        let mut plan = Arc::into_inner(plan(&store)).unwrap();
        plan.sessions = Some(Arc::new(SessionTracker::new(store.clone())));
        let encode = |format: image::ImageFormat| {
            let mut out = std::io::Cursor::new(Vec::new());
            image::RgbImage::from_pixel(8, 8, image::Rgb([200, 30, 30]))
                .write_to(&mut out, format)
                .unwrap();
            base64::engine::general_purpose::STANDARD.encode(out.into_inner())
        };
        let (png, bmp) = (
            encode(image::ImageFormat::Png),
            encode(image::ImageFormat::Bmp),
        );
        let body = Bytes::from(format!(
            r#"{{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{{"role":"user","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/jpeg","data":"{png}"}}}},{{"type":"image","source":{{"type":"base64","media_type":"image/bmp","data":"{bmp}"}}}},{{"type":"text","text":"what are they?"}}]}}]}}"#
        ));
        let runs = || PASS_RUNS.with(|r| r.borrow().clone());
        let memory = Snapshot::memory_only();
        let parsed = pipeline::prepare(&plan, &body).unwrap();
        let first = RunFor {
            defer: true,
            ..RunFor::whole_turn()
        };
        let before = runs();
        let parses = crate::json::PARSES.with(std::cell::Cell::get);
        let Ok(Step::Deferred { reuse, .. }) =
            pipeline::run(&plan, &parsed, first.clone(), &memory)
        else {
            panic!("the BMP needs a decode");
        };
        let deferred = runs();
        let second = RunFor {
            defer: false,
            reuse: Some(reuse),
            ..first.clone()
        };
        let Ok(Step::Done(done)) = pipeline::run(&plan, &parsed, second, &memory) else {
            panic!("the image run completes");
        };
        let after = runs();
        let ran = |from: &std::collections::BTreeMap<&str, usize>,
                   to: &std::collections::BTreeMap<&str, usize>,
                   pass: &str| {
            to.get(pass).copied().unwrap_or(0) - from.get(pass).copied().unwrap_or(0)
        };
        for pass in ["open", "restore", "cache", "shape", "images"] {
            assert_eq!(ran(&before, &deferred, pass), 1, "deferred run: {pass}");
        }
        for pass in ["open", "restore", "cache", "shape"] {
            assert_eq!(ran(&deferred, &after, pass), 0, "image run: {pass} reused");
        }
        assert_eq!(ran(&deferred, &after, "images"), 1);
        assert_eq!(
            crate::json::PARSES.with(std::cell::Cell::get),
            parses,
            "no parse"
        );
        let (outcome, (turn, _), _) = *done;
        assert_eq!(
            outcome.report.images.repaired, 2,
            "{:?}",
            outcome.report.reasons
        );
        assert_eq!(turn.map(|t| t.turn), Some(1));
        // The same bytes as a run that never deferred, on a fresh session store.
        let fresh = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        plan.sessions = Some(Arc::new(SessionTracker::new(fresh)));
        let direct = RunFor {
            defer: false,
            ..first
        };
        let Ok(Step::Done(direct)) = pipeline::run(&plan, &parsed, direct, &memory) else {
            panic!("a direct run completes");
        };
        assert_eq!(direct.0.body, outcome.body);
        assert_eq!(direct.0.report.reasons, outcome.report.reasons);
    }
}
