//! Running the request passes for the proxy: the plan (everything the passes read besides
//! the body, gathered once per request), then the passes on a blocking thread with the
//! `content-encoding` decoded, failing open at every step.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};

use crate::accounting::prefix::{DigestKey, Prefix};
use crate::accounting::session::{ColdMemo, Opened, SessionTracker, TurnInput};
use crate::accounting::TurnAccount;
use crate::caching::CacheTtl;
use crate::dialect::Dialect;
use crate::images::cache::TranscodeCache;
use crate::images::recovery::ImageRejectionKind;
use crate::images::retired::{ColdInputs, RetiredSet};
use crate::proxy::ctx::BodyFate;
use crate::reasoning::carriers::StoreLookup;
use crate::reasoning::ResolvedRoute;
use crate::response::fingerprint::Digest;
use crate::rewrite::{
    rewrite_with_restore, ReasoningInputs, RewriteContext, RewriteOutcome, RewriteReport,
    VerdictLookup,
};
use crate::route::Route;
use crate::state::rejected::ScopedRejections;
use crate::state::{Field, Store};

/// What the passes read besides the body, for one request (phase "plan"). Owned, so a run
/// can move to a blocking thread; built once and reused by the one retry.
pub(crate) struct Plan {
    pub dialect: Dialect,
    pub route: Arc<Route>,
    /// The upstream URI (base URL + rest of the path + query).
    pub upstream_uri: http::Uri,
    /// Upstream path: the route's base path + the rest of the request path.
    pub upstream_path: String,
    /// The model named in the path (Gemini), used when the body has none.
    pub path_model: Option<String>,
    /// [`crate::credential::identify`]'s scope of the request: transcodes and captured
    /// carriers are never shared across it.
    pub credential_scope: String,
    /// The request credential's sealing key ([`crate::credential::identify`]; `None` without
    /// a credential): what stored carriers are opened with.
    pub sealing: Option<crate::state::seal::SealKey>,
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
    /// Sessions and turns (cache accounting), for a generation request; `None` for the
    /// other parsed paths (`count_tokens`, ...).
    pub sessions: Option<Arc<SessionTracker>>,
    /// The client's `x-cachekeeper-session` value.
    pub client_session: Option<String>,
    /// When the request arrived, Unix ms.
    pub arrived_ms: i64,
}

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
    /// ([`crate::response::fingerprint::message_digest`]); `None` when the body was not read.
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

