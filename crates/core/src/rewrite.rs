//! The request passes, run in order on one parsed body. Pure: no I/O, no clock, no
//! randomness, so the same input gives the same bytes on every turn and after restarts.
//!
//! INTERFACE CONTRACT (used by `server.rs`; keep the signatures):
//! - [`rewrite_request`] returns `Ok(outcome)` with `outcome.body == None` when nothing
//!   changed (the server then forwards the ORIGINAL bytes, byte-identical), or
//!   `Some(new_bytes)` when a pass changed something.
//! - It returns `Err(ParseError)` when the body is not something the passes understand
//!   (not JSON, `messages` of the wrong type, ...): the server forwards the original bytes.
//!
//! Layout: [`crate::dialect::parse`] parses the body once into a [`Doc`] (the one span scan,
//! [`crate::json::scan`]); the dialect gives its image sites ([`crate::dialect::doc::Walk`])
//! and turns. [`crate::images::passes::run`] repairs, downscales, caps repeats and then asks the
//! eviction policy ([`crate::images::policy::retire_count`]) how many oldest carriers to
//! retire; [`crate::reasoning::shape`] shapes the reasoning carriers; on the Anthropic wire
//! [`crate::caching`] runs the route's prefix stabilisers and places automatic cache
//! breakpoints. All return edits of the original bytes, which [`crate::json::edit::splice_all`]
//! writes in one go (a breakpoint on a block another pass replaces is placed on that pass's
//! output instead).

use crate::caching::{self, Breakpoints, CacheSettings, CacheTtl};
use crate::dialect;
use crate::images::settings::ImagesConfig;
use std::sync::Arc;

use crate::dialect::doc::{Doc, ParsedBody};
use crate::dialect::fingerprint::{echoed_turns_in, message_digest, Digest, Fingerprint};
use crate::dialect::format::MarkerStyle;
use crate::dialect::turn::CapturedTurn;
use crate::dialect::{Dialect, ParseError};
use crate::images::cache::Transcodes;
use crate::images::passes::{self, Settings};
use crate::images::profile::ImageProfile;
use crate::images::recovery::ImageRejectionKind;
use crate::images::retired::{ColdInputs, RetiredSet};
use crate::json::{self, Edit};
use crate::provider::{BreakpointTargets, ResolvedProvider};
use crate::reasoning::carriers::TurnLookup;
use crate::reasoning::restore::{self, RestoreContext, RestoreCounts};
use crate::reasoning::{self, ResolvedRoute, ShapeContext, ShapeCounts, Shaped};
use crate::state::rejected::SignatureLookup;
pub(crate) use crate::state::VerdictLookup;
use crate::state::{Field, FieldSet};

mod report;
mod stream_usage;
pub use report::RewriteReport;

/// Result of [`rewrite_request`].
#[derive(Debug, Default, Clone)]
pub struct RewriteOutcome {
    /// `None`: nothing changed, forward the original bytes.
    pub body: Option<Vec<u8>>,
    /// What was seen and done (filled on both paths).
    pub report: RewriteReport,
    /// Headers to set on the upstream request (replacing the client's value), e.g. a merged
    /// `anthropic-beta`; one entry per name, and an empty value removes the header (the
    /// client's `anthropic-beta` once its last value was dropped,
    /// `docs/reasoning.md#beta-headers`). A pass that changes a header starts from the value
    /// earlier passes set ([`reasoning::betas::forwarded`]) and replaces their entry.
    pub set_headers: Vec<(String, String)>,
    /// The reasoning route used by shaping; the server hands it to
    /// [`reasoning::detect`] when the upstream answers 4xx. `None` when shaping did not run.
    pub reasoning_route: Option<ResolvedRoute>,
    /// The learned unknown fields that shaping omitted.
    pub omitted: FieldSet,
    /// The digest of the message the response will answer ([`dialect::last_message`], as
    /// the client sent it; [`message_digest`] ignores carriers and cache markers, so a
    /// restored body gives the same): the response's turn is fingerprinted by it.
    pub answers: Option<Digest>,
    /// The session's retired-image set after this request, when cold-cache eviction changed
    /// it (the caller stores it with the session); `None` when unchanged.
    pub retired: Option<RetiredSet>,
    /// How `body` was made from the parsed body, when one splice of that parse made it (the
    /// common case): the changed ranges and their new lengths, so the accounting derives the
    /// forwarded positions from the parse instead of parsing `body`
    /// ([`crate::accounting::prefix::Prefix::after_changes`]). `None` when the body is
    /// unchanged, was restored (the passes ran on another parse) or took passes in turn.
    pub(crate) changes: Option<Vec<json::edit::Change>>,
}

/// Inputs of reasoning shaping (pass 6) that come from the route and the request headers.
#[derive(Clone, Copy)]
pub struct ReasoningInputs<'a> {
    /// The route's provider row, resolved once per route ([`crate::route::Route::provider`]).
    pub provider: &'a ResolvedProvider,
    /// Upstream path (base path + rest of the request path).
    pub upstream_path: &'a str,
    /// `[reasoning] droppable_params`.
    pub droppable_params: &'a [String],
    /// `[reasoning] droppable_betas`.
    pub droppable_betas: &'a [String],
    /// The request's `anthropic-beta` header.
    pub anthropic_beta: Option<&'a str>,
    /// The model named in the request path (Gemini), used when the body has none.
    pub path_model: Option<&'a str>,
    /// Learned verdicts.
    pub verdicts: &'a dyn VerdictLookup,
    /// Thinking signatures rejected for the request's credential scope.
    pub rejected: &'a dyn SignatureLookup,
}

/// Per-request inputs of the passes besides the body.
#[derive(Clone, Copy)]
pub struct RewriteContext<'a> {
    /// The body's wire format (from the route or the request path).
    pub dialect: Dialect,
    /// The route's `[images]` settings (global values with `[routes.images]` overrides).
    pub images: &'a ImagesConfig,
    /// The process's transcode cache, with the request credential's sealing key when it is
    /// shared (`[state] share_transcodes`); `None`: transcode every time, the output is the
    /// same. A plain `&TranscodeCache` converts (`.into()`) to one that shares nothing.
    pub transcodes: Option<Transcodes<'a>>,
    /// The credential scope of the request ([`crate::credential::identify`]): transcode cache
    /// entries are never shared across scopes. `""` when there is no credential.
    pub credential_scope: &'a str,
    /// Set when rebuilding a request after the provider rejected an image
    /// ([`crate::images::recovery`]), or on every request to a (host, model) learned as
    /// unable to see images (`ModelCannotSeeImages`). `None` normally.
    pub image_recovery: Option<ImageRejectionKind>,
    /// Leave every image whose work would need a decode as sent and count it in
    /// [`crate::images::ImageReport::deferred`] instead (transcode-cache hits still apply): a
    /// cheap first run that needs no image permit. The proxy runs again without it, on the
    /// image lane, when anything was deferred, so the bytes sent never depend on it.
    pub defer_image_work: bool,
    /// Most bytes one image's transcode may allocate: what the proxy reserved in its memory
    /// budget for the run ([`crate::images::passes::Settings::decode_allowance`]); `u64::MAX`
    /// outside the proxy.
    pub decode_allowance: u64,
    /// Reasoning shaping inputs; `None` skips pass 6.
    pub reasoning: Option<ReasoningInputs<'a>>,
    /// The route's `usage_in_streams`: ask an OpenAI Chat stream for its usage chunk
    /// ([`stream_usage`]).
    pub usage_in_streams: bool,
    /// The route's prompt-cache settings (breakpoints, TTL, stabilisers;
    /// [`crate::caching`]). [`crate::caching::CACHE_OFF`] runs none of those passes.
    pub cache: &'a CacheSettings,
    /// Cold-cache eviction inputs from the request's session
    /// ([`crate::images::retired`]); `None` when the request has no session (`count_tokens`,
    /// benchmarks): only the step function runs.
    pub cold: Option<ColdInputs<'a>>,
}

impl<'a> RewriteContext<'a> {
    /// The passes of `dialect` with `images`' settings and nothing else: no transcode cache
    /// (each image is transcoded every time, to the same output), no credential scope, no image
    /// recovery, no deferred image work, no reasoning shaping (pass 6 skipped), no stream usage
    /// request, prompt caching off ([`crate::caching::CACHE_OFF`]) and no session (only the
    /// eviction step function). Set any other field with struct update syntax:
    /// `RewriteContext { reasoning: Some(r), ..RewriteContext::new(dialect, &images) }`.
    pub fn new(dialect: Dialect, images: &'a ImagesConfig) -> Self {
        Self {
            dialect,
            images,
            transcodes: None,
            credential_scope: "",
            image_recovery: None,
            defer_image_work: false,
            decode_allowance: u64::MAX,
            reasoning: None,
            usage_in_streams: false,
            cache: &crate::caching::CACHE_OFF,
            cold: None,
        }
    }
}

/// Run every request pass for the dialect on `body`, over one parse (no carrier restore:
/// that needs the proxy's store; see [`rewrite_with_restore`]).
///
/// The body is parsed once ([`dialect::parse`]). Passes 1–4 (image repair, downscale, repeat
/// cap, eviction; [`crate::images::passes`]) read its image sites on every dialect; pass 6
/// (reasoning shaping, when `ctx.reasoning` is set) reads its turns and top-level object. Each
/// returns edits of the original bytes, and all of them are spliced once, so everything a pass
/// does not rewrite stays byte-identical. Shaping is told the lowest byte the image edits touch
/// (`first_changed_byte`, for the Anthropic drop-on-prefix-mismatch binding).
///
/// Errors: the body is not JSON, or not of the dialect's shape ([`ParseError`]); the caller
/// forwards the original bytes.
pub fn rewrite_request(
    ctx: &RewriteContext<'_>,
    body: &[u8],
) -> Result<RewriteOutcome, ParseError> {
    let doc = dialect::parse(body, ctx.dialect)?;
    rewrite_doc(ctx, body, &doc, &mut DocMemo::default())
}

