//! The request pipeline for one body, in order: decode the `content-encoding`, parse once
//! ([`ParsedBody`]: [`crate::dialect::parse`]), open the session from that parse
//! ([`SessionTracker::open_doc`]), restore carriers, run the passes, splice, and account the
//! turn (the forwarded positions are the client's when nothing changed). Pure: no I/O, no
//! clock (the arrival time is in the [`Plan`]), no async runtime; what it reads of the store it
//! reads through a [`Snapshot`] ([`Reads`]), and asks for what is missing ([`Step::Load`]).
//!
//! The proxy picks where a run goes (inline, the text lane or the image lane,
//! [`crate::proxy::passes`]) and runs the load phase between runs; `cachekeeper replay` (the
//! binary's `src/replay/`) calls the same [`prepare`] and [`run`] over a memory-only store. A
//! body is parsed once per request however many times its passes run (after a load round, or
//! again on the image lane): the [`ParsedBody`] travels between runs. A run that deferred image
//! work leaves what it computed ([`Reuse`]) to the run that does it, which runs only the image
//! passes again. A body is parsed again only when restore re-attached carriers (the passes read
//! the restored body, parsed once per request too), when passes ran in turn (overlapping
//! edits), or when a change may alter the message list, to read the forwarded positions
//! (`docs/dev/architecture.md#one-pipeline-one-parse`; `tests/parses.rs` counts them).

use std::sync::Arc;

use bytes::Bytes;

use crate::accounting::prefix::{DigestKey, Prefix};
use crate::accounting::session::{ColdMemo, Opened, SessionTracker, TurnInput};
use crate::accounting::TurnAccount;
use crate::caching::CacheTtl;
use crate::dialect::doc::{Doc, ParsedBody};
use crate::dialect::{Dialect, ParseError};
use crate::images::cache::TranscodeCache;
use crate::images::recovery::ImageRejectionKind;
use crate::images::retired::{ColdInputs, RetiredSet};
use crate::reasoning::carriers::StoreLookup;
use crate::rewrite::{
    rewrite_parsed, PassMemo, ReasoningInputs, RewriteContext, RewriteOutcome, RewriteReport,
    VerdictLookup,
};
use crate::route::Route;
use crate::state::load::{Reads, Snapshot, Want};
use crate::state::rejected::ScopedRejections;
use crate::state::{Field, Store};
use crate::wire::decode::DecodeError;

/// Why [`prepare`] could not give the passes a body: the request then goes upstream as sent.
#[derive(Debug)]
pub enum Unread {
    /// The `content-encoding` could not be undone (or decoded past `[server] max_rewrite_bytes`).
    Decode(DecodeError),
    /// Not JSON, or not of the dialect's shape.
    Shape(ParseError),
}

/// Decode `input` (the body as received) with the plan's `content-encoding` and parse it as
/// the plan's dialect: the request's one parse.
///
/// Errors: [`Unread`] (the caller forwards the original bytes and logs why).
pub fn prepare(plan: &Plan, input: &Bytes) -> Result<Arc<ParsedBody>, Unread> {
    let decoded = if is_identity(plan.encoding.as_deref()) {
        input.clone()
    } else {
        Bytes::from(
            crate::wire::body::decode(plan.encoding.as_deref(), input, plan.limit)
                .map_err(Unread::Decode)?,
        )
    };
    ParsedBody::parse_named(decoded, plan.dialect, |body| {
        plan.route.model_of(plan.path_model.as_deref(), body)
    })
    .map(Arc::new)
    .map_err(Unread::Shape)
}

/// `content-encoding` absent, empty or `identity` (what [`crate::wire::body::decode`] returns
/// as is).
pub fn is_identity(encoding: Option<&str>) -> bool {
    encoding.is_none_or(|e| {
        let e = e.trim();
        e.is_empty() || e.eq_ignore_ascii_case("identity")
    })
}