/// Run the passes on `original` (the client's body as received, still encoded) and decide
/// which bytes go upstream. `recovery` is set when rebuilding after an image rejection;
/// `begin_turn` on the first run of a request (a retry is not a turn of its own), which opens
/// the request's session first (cold-cache eviction reads its idle time and retired images);
/// a retry passes the first run's [`Passed::cold`] as `memo`. A (host, model) learned to see
/// no images gets its images replaced up front: the first run tells the model, a second run
/// replaces them.
///
/// Never fails: an undecodable body, a body the dialect does not describe, or a pass that
/// panics all send the original bytes (logged).
pub(crate) async fn run(
    plan: &Arc<Plan>,
    permits: &tokio::sync::Semaphore,
    original: Bytes,
    recovery: Option<ImageRejectionKind>,
    begin_turn: bool,
    memo: Option<ColdMemo>,
) -> Passed {
    // Closed only if the state is torn down; then run unbounded rather than fail.
    let _permit = permits.acquire().await.ok();
    let job = Arc::clone(plan);
    let input = original.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let decoded = crate::wire::body::decode(job.encoding.as_deref(), &input, job.limit)?;
        let key = DigestKey::for_credential(job.sealing.as_ref());
        let opened = if begin_turn {
            open(&job, &decoded, &key)
        } else {
            None
        };
        let route = &job.route;
        // A session with no record (new, or its record purged or unreadable) makes no
        // cold-cache decision on this turn.
        let mut unrecorded = None;
        let memo = memo.or_else(|| {
            let o = opened.as_ref()?;
            let (memo, known) = o.cold_memo(
                cold_route_ttl(route.cache.ttl, &job.store, &route.provider.host, o.model()),
                &route.provider,
                &decoded,
            );
            if !known {
                unrecorded = Some(o.session().to_owned());
            }
            Some(memo)
        });
        let cold = memo.as_ref().map(|m| ColdInputs {
            retired: &m.retired,
            cold: m.cold && job.route.images.cold_eviction,
            key: &key,
        });
        Some(run_blocking(&job, &decoded, recovery, cold).map(|outcome| {
            if let Some(session) = unrecorded.filter(|_| outcome.report.images.seen > 0) {
                // A lost record costs one collapse: say why the images changed.
                tracing::info!(target: "cachekeeper::rewrite", route = %route.name, session = %session, "cold-cache eviction: no record of this session (new, or purged or unreadable): the eviction step function alone decided which images to retire");
            }
            let accounted = account(&job, &decoded, &outcome, &key, opened);
            (outcome, accounted, memo)
        }))
    })
    .await;
    let route = &plan.route.name;
    let (outcome, (turn, forwarded_prefix), memo) = match joined {
        Ok(Some(Ok(done))) => done,
        Ok(Some(Err(e))) => {
            tracing::info!(target: "cachekeeper::rewrite", route = %route, reason = %e, "body left unchanged");
            return Passed::unchanged(original, BodyFate::Unparsed);
        }
        Ok(None) => {
            tracing::info!(target: "cachekeeper::rewrite", route = %route, "body could not be decoded; left unchanged");
            return Passed::unchanged(original, BodyFate::Unparsed);
        }
        Err(e) => {
            tracing::warn!(target: "cachekeeper::rewrite", route = %route, error = %e, "a rewrite pass failed; forwarding the original request");
            return Passed::unchanged(original, BodyFate::PassFailed);
        }
    };
    let dry_run = plan.route.dry_run;
    for reason in &outcome.report.reasons {
        tracing::info!(target: "cachekeeper::rewrite", route = %route, dry_run, reason = %reason, "rewrite");
    }
    let (sent, fate) = match outcome.body {
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
fn open(plan: &Plan, decoded: &[u8], key: &DigestKey) -> Option<Opened> {
    let sessions = plan.sessions.as_ref()?;
    let none = RewriteReport::default();
    sessions.open(&turn_input(plan, key, decoded, decoded, &none, None))
}

/// Cache accounting of a generation request (on the passes' blocking thread): the first run
/// commits its opened turn; a retry's run only digests what it forwards. Fails open: a body
/// whose positions cannot be read is no turn.
fn account(
    plan: &Plan,
    decoded: &[u8],
    outcome: &RewriteOutcome,
    key: &DigestKey,
    opened: Option<Opened>,
) -> (Option<TurnAccount>, Option<Prefix>) {
    let Some(sessions) = &plan.sessions else {
        return (None, None);
    };
    let forwarded = match &outcome.body {
        Some(b) if !plan.route.dry_run => b.as_slice(),
        _ => decoded,
    };
    let Some(opened) = opened else {
        return (None, Prefix::of(plan.dialect, forwarded, key));
    };
    // In dry run the original bytes go upstream: nothing was retired, so nothing is stored.
    let retired = outcome.retired.as_ref().filter(|_| !plan.route.dry_run);
    let input = turn_input(plan, key, decoded, forwarded, &outcome.report, retired);
    let (turn, prefix) = sessions.commit(opened, &input);
    (Some(turn), Some(prefix))
}

/// The pure part: the passes on the decoded body, and the rerun for a model known to see no
/// images.
fn run_blocking(
    plan: &Plan,
    decoded: &[u8],
    recovery: Option<ImageRejectionKind>,
    cold: Option<ColdInputs<'_>>,
) -> Result<RewriteOutcome, crate::dialect::ParseError> {
    let route = &plan.route;
    let rejected = ScopedRejections::new(&plan.store, &plan.credential_scope);
    let carriers = StoreLookup::new(
        &plan.store,
        &plan.credential_scope,
        plan.sealing.as_ref(),
        &route.provider.host,
    );
    let ctx = RewriteContext {
        dialect: plan.dialect,
        images: &route.images,
        transcodes: Some(&plan.transcodes),
        credential_scope: &plan.credential_scope,
        image_recovery: recovery,
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
    let first = rewrite_with_restore(&ctx, &carriers, decoded)?;
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
        return rewrite_with_restore(&ctx, &carriers, decoded);
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