/// [`rewrite_request`] with pass 5, carrier restore ([`crate::reasoning::restore`]), reading
/// captured turns from `carriers` (the proxy's store, seen with this request's credential
/// scope and upstream host). Restore runs first, on the body as received: when it re-attaches
/// anything, the other passes run on the restored body (a second parse), so the image passes
/// and shaping see the turns as the provider sent them, and shaping decides what of them goes
/// out (a strict route still gets no carrier). Restore is skipped when `ctx.reasoning` is
/// unset, when the request names no model, and for a (host, model) learned as
/// [`Field::NoRestore`].
///
/// Errors: as [`rewrite_request`].
pub(crate) fn rewrite_with_restore(
    ctx: &RewriteContext<'_>,
    carriers: &dyn TurnLookup,
    body: &[u8],
) -> Result<RewriteOutcome, ParseError> {
    let doc = dialect::parse(body, ctx.dialect)?;
    rewrite_parsed(ctx, carriers, &doc, &mut PassMemo::default())
}

/// [`rewrite_with_restore`] over the request's one parse, `doc` (the body is `doc.text`):
/// no parse of its own, except of the restored body when restore re-attached a carrier (the
/// passes then run on that body).
///
/// `memo` keeps what the passes other than the image passes computed over each parse (the
/// restored body and its parse, the prompt-cache passes' edits, shaping's decision for a
/// given first changed byte): a run that deferred image work
/// ([`RewriteContext::defer_image_work`]) leaves it for the run that does the image work, which
/// then runs only the image passes again (and shaping only when the image edits move the first
/// changed byte it reads). Start with [`PassMemo::default`]; a memo is only valid for the same
/// body, context (but for `defer_image_work`, `decode_allowance` and `image_recovery`, which
/// only the image passes read) and store snapshot.
///
/// Errors: as [`rewrite_request`] (a shape the passes cannot read).
pub(crate) fn rewrite_parsed(
    ctx: &RewriteContext<'_>,
    carriers: &dyn TurnLookup,
    doc: &Doc<'_>,
    memo: &mut PassMemo,
) -> Result<RewriteOutcome, ParseError> {
    let body = doc.text.as_bytes();
    let restored = memo
        .restored
        .get_or_insert_with(|| {
            let (new, counts, reasons) = restore_pass(ctx, carriers, doc)?;
            // Cannot fail for edits of one parse; then the original goes through the passes.
            // Restore adds carriers, never a model: the restored body's model is the one the
            // route read for the client's (a `models` table entry, a path's model), not its
            // `model` string again.
            let parsed = ParsedBody::parse_named(bytes::Bytes::from(new), ctx.dialect, |_| {
                doc.model.clone()
            })
            .ok()?;
            Some(Arc::new(RestoredBody {
                parsed,
                counts,
                reasons,
            }))
        })
        .clone();
    let Some(restored) = restored else {
        return rewrite_doc(ctx, body, doc, &mut memo.on_client);
    };
    let new = restored.parsed.bytes();
    let mut out = rewrite_doc(ctx, new, restored.parsed.doc(), &mut memo.on_restored)?;
    let sent = out.body.take().unwrap_or_else(|| new.to_vec());
    if sent == body {
        // Shaping took off all that was restored (a route that reads none of it): the
        // request is the client's, and the report says what the passes do to it.
        return rewrite_doc(ctx, body, doc, &mut memo.on_client);
    }
    out.body = Some(sent);
    // The passes' changes are of the restored body, not of `doc`.
    out.changes = None;
    out.report.restore = restored.counts.clone();
    out.report
        .reasons
        .splice(0..0, restored.reasons.iter().cloned());
    Ok(out)
}

/// What [`rewrite_parsed`] keeps between runs of one request's passes (see there).
#[derive(Debug, Default, Clone)]
pub(crate) struct PassMemo {
    /// Restore's result: `None` not run yet, `Some(None)` nothing restored.
    restored: Option<Option<Arc<RestoredBody>>>,
    /// The passes over the client's parse.
    on_client: DocMemo,
    /// The passes over the restored body's parse.
    on_restored: DocMemo,
}

/// A body restore re-attached carriers to, parsed, with what was restored and why.
#[derive(Debug)]
struct RestoredBody {
    parsed: ParsedBody,
    counts: RestoreCounts,
    reasons: Vec<String>,
}

/// What the passes other than the image passes computed over one parse.
#[derive(Debug, Default, Clone)]
struct DocMemo {
    /// The prompt-cache passes' edits ([`cache_passes`]).
    cached: Option<CacheEdits>,
    /// Shaping's decision for the first changed byte it was told ([`shape_pass`]), with the
    /// reasoning route and the omitted fields it set on the outcome.
    shaped: Option<(Option<usize>, Shaped, ResolvedRoute, FieldSet)>,
}

/// Benchmarks: the turns a body's own assistant messages carry, captured as the response
/// side would have captured them, keyed as their echo finds them ([`rewrite_known`]).
#[doc(hidden)]
pub struct KnownTurns(std::collections::HashMap<Fingerprint, CapturedTurn>);

impl KnownTurns {
    /// The assistant turns `body` echoes (with the carriers it kept). Empty when `body` is not
    /// a request of `dialect`.
    pub fn from_body(dialect: Dialect, body: &[u8]) -> Self {
        let turns = json::parse(body).ok().and_then(|p| {
            let m = p.top.get(restore::list_key(dialect))?;
            let entries = json::scan::array_at(p.text, m.value.start)?;
            let texts: Vec<&str> = entries
                .iter()
                .filter_map(|r| p.text.get(r.clone()))
                .collect();
            Some(echoed_turns_in(dialect, &texts))
        });
        Self(
            turns
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.fingerprint, t.turn))
                .collect(),
        )
    }

    /// How many turns are known.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No turn is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl TurnLookup for KnownTurns {
    fn find(&self, _model: &str, fp: &Fingerprint) -> Option<CapturedTurn> {
        self.0.get(fp).cloned()
    }
}

/// Benchmarks: [`rewrite_with_restore`] with `known` as the captured turns (an empty set still
/// computes every fingerprint: the cost of a model with captured turns, none of them these).
#[doc(hidden)]
pub fn rewrite_known(
    ctx: &RewriteContext<'_>,
    known: &KnownTurns,
    body: &[u8],
) -> Result<RewriteOutcome, ParseError> {
    rewrite_with_restore(ctx, known, body)
}

// Tests: how many times each pass ran on this thread (`"images"`, `"restore"`, `"cache"`,
// `"shape"`; the pipeline adds `"open"`), to check what a run reuses.
#[cfg(any(test, feature = "testing"))]
thread_local! {
    pub static PASS_RUNS: std::cell::RefCell<std::collections::BTreeMap<&'static str, usize>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Tests: count a run of `pass` ([`PASS_RUNS`]); nothing outside tests.
#[inline]
pub(crate) fn count_pass(pass: &'static str) {
    #[cfg(any(test, feature = "testing"))]
    PASS_RUNS.with(|r| *r.borrow_mut().entry(pass).or_default() += 1);
    #[cfg(not(test))]
    let _ = pass;
}

/// Pass 5: the restored body, what was restored and why; `None` when nothing was.
fn restore_pass(
    ctx: &RewriteContext<'_>,
    carriers: &dyn TurnLookup,
    doc: &Doc<'_>,
) -> Option<(Vec<u8>, RestoreCounts, Vec<String>)> {
    count_pass("restore");
    let inputs = ctx.reasoning.as_ref()?;
    let model = doc.model.as_deref().or(inputs.path_model)?;
    if inputs
        .verdicts
        .omit(&inputs.provider.host, model)
        .contains(&Field::NoRestore)
    {
        return None;
    }
    // Nothing captured for this model (a provider that returns no carriers): no fingerprint
    // can match, and only the placeholder signature could apply.
    if !carriers.may_know(model) && !inputs.provider.wants_placeholder_signature(model) {
        return None;
    }
    let restored = restore::restore_parsed(
        &RestoreContext {
            dialect: ctx.dialect,
            lookup: carriers,
            model,
            provider: inputs.provider,
        },
        doc.text,
        &doc.top,
    );
    if restored.edits.is_empty() {
        return None;
    }
    let new = json::splice(doc.text.as_bytes(), restored.edits).ok()?;
    Some((new, restored.counts, restored.reasons))
}

/// The passes after restore over one parse of `body` (`doc`), reusing what `memo` holds of an
/// earlier run over the same parse.
fn rewrite_doc(
    ctx: &RewriteContext<'_>,
    body: &[u8],
    doc: &Doc<'_>,
    memo: &mut DocMemo,
) -> Result<RewriteOutcome, ParseError> {
    let (mut image_edits, mut outcome) = image_passes(ctx, doc);
    outcome.answers = dialect::last_message(doc)
        .and_then(|r| body.get(r))
        .map(|m| message_digest(ctx.dialect, m));
    request_stream_usage(ctx, doc, &mut image_edits, &mut outcome);
    let cached = memo
        .cached
        .get_or_insert_with(|| cache_passes(ctx, doc))
        .clone();
    let Some(inputs) = &ctx.reasoning else {
        let groups: [&[Edit]; 2] = [&image_edits, &cached.edits];
        if let Ok(new) = json::edit::splice_changed(body, &groups) {
            outcome.body = new.filter(|n| n != body);
            outcome.changes = outcome
                .body
                .as_ref()
                .map(|_| json::edit::changes(body, &groups));
            apply_cached(ctx, cached, &mut outcome);
        } else {
            // A marker on an image block the image passes replace: markers go on their output.
            outcome.body = splice_images(body, image_edits, &mut outcome.report);
            cache_in_turn(ctx, body, &mut outcome);
        }
        return Ok(outcome);
    };
    // The stabiliser's removal changes the binding prefix; a marker is not part of it.
    let first_changed_byte = image_edits
        .iter()
        .map(|e| e.range.start)
        .chain(cached.changed_from)
        .min();
    let shaped = memo.shape(inputs, doc, first_changed_byte, &mut outcome);
    let groups: [&[Edit]; 3] = [&image_edits, &shaped.edits, &cached.edits];
    if let Ok(new) = json::edit::splice_changed(body, &groups) {
        outcome.body = new.filter(|n| n != body);
        outcome.changes = outcome
            .body
            .as_ref()
            .map(|_| json::edit::changes(body, &groups));
        apply_shaped(shaped, &mut outcome);
        apply_cached(ctx, cached, &mut outcome);
        return Ok(outcome);
    }
    // Some edits overlap: image and shaping edits as below, then the prompt-cache passes on
    // their output (a marker may sit on a block another pass replaced).
    match json::edit::splice_all(body, &[&image_edits, &shaped.edits]) {
        Ok(new) => {
            outcome.body = (new != body).then_some(new);
            apply_shaped(shaped, &mut outcome);
        }
        Err(_) => {
            // An image edit and a shaping edit overlap (e.g. a marker moved onto an image the
            // image passes replaced): run the two in turn on the image passes' output.
            let images_out = splice_images(body, image_edits, &mut outcome.report);
            shape_in_turn(ctx.dialect, inputs, body, images_out, &mut outcome);
        }
    }
    cache_in_turn(ctx, body, &mut outcome);
    Ok(outcome)
}

/// [`rewrite_doc`]'s stream usage request (`usage_in_streams`): a top-level edit that no image
/// edit overlaps, pushed to `image_edits` so it travels with them (shaping, which may drop
/// top-level parameters, then sees it like them). A host learned to reject `stream_options`
/// for the model never gets it added.
fn request_stream_usage(
    ctx: &RewriteContext<'_>,
    doc: &Doc<'_>,
    image_edits: &mut Vec<Edit>,
    outcome: &mut RewriteOutcome,
) {
    let rejected = |i: &ReasoningInputs<'_>| {
        let model = doc.model.as_deref().or(i.path_model)?;
        Some(
            i.verdicts
                .omit(&i.provider.host, model)
                .has_param("stream_options"),
        )
    };
    let wanted =
        ctx.usage_in_streams && !ctx.reasoning.as_ref().and_then(rejected).unwrap_or(false);
    if let Some(e) = wanted.then(|| stream_usage::edit(doc)).flatten() {
        image_edits.push(e);
        outcome.report.usage_in_streams = true;
        outcome.report.reasons.push(stream_usage::REASON.to_owned());
    }
}