/// What the passes read besides the body, for one request (phase "plan"). Owned, so a run
/// can move to a blocking thread; built once and reused by the one retry.
pub struct Plan {
    pub dialect: Dialect,
    pub route: Arc<Route>,
    /// The upstream URI (base URL + rest of the path + query).
    pub upstream_uri: http::Uri,
    /// Upstream path: the route's base path + the rest of the request path.
    pub upstream_path: String,
    /// The model named in the path (Gemini, Vertex AI, an Azure OpenAI deployment), mapped
    /// by the route's `models` table ([`crate::route::Route::model_of`]); it wins over the
    /// body's.
    pub path_model: Option<String>,
    /// [`crate::credential::identify`]'s scope of the request: transcodes and captured
    /// carriers are never shared across it.
    pub credential_scope: String,
    /// The request credential's sealing key ([`crate::credential::identify`]; `None` without
    /// a credential): what stored carriers are opened with.
    pub sealing: Option<crate::state::seal::SealKey>,
    /// The key of the credential's content digests ([`crate::credential::Credential`]).
    pub digest_key: DigestKey,
    /// The request's `content-encoding`, decoded before the passes.
    pub encoding: Option<String>,
    /// The request's `anthropic-beta` header.
    pub anthropic_beta: Option<String>,
    /// `[reasoning] droppable_params`.
    pub droppable: Arc<[String]>,
    /// `[reasoning] droppable_betas`.
    pub droppable_betas: Arc<[String]>,
    /// Learned verdicts (read from the store's memory only).
    pub store: Store,
    pub transcodes: Arc<TranscodeCache>,
    /// `[server] max_rewrite_bytes`: the most a body may decode to.
    pub limit: u64,
    /// `[server] buffer_wait_ms`: the longest an image decode waits for room in the memory
    /// budget, as a body does.
    pub decode_wait: std::time::Duration,
    /// Sessions and turns (cache accounting), for a generation request; `None` for the
    /// other parsed paths (`count_tokens`, ...).
    pub sessions: Option<Arc<SessionTracker>>,
    /// The client's `x-cachekeeper-session` value.
    pub client_session: Option<String>,
    /// When the request arrived, Unix ms.
    pub arrived_ms: i64,
    /// The request carries a body signature the proxy does not renew (AWS SigV4 it cannot
    /// check or has no credentials for: Amazon Bedrock): whatever the passes make of it, the
    /// client's bytes go upstream, as in a dry run (`docs/providers.md#signing-bedrock-requests`).
    pub signed: bool,
}

impl Plan {
    /// The client's bytes go upstream whatever the passes make of them: the route is a dry
    /// run, or the request is [`Plan::signed`].
    pub fn keeps_original(&self) -> bool {
        self.route.dry_run || self.signed
    }
}

/// A completed run of the passes: its outcome, the turn's accounting and the cold-cache inputs
/// it used.
pub(crate) type Done = (
    RewriteOutcome,
    (Option<TurnAccount>, Option<Prefix>),
    Option<ColdMemo>,
);

/// A run of the passes that completed, or one that stopped for the load phase.
pub enum Step {
    /// The passes' outcome, the turn's accounting and the cold-cache inputs used (boxed: the
    /// outcome is large, a load is not).
    Done(Box<Done>),
    /// The run needs records the store's memory does not hold ([`Reads::wanting`]): it
    /// committed nothing; the passes run again on what the load phase reads.
    Load(Vec<Want>),
    /// The run deferred image work that needs a decode (`RunFor::defer`): it committed
    /// nothing; `decode_bytes` is what the decodes will allocate at most (bytes,
    /// [`crate::images::ImageReport::decode_bytes`]), and `reuse` what the run that does
    /// them starts from ([`RunFor::reuse`]).
    Deferred {
        decode_bytes: u64,
        reuse: Arc<Reuse>,
    },
}

/// What a run of the passes is for (see [`run`]).
#[derive(Clone)]
pub struct RunFor {
    /// The image rejection it recovers from.
    pub recovery: Option<ImageRejectionKind>,
    /// It begins the turn (opens and commits the session).
    pub begin_turn: bool,
    /// The first run's cold-cache inputs (a retry's).
    pub memo: Option<ColdMemo>,
    /// Defer image work that needs a decode ([`crate::rewrite::RewriteContext::defer_image_work`]).
    pub defer: bool,
    /// Most bytes one image's decode may allocate: what was reserved in the memory budget
    /// ([`crate::rewrite::RewriteContext::decode_allowance`]).
    pub decode_allowance: u64,
    /// What a run that deferred image work computed ([`Step::Deferred`]): the run that does
    /// the image work reuses it and runs only the image passes again.
    pub reuse: Option<Arc<Reuse>>,
}

impl RunFor {
    /// A run that begins the turn and does all its work now: no recovery, no first run's
    /// inputs, no deferral, no cap on a decode, nothing to reuse. What `cachekeeper replay`
    /// runs for every recorded turn.
    pub fn whole_turn() -> Self {
        Self {
            recovery: None,
            begin_turn: true,
            memo: None,
            defer: false,
            decode_allowance: u64::MAX,
            reuse: None,
        }
    }
}

/// What a run that deferred image work leaves for the run that does it: the opened session
/// and cold-cache inputs, and what the passes other than the image passes computed
/// ([`PassMemo`]). Valid for the same request, body and store snapshot.
#[derive(Debug)]
pub struct Reuse {
    opened: Option<Opened>,
    cold: Option<ColdMemo>,
    /// The session that had no record (for the log line the run doing the work writes).
    unrecorded: Option<String>,
    passes: PassMemo,
}

/// One run of the passes on `body` (the request's one parse, [`prepare`]), wherever it runs:
/// open the session (a first run, `run_for.begin_turn`), the passes, the turn's accounting,
/// reading the store through `snapshot` ([`Reads`]: no I/O). A run that deferred image work
/// (`run_for.defer`, and an image needed a decode: [`crate::images::ImageReport::deferred`])
/// or wanted records the load phase must read ([`Step::Load`]) only reads: it commits no
/// turn, since its result is discarded and the passes run again.
///
/// Errors: a shape the passes cannot read ([`ParseError`]); the caller forwards the original.
pub fn run(
    plan: &Plan,
    body: &ParsedBody,
    run_for: RunFor,
    snapshot: &Snapshot,
) -> Result<Step, ParseError> {
    let RunFor {
        recovery,
        begin_turn,
        memo,
        defer,
        decode_allowance,
        reuse,
    } = run_for;
    let (decoded, doc) = (body.bytes(), body.doc());
    let key = &plan.digest_key;
    let reads = Reads::new(&plan.store, snapshot);
    let opened = match &reuse {
        // The deferred run opened it (on the same snapshot).
        Some(r) => r.opened.clone(),
        None if begin_turn => open(plan, doc, key, &reads),
        None => None,
    };
    if reads.wanting() {
        // The session's record first: the passes read its retired images.
        return Ok(Step::Load(reads.wants()));
    }
    let route = &plan.route;
    // A session with no record (new, or its record purged or unreadable) makes no
    // cold-cache decision on this turn.
    let mut unrecorded = reuse.as_ref().and_then(|r| r.unrecorded.clone());
    let memo = memo.or_else(|| reuse.as_ref()?.cold.clone()).or_else(|| {
        let o = opened.as_ref()?;
        let (memo, known) = o.cold_memo(
            cold_route_ttl(
                route.cache.ttl,
                &plan.store,
                &route.provider.host,
                o.model(),
            ),
            &route.provider,
            decoded,
        );
        if !known {
            unrecorded = Some(o.session().to_owned());
        }
        Some(memo)
    });
    let cold = memo.as_ref().map(|m| ColdInputs {
        retired: &m.retired,
        cold: m.cold && route.images.cold_eviction,
        key,
    });
    let images = ImageWork {
        defer,
        decode_allowance,
    };
    let mut passes = reuse.as_ref().map(|r| r.passes.clone()).unwrap_or_default();
    run_passes(plan, doc, recovery, cold, images, &reads, &mut passes).map(|outcome| {
        if reads.wanting() {
            return Step::Load(reads.wants());
        }
        if outcome.report.images.deferred > 0 {
            return Step::Deferred {
                decode_bytes: outcome.report.images.decode_bytes,
                reuse: Arc::new(Reuse {
                    opened,
                    cold: memo,
                    unrecorded,
                    passes,
                }),
            };
        }
        if let Some(session) = unrecorded.filter(|_| outcome.report.images.seen > 0) {
            // A lost record costs one collapse: say why the images changed.
            tracing::info!(target: "cachekeeper::rewrite", route = %route.name, session = %session, "cold-cache eviction: no record of this session (new, or purged or unreadable): the eviction step function alone decided which images to retire");
        }
        let accounted = account(plan, doc, &outcome, key, opened);
        Step::Done(Box::new((outcome, accounted, memo)))
    })
}