impl DocMemo {
    /// Shaping's edits for `first_changed_byte`: the memo's when an earlier run over this parse
    /// shaped for the same byte (its route and omitted fields set on `outcome`), else
    /// [`shape_pass`]'s, remembered.
    fn shape(
        &mut self,
        inputs: &ReasoningInputs<'_>,
        doc: &Doc<'_>,
        first_changed_byte: Option<usize>,
        outcome: &mut RewriteOutcome,
    ) -> Shaped {
        match &self.shaped {
            Some((at, shaped, route, omit)) if *at == first_changed_byte => {
                outcome.reasoning_route = Some(route.clone());
                outcome.omitted = omit.clone();
                shaped.clone()
            }
            _ => {
                let shaped = shape_pass(inputs, doc, first_changed_byte, outcome);
                if let Some(route) = &outcome.reasoning_route {
                    self.shaped = Some((
                        first_changed_byte,
                        shaped.clone(),
                        route.clone(),
                        outcome.omitted.clone(),
                    ));
                }
                shaped
            }
        }
    }
}

/// The prompt-cache passes' edits of one body ([`cache_passes`]).
#[derive(Debug, Default, Clone)]
struct CacheEdits {
    edits: Vec<Edit>,
    /// Lowest byte the stabilisers remove (for shaping's binding check).
    changed_from: Option<usize>,
    reasons: Vec<String>,
    breakpoints_added: usize,
    stabilized: usize,
    /// 1-hour markers were placed on a row that needs [`caching::EXTENDED_CACHE_TTL_BETA`].
    wants_ttl_beta: bool,
}

/// Pass 7, the prompt-cache passes ([`crate::caching`]) over `doc`, Anthropic Messages only:
/// the route's stabilisers, then (`cache_breakpoints = "auto"`) the breakpoints, which never
/// mark a block a stabiliser removes. A 1-hour `cache_ttl` places 1-hour markers, except for a
/// (host, model) learned to reject [`caching::EXTENDED_CACHE_TTL_BETA`]: 5-minute markers there.
fn cache_passes(ctx: &RewriteContext<'_>, doc: &Doc<'_>) -> CacheEdits {
    count_pass("cache");
    let mut out = CacheEdits::default();
    if ctx.dialect.format().cache_markers() == MarkerStyle::Unmarked {
        return out;
    }
    let provider = ctx.reasoning.map(|r| r.provider);
    let stab = caching::stabilize::stabilize(
        &ctx.cache.stabilize,
        doc,
        provider.map_or("this route", |p| p.row.name),
    );
    out.changed_from = stab.edits.iter().map(|e| e.range.start).min();
    out.stabilized = stab.removed.len();
    out.edits = stab.edits;
    out.reasons = stab.reasons;
    if ctx.cache.breakpoints != Breakpoints::Auto {
        return out;
    }
    let mut ttl = ctx.cache.ttl;
    let mut learned = None;
    if ttl == Some(CacheTtl::OneHour) {
        if let Some(inputs) = &ctx.reasoning {
            let model = doc.model.as_deref().or(inputs.path_model);
            let beta = Field::Beta(caching::EXTENDED_CACHE_TTL_BETA.to_owned());
            if let Some(m) = model.filter(|m| {
                inputs
                    .verdicts
                    .omit(&inputs.provider.host, m)
                    .contains(&beta)
            }) {
                ttl = None;
                learned = Some(format!(
                    "cache_breakpoints: {} rejected {} for {m} (learned): 5m markers instead of 1h",
                    inputs.provider.host,
                    caching::EXTENDED_CACHE_TTL_BETA
                ));
            }
        }
    }
    // Which models get markers, and where: the provider row's cache rules (one policy).
    let model = doc
        .model
        .as_deref()
        .or(ctx.reasoning.and_then(|r| r.path_model));
    let targets = match provider {
        Some(p) => p.breakpoints_for(model),
        None => Some(BreakpointTargets { tools: true }),
    };
    let Some(targets) = targets else {
        out.reasons.push(format!(
            "cache_breakpoints: {} has no prompt cache for {}; none added",
            provider.map_or("this route", |p| p.row.name),
            model.unwrap_or("this model")
        ));
        return out;
    };
    let placed = caching::breakpoints::place(doc, ttl, &stab.removed, targets);
    if placed.added > 0 {
        out.reasons.extend(learned);
        out.wants_ttl_beta =
            ttl == Some(CacheTtl::OneHour) && provider.is_some_and(|p| p.row.ttl_beta);
    }
    out.breakpoints_added = placed.added;
    out.edits.extend(placed.edits);
    out.reasons.extend(placed.reasons);
    out
}

/// Record what the prompt-cache passes did; merge the 1-hour TTL beta into `anthropic-beta`
/// (over what shaping set, else the client's header) when it is wanted.
fn apply_cached(ctx: &RewriteContext<'_>, c: CacheEdits, outcome: &mut RewriteOutcome) {
    outcome.report.breakpoints_added = c.breakpoints_added;
    outcome.report.stabilized = c.stabilized;
    outcome.report.reasons.extend(c.reasons);
    if !c.wants_ttl_beta {
        return;
    }
    let current = reasoning::betas::forwarded(
        ctx.reasoning.and_then(|r| r.anthropic_beta),
        &outcome.set_headers,
    );
    let Some(merged) = reasoning::merge_beta(current, caching::EXTENDED_CACHE_TTL_BETA) else {
        return;
    };
    outcome
        .set_headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case(reasoning::betas::HEADER));
    outcome
        .set_headers
        .push((reasoning::betas::HEADER.to_owned(), merged));
}

/// The prompt-cache passes on the other passes' output (`outcome.body`, or `original` when
/// they changed nothing), with a second parse: the fallback when their edits overlap.
fn cache_in_turn(ctx: &RewriteContext<'_>, original: &[u8], outcome: &mut RewriteOutcome) {
    let runs = !ctx.cache.stabilize.is_empty() || ctx.cache.breakpoints == Breakpoints::Auto;
    if ctx.dialect.format().cache_markers() == MarkerStyle::Unmarked || !runs {
        return;
    }
    let current = outcome.body.clone().unwrap_or_else(|| original.to_vec());
    let Ok(doc) = dialect::parse(&current, ctx.dialect) else {
        return;
    };
    let cached = cache_passes(ctx, &doc);
    if cached.edits.is_empty() {
        apply_cached(ctx, cached, outcome);
        return;
    }
    match json::splice(&current, cached.edits.clone()) {
        Ok(new) => {
            outcome.body = (new != original).then_some(new);
            apply_cached(ctx, cached, outcome);
        }
        Err(e) => outcome
            .report
            .reasons
            .push(format!("prompt-cache passes skipped: {e}")),
    }
}

/// The image passes' edits spliced alone; `None` when there are none. A failure (cannot
/// happen for spans of one parse) forwards the original and resets the report.
fn splice_images(body: &[u8], edits: Vec<Edit>, report: &mut RewriteReport) -> Option<Vec<u8>> {
    if edits.is_empty() {
        return None;
    }
    match json::splice(body, edits) {
        Ok(new) => Some(new),
        Err(e) => {
            *report = RewriteReport {
                model: report.model.take(),
                images: passes::ImageReport {
                    seen: report.images.seen,
                    ..passes::ImageReport::default()
                },
                reasons: vec![format!("image passes skipped: {e}")],
                ..RewriteReport::default()
            };
            None
        }
    }
}