/// The route's `cache_ttl` as cold-cache eviction judges it: a 1-hour TTL whose beta the host
/// rejected for the model (learned as `beta:extended-cache-ttl-…`) is 5 minutes there, since
/// the proxy then places 5-minute markers (the failing input of a fresh-user pass: the cold
/// decision kept waiting an hour after the host refused the beta).
fn cold_route_ttl(
    ttl: Option<CacheTtl>,
    verdicts: &dyn VerdictLookup,
    host: &str,
    model: &str,
) -> Option<CacheTtl> {
    let refused = Field::Beta(crate::caching::EXTENDED_CACHE_TTL_BETA.to_owned());
    match ttl? {
        CacheTtl::OneHour if verdicts.omit(host, model).contains(&refused) => {
            Some(CacheTtl::FiveMinutes)
        }
        t => Some(t),
    }
}

/// The turn's input as the session tracker reads it (the forwarded bytes and report are
/// filled in after the passes).
fn turn_input<'a>(
    plan: &'a Plan,
    key: &'a DigestKey,
    client: &'a [u8],
    forwarded: &'a [u8],
    report: &'a RewriteReport,
    retired: Option<&'a RetiredSet>,
) -> TurnInput<'a> {
    TurnInput {
        dialect: plan.dialect,
        route: &plan.route.name,
        provider: &plan.route.provider,
        model: plan.path_model.as_deref().unwrap_or(""),
        scope: &plan.credential_scope,
        key,
        client_session: plan.client_session.as_deref(),
        client,
        forwarded,
        report,
        now_ms: plan.arrived_ms,
        retired,
    }
}

/// Open the session of a generation request (before its passes); `None` for other paths and
/// for a body whose positions cannot be read.
fn open(plan: &Plan, doc: &Doc<'_>, key: &DigestKey, reads: &Reads<'_>) -> Option<Opened> {
    let sessions = plan.sessions.as_ref()?;
    crate::rewrite::count_pass("open");
    let none = RewriteReport::default();
    let body = doc.text.as_bytes();
    sessions.open_doc(&turn_input(plan, key, body, body, &none, None), doc, reads)
}

/// Cache accounting of a generation request (in the passes' lane): the first run
/// commits its opened turn; a retry's run only digests what it forwards. The forwarded
/// positions come from the request's parse `doc`: the client's when the body goes as sent,
/// else derived from the passes' changes ([`Prefix::after_changes`]), parsing the forwarded
/// body only when they cannot be (restored carriers, passes run in turn, a change to the
/// message list's structure). Fails open: a body whose positions cannot be read is no turn.
fn account(
    plan: &Plan,
    doc: &Doc<'_>,
    outcome: &RewriteOutcome,
    key: &DigestKey,
    opened: Option<Opened>,
) -> (Option<TurnAccount>, Option<Prefix>) {
    let Some(sessions) = &plan.sessions else {
        return (None, None);
    };
    let decoded = doc.text.as_bytes();
    // The client's positions: the opened turn's (borrowed), else read from the parse.
    let own;
    let client = match &opened {
        Some(o) => o.client_prefix(),
        None => {
            own = Prefix::of_doc(doc, key);
            &own
        }
    };
    let (forwarded, prefix) = match &outcome.body {
        Some(b) if !plan.keeps_original() => {
            let derived = outcome
                .changes
                .as_deref()
                .and_then(|ch| client.after_changes(doc, ch, b, key))
                .or_else(|| Prefix::of(plan.dialect, b, key));
            (b.as_slice(), derived)
        }
        // Unchanged: the client's positions (the commit takes them from the opened turn).
        _ => (decoded, opened.is_none().then(|| client.clone())),
    };
    let Some(opened) = opened else {
        return (None, prefix);
    };
    // In dry run (or signed) the original bytes go upstream: nothing was retired, so nothing
    // is stored.
    let retired = outcome.retired.as_ref().filter(|_| !plan.keeps_original());
    let input = turn_input(plan, key, decoded, forwarded, &outcome.report, retired);
    // The turn in memory only: its collapse and its record wait for the response
    // ([`crate::accounting::session::SessionTracker::settle`], from the request context).
    let (turn, prefix) = sessions.commit_turn_at(opened, &input, prefix);
    (Some(turn), Some(prefix))
}