/// Shaping on the image passes' output (`images_out`, or `original` when they changed
/// nothing), with a second parse: the fallback when the two passes' edits overlap.
fn shape_in_turn(
    dialect: Dialect,
    inputs: &ReasoningInputs<'_>,
    original: &[u8],
    images_out: Option<Vec<u8>>,
    outcome: &mut RewriteOutcome,
) {
    let current: &[u8] = images_out.as_deref().unwrap_or(original);
    let first_changed_byte = images_out
        .as_deref()
        .map(|new| first_difference(original, new));
    let shaped = dialect::parse(current, dialect)
        .map(|doc| {
            let s = shape_pass(inputs, &doc, first_changed_byte, outcome);
            let spliced = json::splice(current, s.edits.clone());
            (s, spliced)
        })
        .map_err(|e| e.to_string());
    match shaped {
        Ok((s, Ok(new))) => {
            outcome.body = (new != original).then_some(new);
            apply_shaped(s, outcome);
        }
        Ok((_, Err(e))) => {
            outcome.body = images_out;
            outcome
                .report
                .reasons
                .push(format!("reasoning shaping skipped: {e}"));
        }
        Err(e) => {
            outcome.body = images_out;
            outcome
                .report
                .reasons
                .push(format!("reasoning shaping skipped: {e}"));
        }
    }
}

/// Pass 6: reasoning shaping over `doc`. Resolves the reasoning route for the request's
/// model and the learned verdicts, and records both in `outcome`.
fn shape_pass(
    inputs: &ReasoningInputs<'_>,
    doc: &Doc<'_>,
    first_changed_byte: Option<usize>,
    outcome: &mut RewriteOutcome,
) -> Shaped {
    count_pass("shape");
    let model = outcome.report.model.as_deref().or(inputs.path_model);
    let route = reasoning::for_request(inputs.provider, inputs.upstream_path, model);
    let omit = model
        .map(|m| inputs.verdicts.omit(&route.host, m))
        .unwrap_or_default();
    let shaped = reasoning::shape::shape(
        &ShapeContext {
            dialect: doc.dialect,
            route: &route,
            omit: &omit,
            droppable_params: inputs.droppable_params,
            droppable_betas: inputs.droppable_betas,
            first_changed_byte,
            anthropic_beta: reasoning::betas::forwarded(
                inputs.anthropic_beta,
                &outcome.set_headers,
            ),
            rejected: inputs.rejected,
        },
        doc,
    );
    outcome.reasoning_route = Some(route);
    outcome.omitted = omit;
    shaped
}

/// Record what shaping did.
fn apply_shaped(s: Shaped, outcome: &mut RewriteOutcome) {
    for (name, value) in s.set_headers {
        outcome
            .set_headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
        outcome.set_headers.push((name, value));
    }
    outcome.report.reasons.extend(s.reasons);
    outcome.report.shape = s.counts;
}

/// Offset of the first byte where `a` and `b` differ (the shorter length when one is a
/// prefix of the other).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

/// Passes 1–4: the image passes ([`crate::images::passes`]) over `doc`'s image sites, on
/// every dialect. Returns their edits (of the original bytes) and the outcome so far.
fn image_passes(ctx: &RewriteContext<'_>, doc: &Doc<'_>) -> (Vec<Edit>, RewriteOutcome) {
    count_pass("images");
    let walk = dialect::image_sites(doc, ctx.images.agent_images_in_user_turns);
    let model = walk.model.clone();
    let profile = ImageProfile::for_request(
        ctx.dialect,
        ctx.reasoning.map(|r| r.provider),
        model
            .as_deref()
            .or(ctx.reasoning.and_then(|r| r.path_model)),
    );
    // A per-model image ceiling from the route's provider row (`[routes.images]` keys win).
    let per_model = ctx.reasoning.and_then(|r| {
        let m = model.as_deref().or(r.path_model)?;
        ctx.images.for_model(r.provider.row.image_ceiling(m))
    });
    let (edits, mut images, retired) = passes::run(
        &walk,
        &Settings {
            cfg: per_model.as_ref().unwrap_or(ctx.images),
            profile,
            cache: ctx.transcodes,
            scope: ctx.credential_scope,
            recovery: ctx.image_recovery,
            defer_image_work: ctx.defer_image_work,
            decode_allowance: ctx.decode_allowance,
            cold: ctx.cold,
            text: doc.text,
        },
    );
    // The image counters are kept as the passes counted them; their reasons join the
    // request's one list.
    let reasons = std::mem::take(&mut images.reasons);
    let report = RewriteReport {
        model,
        images,
        reasons,
        shape: ShapeCounts::default(),
        usage_in_streams: false,
        restore: RestoreCounts::default(),
        breakpoints_added: 0,
        stabilized: 0,
    };
    (
        edits,
        RewriteOutcome {
            report,
            retired,
            ..RewriteOutcome::default()
        },
    )
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
    use crate::images::probe::fake;
    use crate::texts::RETIRED_IMAGE;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use serde_json::{json, Value};

    use crate::accounting::prefix::Prefix;
    use crate::digest::DigestKey;
    use crate::testing::Rng;

    fn b64_png(w: u32, h: u32, pad: usize) -> String {
        STANDARD.encode(fake::png(w, h, pad))
    }

    fn anthropic_source(rng: &mut Rng) -> Value {
        match rng.below(8) {
            0 => json!({"type": "url", "url": "https://example.com/a.png"}),
            1 => json!({"type": "base64", "media_type": "image/png", "data": "!!corrupt!!"}),
            2 => json!({"type": "file", "file_id": "file_1"}),
            3 | 4 => json!({"type": "base64", "media_type": "image/png",
                            "data": b64_png(2400, 1350, rng.below(200) as usize)}),
            _ => json!({"type": "base64", "media_type": "image/png",
                        "data": b64_png(1568, 882, rng.below(200) as usize)}),
        }
    }

    fn anthropic_image(rng: &mut Rng) -> Value {
        let mut img = json!({"type": "image"});
        if !rng.chance(5) {
            img["source"] = anthropic_source(rng);
        }
        if rng.chance(10) {
            img["cache_control"] = json!({"type": "ephemeral"});
        }
        img
    }

    fn random_anthropic(rng: &mut Rng) -> Value {
        let mut messages = Vec::new();
        let turns = rng.below(40);
        for t in 0..turns {
            let mut user = vec![json!({"type": "text", "text": format!("turn {t}")})];
            for _ in 0..rng.below(3) {
                if rng.chance(30) {
                    user.push(anthropic_image(rng));
                }
            }
            for s in 0..1 + rng.below(3) {
                let mut content = vec![json!({"type": "text", "text": "ok", "x_unknown": [1, 2]})];
                for _ in 0..rng.below(4) {
                    content.push(anthropic_image(rng));
                }
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": format!("toolu_{t}_{s}"), "name": "shot", "input": {}}
                ]}));
                user.push(
                    json!({"type": "tool_result", "tool_use_id": format!("toolu_{t}_{s}"),
                                 "content": content}),
                );
            }
            messages.push(json!({"role": "user", "content": user}));
        }
        json!({"model": "claude-test", "max_tokens": 10, "messages": messages, "zzz": {"k": "\u{e9}\\/"}})
    }

    fn openai_image(rng: &mut Rng) -> Value {
        let url = match rng.below(6) {
            0 => "https://example.com/a.png".to_owned(),
            1 => "data:image/png;base64,@@@".to_owned(),
            2 | 3 => format!(
                "data:image/png;base64,{}",
                b64_png(2400, 1350, rng.below(200) as usize)
            ),
            _ => format!(
                "data:image/png;base64,{}",
                b64_png(1568, 882, rng.below(200) as usize)
            ),
        };
        if rng.chance(20) {
            json!({"type": "image_url", "image_url": url})
        } else {
            json!({"type": "image_url", "image_url": {"url": url, "detail": "high"}})
        }
    }

    fn random_openai(rng: &mut Rng) -> Value {
        let mut messages = vec![json!({"role": "system", "content": "be brief"})];
        for t in 0..rng.below(40) {
            let mut user = vec![json!({"type": "text", "text": format!("turn {t}")})];
            if rng.chance(20) {
                user.push(openai_image(rng));
            }
            messages.push(json!({"role": "user", "content": user}));
            messages.push(json!({"role": "assistant", "content": null,
                                 "tool_calls": [{"id": format!("call_{t}"), "type": "function"}]}));
            let mut tool = vec![json!({"type": "text", "text": "done"})];
            if rng.chance(50) {
                for _ in 0..1 + rng.below(3) {
                    tool.push(openai_image(rng));
                }
            }
            messages.push(
                json!({"role": "tool", "tool_call_id": format!("call_{t}"), "content": tool}),
            );
            if rng.chance(50) {
                messages.push(json!({"role": "user", "content": [
                    {"type": "text", "text": "screenshot"}, openai_image(rng)]}));
            }
        }
        json!({"model": "gpt-test", "messages": messages, "stream": true})
    }

    fn random_config(rng: &mut Rng) -> ImagesConfig {
        let max_blocks = [20, 5, 10][rng.below(3) as usize];
        ImagesConfig {
            max_blocks,
            max_blocks_small: [100, 30, max_blocks][rng.below(3) as usize].max(max_blocks),
            max_bytes: [24_000_000, 20_000, 5_000][rng.below(3) as usize],
            evict_batch: 1 + rng.below(8) as usize,
            evict_floor: rng.below(4) as usize,
            ..ImagesConfig::default()
        }
    }

    fn count_retired(v: &Value) -> usize {
        match v {
            Value::String(s) if s == RETIRED_IMAGE => 1,
            Value::Array(a) => a.iter().map(count_retired).sum(),
            Value::Object(o) => o.values().map(count_retired).sum(),
            _ => 0,
        }
    }

    fn check_property(dialect: Dialect, body: &[u8], images: &ImagesConfig) -> bool {
        let ctx = RewriteContext::new(dialect, images);
        let first = rewrite_request(&ctx, body).unwrap();
        let again = rewrite_request(&ctx, body).unwrap();
        assert_eq!(first.body, again.body, "deterministic");
        assert_eq!(first.report, again.report);
        let Some(new_body) = first.body else {
            assert_eq!(first.report.images.retired, 0);
            return false;
        };
        // Valid JSON, exactly `images_retired` replacement texts, nothing else renamed.
        let before: Value = serde_json::from_slice(body).unwrap();
        let after: Value = serde_json::from_slice(&new_body).unwrap();
        assert_eq!(count_retired(&after), first.report.images.retired);
        assert!(first.report.reasons.len() >= first.report.images.carriers_retired);
        assert_eq!(before["model"], after["model"]);
        assert_eq!(
            before["messages"].as_array().map(Vec::len),
            after["messages"].as_array().map(Vec::len)
        );
        // Idempotence: rewriting the rewritten body changes nothing.
        let second = rewrite_request(&ctx, &new_body).unwrap();
        assert_eq!(second.body, None, "second pass changed the body");
        assert_eq!(second.report.images.retired, 0);
        true
    }

    #[test]
    fn property_anthropic_idempotent_and_deterministic() {
        let mut rng = Rng(0x5EED_0001);
        let mut rewritten = 0;
        for _ in 0..150 {
            let cfg = random_config(&mut rng);
            let body = serde_json::to_vec(&random_anthropic(&mut rng)).unwrap();
            rewritten += usize::from(check_property(Dialect::Anthropic, &body, &cfg));
        }
        assert!(rewritten > 30, "only {rewritten} bodies were rewritten");
    }

    /// Every `cache_control` member in `v`, at any depth.
    fn count_markers(v: &Value) -> usize {
        match v {
            Value::Object(m) => {
                usize::from(m.contains_key("cache_control"))
                    + m.values().map(count_markers).sum::<usize>()
            }
            Value::Array(a) => a.iter().map(count_markers).sum(),
            _ => 0,
        }
    }

    fn strip_markers(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("cache_control");
                m.values_mut().for_each(strip_markers);
            }
            Value::Array(a) => a.iter_mut().for_each(strip_markers),
            _ => {}
        }
    }

    /// With automatic breakpoints and the stabiliser on, over the image passes' edits (repairs,
    /// downscales, evictions, replaced images): deterministic, valid JSON, at most 4 markers
    /// (all counted), and a second run changes nothing.
    #[test]
    fn property_anthropic_with_breakpoints_idempotent_and_deterministic() {
        let cache = crate::caching::CacheSettings {
            breakpoints: crate::caching::Breakpoints::Auto,
            ttl: None,
            stabilize: vec![crate::caching::Stabiliser::ClaudeCodeBillingLine],
        };
        let mut rng = Rng(0x5EED_0003);
        let mut marked = 0;
        for _ in 0..120 {
            let images = random_config(&mut rng);
            let mut body = random_anthropic(&mut rng);
            if rng.chance(50) {
                body["system"] = json!("You are a test.");
            } else if rng.chance(50) {
                body["system"] = json!([
                    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;"},
                    {"type": "text", "text": "You are a test."}]);
            }
            if rng.chance(50) {
                body["tools"] = json!([{"name": "shot", "input_schema": {"type": "object"}}]);
            }
            // Most clients of this pass mark nothing: take the random markers off most bodies.
            if rng.chance(80) {
                strip_markers(&mut body);
            }
            let client_markers = count_markers(&body);
            let body = serde_json::to_vec(&body).unwrap();
            let ctx = RewriteContext {
                cache: &cache,
                ..RewriteContext::new(Dialect::Anthropic, &images)
            };
            let first = rewrite_request(&ctx, &body).unwrap();
            assert_eq!(rewrite_request(&ctx, &body).unwrap().body, first.body);
            let Some(new_body) = first.body else {
                continue;
            };
            let after: Value = serde_json::from_slice(&new_body).expect("valid JSON");
            // The client's own markers: ours stand down (an image's marker may move onto
            // the text block that replaces it, never be lost).
            let added = first.report.breakpoints_added;
            assert!(client_markers == 0 || added == 0);
            assert_eq!(count_markers(&after), client_markers + added);
            assert!(added <= 4);
            assert!(!String::from_utf8_lossy(&new_body).contains("x-anthropic-billing-header"));
            let second = rewrite_request(&ctx, &new_body).unwrap();
            assert_eq!(second.body, None, "second pass changed the body");
            marked += usize::from(first.report.breakpoints_added > 0);
        }
        assert!(marked > 60, "only {marked} bodies got markers");
    }

    #[test]
    fn property_openai_idempotent_and_deterministic() {
        let mut rng = Rng(0x5EED_0002);
        let mut rewritten = 0;
        for _ in 0..150 {
            let mut cfg = random_config(&mut rng);
            cfg.agent_images_in_user_turns = rng.chance(70);
            let body = serde_json::to_vec(&random_openai(&mut rng)).unwrap();
            rewritten += usize::from(check_property(Dialect::Openai, &body, &cfg));
        }
        assert!(rewritten > 30, "only {rewritten} bodies were rewritten");
    }

    /// A session of `turns` turns, one small screenshot per turn in a tool_result, as the
    /// client sends it (turn n + 1's body is turn n's with messages appended).
    fn screenshot_session(turns: usize, upload: bool) -> Vec<u8> {
        let mut messages = Vec::new();
        let mut first = vec![json!({"type": "text", "text": "go"})];
        if upload {
            first.push(json!({"type": "image", "source": {"type": "base64",
                "media_type": "image/png", "data": b64_png(64, 64, 7)}}));
        }
        messages.push(json!({"role": "user", "content": first}));
        for t in 0..turns {
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": format!("toolu_{t}"), "name": "shot", "input": {}}]}));
            // Turn 3's screenshot repeats turn 1's (a static screen): the set's counts go to
            // the oldest occurrence.
            let pad = if t == 3 { 1 } else { t };
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("toolu_{t}"), "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                        "data": b64_png(120, 80, pad)}}]}]}));
        }
        let parts: Vec<String> = messages.iter().map(Value::to_string).collect();
        format!(
            r#"{{"model":"claude-test","max_tokens":10,"messages":[{}]}}"#,
            parts.join(",")
        )
        .into_bytes()
    }

    fn cold_ctx<'a>(images: &'a ImagesConfig, cold: Option<ColdInputs<'a>>) -> RewriteContext<'a> {
        RewriteContext {
            cold,
            ..RewriteContext::new(Dialect::Anthropic, images)
        }
    }

    fn cold<'a>(retired: &'a RetiredSet, cold: bool, key: &'a DigestKey) -> Option<ColdInputs<'a>> {
        Some(ColdInputs { retired, cold, key })
    }

    /// Cold-cache eviction: deterministic given (body, settings, set, cold flag); the turn
    /// after a decision, sent with the new set, retires the same images and keeps the earlier
    /// bytes; a warm turn without a set runs the step function alone.
    #[test]
    fn property_cold_cache_decision_is_remembered_and_byte_stable() {
        let key = DigestKey::for_credential(None);
        let other_key =
            DigestKey::for_credential(Some(&crate::state::seal::SealKey::from_bytes([7; 32])));
        let mut rng = Rng(0x5EED_C01D);
        let mut decisions = 0;
        for case in 0..40 {
            let cfg = ImagesConfig {
                max_blocks_small: [20, 30, 12][rng.below(3) as usize],
                evict_batch: 1 + rng.below(8) as usize,
                evict_floor: rng.below(4) as usize,
                evict_low_water: [None, Some(4), Some(9)][rng.below(3) as usize],
                ..ImagesConfig::default()
            };
            let upload = rng.chance(50);
            let n = 5 + rng.below(40) as usize;
            let empty = RetiredSet::default();
            let body = screenshot_session(n, upload);
            let a = rewrite_request(&cold_ctx(&cfg, cold(&empty, true, &key)), &body).unwrap();
            let again = rewrite_request(&cold_ctx(&cfg, cold(&empty, true, &key)), &body).unwrap();
            assert_eq!(
                (&a.body, &a.retired),
                (&again.body, &again.retired),
                "case {case}"
            );
            // Warm and no set: the step function alone, no set.
            let warm = rewrite_request(&cold_ctx(&cfg, cold(&empty, false, &key)), &body).unwrap();
            let plain = rewrite_request(&cold_ctx(&cfg, None), &body).unwrap();
            assert_eq!(warm.body, plain.body);
            assert_eq!(warm.retired, None);
            let Some(set) = a.retired.clone() else {
                assert_eq!(a.report.images.cold_retired, 0, "case {case}");
                continue;
            };
            decisions += 1;
            assert!(a.report.images.cold_retired > 0);
            let low = crate::images::policy::Limits::from(&cfg).low_water_blocks(true);
            let kept = a.report.images.seen - a.report.images.retired;
            assert!(
                kept <= low || n - a.report.images.carriers_retired == cfg.evict_floor + 1,
                "case {case}: kept {kept} > low water {low}"
            );
            let sent = a.body.clone().unwrap();
            // The next turns, warm, with the new set: the same images retired, the earlier bytes
            // as they were, the set unchanged until the ceiling is crossed again.
            let mut prev = sent;
            for extra in 1..4 {
                let next = screenshot_session(n + extra, upload);
                let b = rewrite_request(&cold_ctx(&cfg, cold(&set, false, &key)), &next).unwrap();
                let fwd = b.body.clone().unwrap();
                assert_eq!(b.retired, None, "case {case}: warm turns make no decision");
                if b.report.images.carriers_retired == a.report.images.carriers_retired {
                    assert!(
                        fwd.starts_with(&prev[..prev.len() - 2]),
                        "case {case} +{extra}: earlier bytes changed"
                    );
                    assert_eq!(b.report.images.set_retired, a.report.images.retired);
                }
                let again =
                    rewrite_request(&cold_ctx(&cfg, cold(&set, false, &key)), &next).unwrap();
                assert_eq!(again.body, b.body);
                prev = fwd;
            }
            // Another credential's key matches nothing of this set.
            let next = screenshot_session(n + 1, upload);
            let c = rewrite_request(&cold_ctx(&cfg, cold(&set, false, &other_key)), &next).unwrap();
            assert_eq!(c.report.images.set_retired, 0);
        }
        assert!(decisions > 10, "only {decisions} cold decisions");
    }

    #[test]
    fn other_dialects_read_the_model() {
        let cfg = ImagesConfig::default();
        for dialect in [Dialect::OpenaiResponses, Dialect::Gemini] {
            let ctx = RewriteContext::new(dialect, &cfg);
            let out = rewrite_request(&ctx, br#"{"model":"m","input":[{"type":"input_image"}]}"#)
                .unwrap();
            assert_eq!(out.body, None);
            assert_eq!(out.report.model.as_deref(), Some("m"));
            assert!(matches!(
                rewrite_request(&ctx, b"{\"model\":"),
                Err(ParseError::NotJson(_))
            ));
        }
    }

    #[test]
    fn nothing_to_change_is_none() {
        let cfg = ImagesConfig::default();
        let ctx = RewriteContext::new(Dialect::Anthropic, &cfg);
        let out = rewrite_request(
            &ctx,
            br#"{"model":"claude","messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap();
        assert_eq!(out.body, None);
        assert_eq!(out.report.model.as_deref(), Some("claude"));
    }

    fn with_reasoning<'a>(
        dialect: Dialect,
        images: &'a ImagesConfig,
        provider: &'a ResolvedProvider,
        path: &'a str,
    ) -> RewriteContext<'a> {
        RewriteContext {
            reasoning: Some(ReasoningInputs {
                provider,
                upstream_path: path,
                droppable_params: &[],
                droppable_betas: &[],
                anthropic_beta: None,
                path_model: None,
                verdicts: &(),
                rejected: &(),
            }),
            ..RewriteContext::new(dialect, images)
        }
    }

    /// The failing input: with `usage_in_streams`, a host that rejects `stream_options`
    /// (Mistral's 422 `extra_forbidden`) had the verdict learned, yet every request and the
    /// retry got the field added again, so every stream failed.
    #[test]
    fn usage_in_streams_yields_to_a_stream_options_verdict() {
        struct RejectsStreamOptions;
        impl VerdictLookup for RejectsStreamOptions {
            fn omit(&self, _host: &str, _model: &str) -> FieldSet {
                FieldSet::from([crate::state::Field::param("stream_options")])
            }
        }
        let images = ImagesConfig::default();
        let provider = ResolvedProvider::resolve(None, "api.mistral.ai", None);
        let body = br#"{"model":"mistral-large","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let base = RewriteContext {
            usage_in_streams: true,
            cache: &crate::caching::CACHE_OFF,
            cold: None,
            ..with_reasoning(Dialect::Openai, &images, &provider, "/v1/chat/completions")
        };
        let added = rewrite_request(&base, body).unwrap();
        assert!(added.report.usage_in_streams);
        let learned = RewriteContext {
            reasoning: base.reasoning.map(|r| ReasoningInputs {
                verdicts: &RejectsStreamOptions,
                ..r
            }),
            ..base
        };
        let out = rewrite_request(&learned, body).unwrap();
        assert!(!out.report.usage_in_streams);
        assert_eq!(out.body, None, "the client's body goes as sent");
    }

    fn parses() -> usize {
        crate::json::PARSES.with(std::cell::Cell::get)
    }

    #[test]
    fn a_body_is_parsed_once_per_run() {
        let cfg = ImagesConfig {
            max_blocks: 2,
            max_blocks_small: 2,
            evict_floor: 0,
            evict_batch: 1,
            ..ImagesConfig::default()
        };
        let shot = |i: u32| {
            json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                 "data": b64_png(1568, 882, i as usize)}}]})
        };
        // Anthropic: eviction retires old screenshots and shaping moves a thinking block's
        // cache_control, in one run.
        let anthropic = json!({"model": "claude-opus-4-5", "messages": [
            {"role": "user", "content": [shot(1), shot(2), shot(3), shot(4)]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s",
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "ok"}]}]});
        // OpenAI Chat: a tool message's images and a carrier the route does not read.
        let img = json!({"type": "image_url", "image_url": {"url":
            format!("data:image/png;base64,{}", b64_png(1568, 882, 1))}});
        let openai = json!({"model": "gpt-5", "messages": [
            {"role": "assistant", "content": "a", "reasoning_details": [1]},
            {"role": "tool", "tool_call_id": "c1", "content": [img.clone()]},
            {"role": "tool", "tool_call_id": "c2", "content": [img.clone()]},
            {"role": "tool", "tool_call_id": "c3", "content": [img]}]});
        let cases = [
            (
                Dialect::Anthropic,
                anthropic,
                "api.anthropic.com",
                "/v1/messages",
            ),
            (
                Dialect::Openai,
                openai,
                "api.openai.com",
                "/v1/chat/completions",
            ),
        ];
        for (dialect, body, host, path) in cases {
            let body = serde_json::to_vec(&body).unwrap();
            let provider = ResolvedProvider::resolve(None, host, None);
            let ctx = with_reasoning(dialect, &cfg, &provider, path);
            let before = parses();
            let out = rewrite_request(&ctx, &body).unwrap();
            assert_eq!(parses() - before, 1, "{dialect:?}");
            assert!(out.report.images.retired > 0, "{dialect:?}");
            assert!(
                out.report.shape.cache_control_moved + out.report.shape.carriers_dropped > 0,
                "{dialect:?}: {:?}",
                out.report.reasons
            );
            // The accounting's forwarded positions come from the same parse and the changes
            // (retired images, a dropped carrier, a moved marker), as a parse would give them;
            // with `stream_options` added at the top level (Chat) too.
            let sent = out.body.clone().unwrap();
            let key = DigestKey::for_credential(None);
            let doc = dialect::parse(&body, dialect).unwrap();
            let client = Prefix::of_doc(&doc, &key);
            let derived = client
                .after_changes(&doc, out.changes.as_deref().unwrap(), &sent, &key)
                .expect("no structural change");
            assert_eq!(
                derived,
                Prefix::of(dialect, &sent, &key).unwrap(),
                "{dialect:?}"
            );
            if dialect == Dialect::Openai {
                let usage = RewriteContext {
                    usage_in_streams: true,
                    ..ctx
                };
                let mut streaming: Value = serde_json::from_slice(&body).unwrap();
                streaming["stream"] = json!(true);
                let streaming = serde_json::to_vec(&streaming).unwrap();
                let out = rewrite_request(&usage, &streaming).unwrap();
                assert!(out.report.usage_in_streams);
                let sent = out.body.unwrap();
                let doc = dialect::parse(&streaming, dialect).unwrap();
                let derived = Prefix::of_doc(&doc, &key)
                    .after_changes(&doc, out.changes.as_deref().unwrap(), &sent, &key)
                    .expect("a top-level parameter is no structural change");
                assert_eq!(derived, Prefix::of(dialect, &sent, &key).unwrap());
            }
            let v: Value = serde_json::from_slice(&sent).unwrap();
            assert_eq!(v["model"], body_model(&body));
        }
        // Without reasoning inputs, and for the other dialects: one parse too.
        let cfg = ImagesConfig::default();
        for dialect in [Dialect::OpenaiResponses, Dialect::Gemini] {
            let provider = ResolvedProvider::resolve(None, "example.com", None);
            let ctx = with_reasoning(dialect, &cfg, &provider, "/v1");
            let before = parses();
            rewrite_request(&ctx, br#"{"model":"m","input":[],"contents":[]}"#).unwrap();
            assert_eq!(parses() - before, 1, "{dialect:?}");
        }
    }

    /// The failing input of a break-it pass: the recovery from a provider's "image does not
    /// decode" rejection decoded every image outside the memory budget. Its check is now
    /// charged like a transcode: a deferring run reports its cost (the frame and room for a
    /// 16-bit one: 2 × 4 bytes per pixel), a run allowed less leaves the image as sent and says
    /// why, and one allowed enough decodes it (a valid PNG stays, a header over garbage is
    /// replaced).
    #[test]
    fn the_corrupt_image_check_is_charged_to_the_memory_budget() {
        let mut png = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(40, 30, image::Rgb([1, 2, 3]))
            .write_to(&mut png, image::ImageFormat::Png)
            .unwrap();
        let valid = STANDARD.encode(png.into_inner());
        let body = |data: &str| {
            serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                     "data": data}},
                    {"type": "text", "text": "what is it?"}]}]}))
            .unwrap()
        };
        let images = ImagesConfig::default();
        let cost = 2 * 40 * 30 * 4;
        let recovering = RewriteContext {
            image_recovery: Some(ImageRejectionKind::Corrupt),
            ..RewriteContext::new(Dialect::Anthropic, &images)
        };
        let deferring = RewriteContext {
            defer_image_work: true,
            ..recovering
        };
        let out = rewrite_request(&deferring, &body(&valid)).unwrap();
        assert_eq!(out.report.images.deferred, 1);
        assert_eq!(out.report.images.decode_bytes, cost);
        let short = RewriteContext {
            decode_allowance: cost - 1,
            ..recovering
        };
        let out = rewrite_request(&short, &body(&valid)).unwrap();
        assert_eq!(out.body, None, "left as sent");
        assert_eq!(out.report.images.failed_open, 1);
        assert!(
            out.report.reasons[0].starts_with(&format!(
                "left image messages[0].content[0] as sent: checking whether its image/png data \
                 decodes needs {cost} bytes"
            )),
            "{:?}",
            out.report.reasons
        );
        let enough = RewriteContext {
            decode_allowance: cost,
            ..recovering
        };
        let out = rewrite_request(&enough, &body(&valid)).unwrap();
        assert_eq!(out.report.images.replaced, 0, "{:?}", out.report.reasons);
        assert_eq!(out.report.images.failed_open, 0);
        let garbage = b64_png(40, 30, 64);
        let out = rewrite_request(&enough, &body(&garbage)).unwrap();
        assert_eq!(out.report.images.replaced, 1, "{:?}", out.report.reasons);
        assert!(String::from_utf8(out.body.unwrap())
            .unwrap()
            .contains(crate::texts::CORRUPT_IMAGE));
    }

    fn body_model(body: &[u8]) -> Value {
        serde_json::from_slice::<Value>(body).unwrap()["model"].clone()
    }

    #[test]
    fn overlapping_passes_run_in_turn() {
        // An unsupported (SVG) image in an assistant turn is replaced by a text block, and
        // shaping would move a thinking block's cache_control onto that very block: the two
        // passes' edits overlap, so shaping runs on the image passes' output.
        let svg = STANDARD.encode(b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
        let body = serde_json::to_vec(&json!({"model": "claude-opus-4-5", "messages": [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s",
                 "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/svg+xml",
                 "data": svg}}]}]}))
        .unwrap();
        let cfg = ImagesConfig::default();
        let provider = ResolvedProvider::resolve(None, "api.anthropic.com", None);
        let ctx = with_reasoning(Dialect::Anthropic, &cfg, &provider, "/v1/messages");
        let before = parses();
        let out = rewrite_request(&ctx, &body).unwrap();
        assert_eq!(
            parses() - before,
            2,
            "the fallback parses the image output again"
        );
        assert_eq!(out.report.images.replaced, 1);
        assert_eq!(out.report.shape.cache_control_moved, 1);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        let content = &v["messages"][0]["content"];
        assert!(content[0].get("cache_control").is_none());
        assert_eq!(content[1]["type"], "text");
        assert_eq!(content[1]["cache_control"], json!({"type": "ephemeral"}));
    }

    /// The captured turn of `with_rc`'s assistant message, keyed as its echo finds it.
    fn captured(
        with_rc: &Value,
    ) -> std::collections::HashMap<
        crate::dialect::fingerprint::Fingerprint,
        crate::dialect::turn::CapturedTurn,
    > {
        let body = serde_json::to_vec(with_rc).unwrap();
        crate::dialect::fingerprint::echoed_turns(Dialect::Openai, &body)
            .into_iter()
            .map(|t| (t.fingerprint, t.turn))
            .collect()
    }

    /// The model the route read for a request (an Azure OpenAI deployment its `models` table
    /// maps, a path's model) is still the request's model once restore has parsed the
    /// restored body again: the log, the accounting and the learned verdicts key by it, never
    /// by the body's `model` string.
    #[test]
    fn restore_keeps_the_model_the_route_read() {
        let turn = |rc: bool| {
            let mut m = json!({"role": "assistant", "content": "Hello."});
            if rc {
                m["reasoning_content"] = json!("Greet briefly.");
            }
            json!({"model": "prod-4o", "messages": [
                {"role": "user", "content": "Say hello."}, m,
                {"role": "user", "content": "Again."}]})
        };
        let known = captured(&turn(true));
        let dropped = ParsedBody::parse_named(
            bytes::Bytes::from(serde_json::to_vec(&turn(false)).unwrap()),
            Dialect::Openai,
            |_| Some("gpt-4o".to_owned()),
        )
        .unwrap();
        let images = ImagesConfig::default();
        let azure = ResolvedProvider::resolve(Some("azure-openai"), "e2e.openai.azure.com", None);
        let path = "/openai/deployments/prod-4o/chat/completions";
        let ctx = with_reasoning(Dialect::Openai, &images, &azure, path);
        let out = rewrite_parsed(&ctx, &known, dropped.doc(), &mut PassMemo::default()).unwrap();
        assert_eq!(out.report.restore.reasoning_content, 1);
        assert_eq!(out.report.model.as_deref(), Some("gpt-4o"));
        let v: Value = serde_json::from_slice(out.body.as_ref().unwrap()).unwrap();
        assert_eq!(v, turn(true), "the body's own model string is left as sent");
    }

    #[test]
    fn restore_runs_before_shaping_which_decides_what_goes_out() {
        let turn = |rc: bool| {
            let mut m = json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]});
            if rc {
                m["reasoning_content"] = json!("why \u{2028} \"quoted\" é");
            }
            json!({"model": "m", "messages": [
                {"role": "user", "content": "go"}, m,
                {"role": "tool", "tool_call_id": "call_0", "content": "done"}]})
        };
        let known = captured(&turn(true));
        let dropped = serde_json::to_vec(&turn(false)).unwrap();
        let images = ImagesConfig::default();
        // A route that reads reasoning_content gets it back, byte-exact in value.
        let local = ResolvedProvider::resolve(Some("local"), "127.0.0.1", None);
        let ctx = with_reasoning(Dialect::Openai, &images, &local, "/v1/chat/completions");
        let before = parses();
        let out = rewrite_with_restore(&ctx, &known, &dropped).unwrap();
        assert_eq!(parses() - before, 2, "the restored body is parsed again");
        assert_eq!(out.report.restore.turns, 1);
        assert_eq!(out.report.restore.reasoning_content, 1);
        let v: Value = serde_json::from_slice(out.body.as_ref().unwrap()).unwrap();
        assert_eq!(v, turn(true));
        assert_eq!(
            rewrite_with_restore(&ctx, &known, &dropped).unwrap().body,
            out.body,
            "deterministic"
        );
        // The digest the response is keyed by is the client's, restored or not.
        let plain = rewrite_with_restore(&ctx, &(), &dropped).unwrap();
        assert_eq!(plain.answers, out.answers);
        // A turn the client sends with its carrier is left as it is: nothing to change.
        let kept = serde_json::to_vec(&turn(true)).unwrap();
        let before = parses();
        let out = rewrite_with_restore(&ctx, &known, &kept).unwrap();
        assert_eq!(parses() - before, 1);
        assert_eq!(out.body, None);
        // A strict route reads no carrier: what restore added is taken off again, and the
        // request goes as the client sent it.
        let mistral = ResolvedProvider::resolve(None, "api.mistral.ai", None);
        let ctx = with_reasoning(Dialect::Openai, &images, &mistral, "/v1/chat/completions");
        let out = rewrite_with_restore(&ctx, &known, &dropped).unwrap();
        assert_eq!(out.body, None);
        assert_eq!(out.report.restore.turns, 0);
        // A (host, model) learned as "no restore" gets none.
        struct NoRestore;
        impl VerdictLookup for NoRestore {
            fn omit(&self, _host: &str, _model: &str) -> FieldSet {
                FieldSet::from([crate::state::Field::NoRestore])
            }
        }
        let ctx = RewriteContext {
            reasoning: with_reasoning(Dialect::Openai, &images, &local, "/v1/chat/completions")
                .reasoning
                .map(|r| ReasoningInputs {
                    verdicts: &NoRestore,
                    ..r
                }),
            ..with_reasoning(Dialect::Openai, &images, &local, "/v1/chat/completions")
        };
        assert_eq!(
            rewrite_with_restore(&ctx, &known, &dropped).unwrap().body,
            None
        );
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod cache_tests {
    use super::*;
    use crate::caching::{Breakpoints, CacheSettings, CacheTtl, Stabiliser};
    use crate::provider::Provider;
    use serde_json::{json, Value};

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/agents/claude_code/{name}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
        ))
        .unwrap()
    }

    /// A recorded Claude Code body without its own markers.
    fn unmarked(name: &str) -> String {
        fixture(name)
            .replace(
                r#","cache_control":{"type":"ephemeral","scope":"global"}"#,
                "",
            )
            .replace(r#","cache_control":{"type":"ephemeral"}"#, "")
    }

    fn ctx<'a>(
        images: &'a ImagesConfig,
        provider: &'a ResolvedProvider,
        cache: &'a CacheSettings,
        beta: Option<&'a str>,
        verdicts: &'a dyn VerdictLookup,
    ) -> RewriteContext<'a> {
        RewriteContext {
            reasoning: Some(ReasoningInputs {
                provider,
                upstream_path: "/v1/messages",
                droppable_params: &[],
                droppable_betas: &[],
                anthropic_beta: beta,
                path_model: None,
                verdicts,
                rejected: &(),
            }),
            cache,
            ..RewriteContext::new(Dialect::Anthropic, images)
        }
    }

    /// Issue 27 item 5: the forwarded positions derived from the passes' changes
    /// ([`Prefix::after_changes`]) are those a parse of the forwarded body gives, on every
    /// recorded Claude Code body, with and without its own markers, with breakpoints and the
    /// billing-line stabiliser (which removes a system block), and with a top-level parameter
    /// added (`stream_options`).
    #[test]
    fn forwarded_positions_from_the_changes_match_a_parse() {
        use crate::accounting::prefix::Prefix;
        let key = crate::digest::DigestKey::for_credential(None);
        let images = ImagesConfig::default();
        let provider = ResolvedProvider::resolve(None, "api.kimi.com", None);
        let settings = [
            auto(None, &[]),
            auto(
                Some(CacheTtl::OneHour),
                &[Stabiliser::ClaudeCodeBillingLine],
            ),
            CacheSettings {
                breakpoints: Breakpoints::Off,
                ttl: None,
                stabilize: vec![Stabiliser::ClaudeCodeBillingLine],
            },
        ];
        let dir = format!(
            "{}/tests/fixtures/agents/claude_code",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
        );
        let mut derived = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if !name.ends_with(".json") {
                continue;
            }
            for body in [fixture(&name), unmarked(&name)] {
                for cache in &settings {
                    for usage in [false, true] {
                        let c = RewriteContext {
                            usage_in_streams: usage,
                            ..ctx(&images, &provider, cache, None, &())
                        };
                        let doc = dialect::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
                        let out = rewrite_doc(&c, body.as_bytes(), &doc, &mut DocMemo::default())
                            .unwrap();
                        let (Some(sent), Some(changes)) = (&out.body, &out.changes) else {
                            continue;
                        };
                        let client = Prefix::of_doc(&doc, &key);
                        let want = Prefix::of(Dialect::Anthropic, sent, &key).unwrap();
                        if let Some(got) = client.after_changes(&doc, changes, sent, &key) {
                            assert_eq!(got, want, "{name}");
                            derived += 1;
                        }
                    }
                }
            }
        }
        assert!(derived >= 20, "derived only {derived} times");
    }

    fn auto(ttl: Option<CacheTtl>, stabilize: &[Stabiliser]) -> CacheSettings {
        CacheSettings {
            breakpoints: Breakpoints::Auto,
            ttl,
            stabilize: stabilize.to_vec(),
        }
    }

    fn system_markers(v: &Value) -> Vec<usize> {
        v["system"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, b)| b.get("cache_control").is_some())
            .map(|(i, _)| i)
            .collect()
    }

    /// A third-party Anthropic-wire route: the billing line goes, then the markers are placed
    /// on what is left (never on the removed block), with the 1h TTL beta merged into the
    /// client's `anthropic-beta`; both are logged and counted.
    #[test]
    fn stabiliser_then_breakpoints_on_a_third_party_route() {
        let images = ImagesConfig::default();
        let kimi = ResolvedProvider::resolve(None, "api.moonshot.ai", None);
        let cache = CacheSettings::resolve(
            Some(Breakpoints::Auto),
            Some(CacheTtl::OneHour),
            None,
            kimi.row,
        );
        let body = unmarked("direct-5-tools-turn3.json");
        let c = ctx(&images, &kimi, &cache, Some("client-beta-1"), &());
        let out = rewrite_request(&c, body.as_bytes()).unwrap();
        let sent = out.body.clone().unwrap();
        let v: Value = serde_json::from_slice(&sent).unwrap();
        assert!(!String::from_utf8_lossy(&sent).contains("x-anthropic-billing-header"));
        assert_eq!(v["system"].as_array().unwrap().len(), 2);
        assert_eq!(system_markers(&v), [1]);
        assert_eq!(
            v["system"][1]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
        assert_eq!(out.report.stabilized, 1);
        assert_eq!(out.report.breakpoints_added, 4);
        assert_eq!(
            out.set_headers,
            [(
                "anthropic-beta".to_owned(),
                format!("client-beta-1,{}", caching::EXTENDED_CACHE_TTL_BETA)
            )]
        );
        let reasons = out.report.reasons.join("\n");
        assert!(reasons.contains("stabilize: removed Claude Code's billing line from system[0]"));
        assert!(reasons.contains("on kimi)"));
        assert!(reasons.contains("cache_breakpoints: 4 cache_control marker(s) added (1h;"));
        // Deterministic, and the forwarded body is left alone by a second run.
        assert_eq!(rewrite_request(&c, body.as_bytes()).unwrap().body, out.body);
        let again = rewrite_request(&c, &sent).unwrap();
        assert_eq!(again.body, None);
        // A client that already sends the beta gets no header.
        let beta = format!("a, {}", caching::EXTENDED_CACHE_TTL_BETA);
        let c = ctx(&images, &kimi, &cache, Some(&beta), &());
        assert!(rewrite_request(&c, body.as_bytes())
            .unwrap()
            .set_headers
            .is_empty());
    }

    /// A (host, model) learned to reject the TTL beta: 5-minute markers, no header.
    #[test]
    fn a_learned_ttl_beta_rejection_places_5m_markers() {
        struct RejectsTtlBeta;
        impl VerdictLookup for RejectsTtlBeta {
            fn omit(&self, host: &str, model: &str) -> FieldSet {
                assert_eq!((host, model), ("api.moonshot.ai", "claude-opus-4-8"));
                FieldSet::from([Field::Beta(caching::EXTENDED_CACHE_TTL_BETA.to_owned())])
            }
        }
        let images = ImagesConfig::default();
        let kimi = ResolvedProvider::resolve(None, "api.moonshot.ai", None);
        let cache = auto(Some(CacheTtl::OneHour), &[]);
        let body = unmarked("direct-5-tools-turn3.json");
        let out = rewrite_request(
            &ctx(&images, &kimi, &cache, None, &RejectsTtlBeta),
            body.as_bytes(),
        )
        .unwrap();
        let sent = String::from_utf8(out.body.unwrap()).unwrap();
        assert!(!sent.contains("\"ttl\""));
        assert_eq!(
            sent.matches(r#""cache_control":{"type":"ephemeral"}"#)
                .count(),
            4
        );
        assert!(out.set_headers.is_empty());
        assert!(out
            .report
            .reasons
            .iter()
            .any(|r| r.contains("(learned): 5m markers")));
    }

    /// Anthropic itself documents the 1h TTL without a header: none is sent.
    #[test]
    fn anthropic_gets_1h_markers_without_the_beta() {
        let images = ImagesConfig::default();
        let anthropic = ResolvedProvider::resolve(None, "api.anthropic.com", None);
        let cache = auto(Some(CacheTtl::OneHour), &[]);
        let body = unmarked("direct-3-read.json");
        let out = rewrite_request(
            &ctx(&images, &anthropic, &cache, None, &()),
            body.as_bytes(),
        )
        .unwrap();
        assert!(out.report.breakpoints_added >= 3);
        assert!(out.set_headers.is_empty());
        let sent = String::from_utf8(out.body.unwrap()).unwrap();
        assert!(
            sent.contains("x-anthropic-billing-header"),
            "not stabilised"
        );
    }

    /// On anthropic routes (the row's defaults: no stabiliser, breakpoints off) every
    /// recorded Claude Code body goes as it would with every prompt-cache pass off.
    #[test]
    fn anthropic_route_defaults_are_byte_identical() {
        let images = ImagesConfig::default();
        let anthropic = ResolvedProvider::resolve(None, "api.anthropic.com", None);
        let defaults = CacheSettings::resolve(None, None, None, anthropic.row);
        let dir = concat!(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
            "/tests/fixtures/agents/claude_code"
        );
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let body = std::fs::read(&path).unwrap();
            let with =
                rewrite_request(&ctx(&images, &anthropic, &defaults, None, &()), &body).unwrap();
            let off = rewrite_request(
                &ctx(&images, &anthropic, &caching::CACHE_OFF, None, &()),
                &body,
            )
            .unwrap();
            assert_eq!(with.body, off.body, "{path:?}");
            assert_eq!(with.body, None, "{path:?}");
            assert_eq!(with.report.stabilized + with.report.breakpoints_added, 0);
        }
    }

    /// The TTL beta is merged into the `anthropic-beta` shaping sets (the binding beta, set
    /// because the stabiliser changed the binding prefix of signed thinking), not written over
    /// it.
    #[test]
    fn the_ttl_beta_merges_with_shapings_header() {
        static BINDING_AND_TTL_BETA: Provider = Provider {
            ttl_beta: true,
            ..crate::provider::PROVIDERS[0]
        };
        let images = ImagesConfig::default();
        let provider = ResolvedProvider {
            row: &BINDING_AND_TTL_BETA,
            ..ResolvedProvider::resolve(None, "api.anthropic.com", None)
        };
        assert_eq!(provider.row.name, "anthropic");
        let cache = auto(
            Some(CacheTtl::OneHour),
            &[Stabiliser::ClaudeCodeBillingLine],
        );
        let body = unmarked("firstparty-3-tools-turn3.json");
        let out = rewrite_request(
            &ctx(&images, &provider, &cache, Some("c"), &()),
            body.as_bytes(),
        )
        .unwrap();
        assert!(out.report.shape.binding_set, "{:?}", out.report.reasons);
        assert_eq!(
            out.set_headers,
            [(
                "anthropic-beta".to_owned(),
                format!(
                    "c,{},{}",
                    crate::reasoning::BINDING_BETA,
                    caching::EXTENDED_CACHE_TTL_BETA
                )
            )]
        );
    }

    /// A marker that would land on an image block the image passes replace (an SVG, which the
    /// provider rejects, becomes a text block): the markers are placed on the image passes'
    /// output instead.
    #[test]
    fn a_marker_on_a_replaced_image_goes_on_its_replacement() {
        use base64::Engine as _;
        let svg = base64::engine::general_purpose::STANDARD
            .encode(b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
        let body = serde_json::to_vec(&json!({"model": "claude-opus-4-5", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/svg+xml",
                 "data": svg}}]}]}))
        .unwrap();
        let images = ImagesConfig::default();
        let cache = auto(None, &[]);
        for reasoning in [true, false] {
            let provider = ResolvedProvider::resolve(None, "api.anthropic.com", None);
            let mut c = ctx(&images, &provider, &cache, None, &());
            if !reasoning {
                c.reasoning = None;
            }
            let out = rewrite_request(&c, &body).unwrap();
            assert_eq!(out.report.images.replaced, 1);
            assert_eq!(out.report.breakpoints_added, 1);
            let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
            let block = &v["messages"][0]["content"][1];
            assert_eq!(block["type"], "text");
            assert_eq!(block["cache_control"], json!({"type": "ephemeral"}));
        }
    }

    /// Other dialects: the prompt-cache passes never run.
    #[test]
    fn other_dialects_are_untouched() {
        let images = ImagesConfig::default();
        let provider = ResolvedProvider::resolve(None, "api.moonshot.ai", None);
        let cache = auto(
            Some(CacheTtl::OneHour),
            &[Stabiliser::ClaudeCodeBillingLine],
        );
        let body = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
        let c = RewriteContext {
            dialect: Dialect::Openai,
            ..ctx(&images, &provider, &cache, None, &())
        };
        let out = rewrite_request(&c, body).unwrap();
        assert_eq!(out.body, None);
        assert_eq!(out.report.breakpoints_added, 0);
    }
}