/// How a run does image work that needs a decode (see [`RunFor`]).
#[derive(Debug, Clone, Copy)]
struct ImageWork {
    defer: bool,
    decode_allowance: u64,
}

/// The pure part: the passes on the decoded body, and the rerun for a model known to see no
/// images.
fn run_passes(
    plan: &Plan,
    doc: &Doc<'_>,
    recovery: Option<ImageRejectionKind>,
    cold: Option<ColdInputs<'_>>,
    images: ImageWork,
    reads: &Reads<'_>,
    memo: &mut PassMemo,
) -> Result<RewriteOutcome, ParseError> {
    let route = &plan.route;
    let rejected = ScopedRejections::new(&plan.store, &plan.credential_scope);
    let carriers = StoreLookup::new(
        reads,
        &plan.credential_scope,
        plan.sealing.as_ref(),
        &route.provider.host,
    );
    let ctx = RewriteContext {
        dialect: plan.dialect,
        images: &route.images,
        transcodes: Some(crate::images::cache::Transcodes::sealed(
            &plan.transcodes,
            plan.sealing.as_ref(),
        )),
        credential_scope: &plan.credential_scope,
        image_recovery: recovery,
        defer_image_work: images.defer,
        decode_allowance: images.decode_allowance,
        reasoning: Some(ReasoningInputs {
            provider: &route.provider,
            upstream_path: &plan.upstream_path,
            droppable_params: &plan.droppable,
            droppable_betas: &plan.droppable_betas,
            anthropic_beta: plan.anthropic_beta.as_deref(),
            path_model: plan.path_model.as_deref(),
            verdicts: &plan.store,
            rejected: &rejected,
        }),
        usage_in_streams: route.usage_in_streams,
        cache: &route.cache,
        cold,
    };
    let first = rewrite_parsed(&ctx, &carriers, doc, memo)?;
    let sees_no_images = first
        .reasoning_route
        .as_ref()
        .zip(first.report.model.as_deref())
        .is_some_and(|(r, m)| plan.store.omit(&r.host, m).contains(&Field::NoImageInput));
    if recovery.is_none() && first.report.images.seen > 0 && sees_no_images {
        let ctx = RewriteContext {
            image_recovery: Some(ImageRejectionKind::ModelCannotSeeImages),
            ..ctx
        };
        return rewrite_parsed(&ctx, &carriers, doc, memo);
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{FieldSet, MemoryBackend};

    #[test]
    fn a_refused_ttl_beta_makes_the_cold_cache_ttl_five_minutes() {
        // The failing input of a fresh-user pass: after the host refused the 1h TTL beta (the
        // proxy then sends 5-minute markers), cold-cache eviction still waited an hour.
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        let hour = Some(CacheTtl::OneHour);
        assert_eq!(cold_route_ttl(hour, &store, "api.kimi.com", "k2"), hour);
        let refused = FieldSet::from([Field::Beta(
            crate::caching::EXTENDED_CACHE_TTL_BETA.to_owned(),
        )]);
        store
            .verdicts()
            .learn("api.kimi.com", "k2", &refused, "Unexpected value(s)");
        assert_eq!(
            cold_route_ttl(hour, &store, "api.kimi.com", "k2"),
            Some(CacheTtl::FiveMinutes)
        );
        assert_eq!(cold_route_ttl(hour, &store, "api.kimi.com", "other"), hour);
        assert_eq!(cold_route_ttl(None, &store, "api.kimi.com", "k2"), None);
    }
}
