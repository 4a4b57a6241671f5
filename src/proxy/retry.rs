//! The one retry (phase "on error status"). A 4xx to a buffered request earns at most one
//! more attempt, in two cases (`docs/dev/architecture.md#the-one-retry`):
//!
//! 1. it names as unknown a field this request sent, new for this (host, model): the verdict
//!    is stored first, so every later request omits the field too;
//! 2. it rejects an image the passes can repair, shrink or replace (a model that sees no
//!    images is remembered the same way);
//! 3. it rejects an `anthropic-beta` value the proxy added, or one of the client's that is on
//!    `[reasoning] droppable_betas` (docs/reasoning.md#beta-headers): the value is stored as
//!    `beta:<value>` for (host, model), and the passes leave it (and the body field it
//!    enables) out from then on.
//!
//! The request is then rebuilt from the client's original body and sent once more, only when
//! that changes the bytes or the headers the passes set; otherwise the 4xx goes to the client unchanged. Nothing new learned
//! means no retry, so a host that keeps rejecting never loops.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Response};

use crate::dialect::MAX_ERROR_BODY_BYTES;
use crate::images::recovery::{classify_image_rejection, ImageRejection, ImageRejectionKind};
use crate::proxy::ctx::{BodyFate, RequestCtx, Retried};
use crate::proxy::errors::ProxyError;
use crate::proxy::passes::{self, Passed, Plan};
use crate::proxy::send::{send, upstream_label};
use crate::proxy::AppState;
use crate::reasoning;
use crate::state::rejected::ScopedRejections;
use crate::state::{Field, FieldSet};
use crate::wire::body;
use crate::wire::upstream::UpstreamBody;

/// A buffered request, kept for the one retry.
pub(crate) struct Replay {
    pub plan: Arc<Plan>,
    /// The client's body as received (still encoded).
    pub original: Bytes,
    /// The client's headers after hygiene, before the passes touched them.
    pub client_headers: HeaderMap,
    pub method: Method,
    /// What the first run of the passes sent.
    pub first: Passed,
    /// The request's SigV4 handling: the retry is signed again as the first send was.
    pub signing: crate::proxy::outbound::Outbound,
}

/// What a 4xx taught.
enum Lesson {
    /// Fields the upstream named as unknown, new for this host and model (comma-separated).
    UnknownFields(String),
    /// An image the upstream rejected, to repair / shrink / replace.
    Image(ImageRejectionKind),
    /// Thinking signatures the upstream rejected (this many newly remembered).
    Signatures(usize),
    /// What carrier restore added was rejected: `model:no_restore` stored.
    NoRestore,
    /// `anthropic-beta` values the upstream rejected, new for this host and model
    /// (`beta:<value>`, comma-separated).
    Betas(String),
}

impl Lesson {
    /// The image rejection the passes recover from on the retry, for an image lesson.
    fn recovery(&self) -> Option<ImageRejectionKind> {
        match self {
            Lesson::Image(kind) => Some(*kind),
            Lesson::UnknownFields(_)
            | Lesson::Signatures(_)
            | Lesson::NoRestore
            | Lesson::Betas(_) => None,
        }
    }

    /// Why the retry was sent, as the request's log line says it.
    fn retried(self) -> Retried {
        match self {
            Lesson::UnknownFields(fields) => Retried::Without(fields),
            Lesson::Image(kind) => Retried::Image(kind),
            Lesson::Signatures(n) => Retried::Signatures(n),
            Lesson::NoRestore => Retried::NoRestore,
            Lesson::Betas(fields) => Retried::Betas(fields),
        }
    }
}

/// The upstream answered `resp` (a 4xx) to the first attempt: learn from it and retry once
/// when that changes what is sent, else return it as it came (its body re-joined).
///
/// Errors: the 4xx body broke or stalled past `idle_timeout_ms` while being read
/// ([`ProxyError::UpstreamBroken`]), or the retry itself failed to send.
pub(crate) async fn on_error_status(
    state: &AppState,
    ctx: &mut RequestCtx,
    replay: Replay,
    resp: Response<UpstreamBody>,
) -> Result<Response<UpstreamBody>, ProxyError> {
    let (parts, rbody) = resp.into_parts();
    // The 4xx is read as the provider wrote it: decoded when it came compressed (the client's
    // `accept-encoding` went upstream); the client still gets the original bytes.
    let encoding = parts
        .headers
        .get(http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = parts.status.as_u16();
    let uri = replay.plan.upstream_uri.clone();
    let (head, rest) = read_error_head(state, &uri, status, rbody).await?;
    let as_it_came = |head: Bytes, rest: Option<UpstreamBody>| Ok(rejoin(parts, head, rest));
    let (Some(route), Some(model), None) = (
        replay.first.reasoning_route.clone(),
        ctx.model.clone(),
        rest.as_ref(),
    ) else {
        return as_it_came(head, rest);
    };
    let limit = MAX_ERROR_BODY_BYTES as u64;
    let Ok(error_body) = body::decode(encoding.as_deref(), &head, limit) else {
        return as_it_came(head, rest);
    };
    let Some(lesson) = learn(
        state,
        ctx,
        &replay,
        &route,
        &model,
        status,
        error_body.into(),
    )
    .await
    else {
        return as_it_came(head, rest);
    };
    let passed = passes::run(
        &replay.plan,
        &state.passes,
        replay.original,
        lesson.recovery(),
        false,
        replay.first.cold.clone(),
    )
    .await;
    if passed.sent == replay.first.sent && passed.set_headers == replay.first.set_headers {
        return as_it_came(head, rest);
    }
    ctx.retried = Some(lesson.retried());
    let retry = (replay.client_headers, replay.method, replay.signing);
    send_retry(state, ctx, retry, passed, &uri).await
}

/// Read the head of a 4xx body (up to [`MAX_ERROR_BODY_BYTES`], within `idle_timeout_ms`):
/// the bytes read and, when the body is longer, the rest unread.
///
/// Errors: the body broke or stalled ([`ProxyError::UpstreamBroken`], naming the upstream of
/// `uri` and the `status`).
async fn read_error_head(
    state: &AppState,
    uri: &http::Uri,
    status: u16,
    rbody: UpstreamBody,
) -> Result<(Bytes, Option<UpstreamBody>), ProxyError> {
    let idle = Duration::from_millis(state.server.idle_timeout_ms);
    match tokio::time::timeout(idle, body::read_prefix(rbody, MAX_ERROR_BODY_BYTES as u64)).await {
        Ok(Ok(x)) => Ok(x),
        Ok(Err(e)) => Err(ProxyError::UpstreamBroken {
            upstream: upstream_label(uri),
            detail: format!("{status} response body broke: {e}"),
        }),
        Err(_) => Err(ProxyError::UpstreamBroken {
            upstream: upstream_label(uri),
            detail: format!(
                "{status} response body stalled for {} ms",
                state.server.idle_timeout_ms
            ),
        }),
    }
}

/// The 4xx as it came: its head, its body's bytes read so far (`head`) and the rest unread.
fn rejoin(
    parts: http::response::Parts,
    head: Bytes,
    rest: Option<UpstreamBody>,
) -> Response<UpstreamBody> {
    let body = match rest {
        Some(rest) => body::prepend(vec![head], rest),
        None => body::full(head),
    };
    Response::from_parts(parts, body)
}

/// Send the retry: the passes' second run (`passed`) with the client's headers and method
/// (`client`, as kept in [`Replay`], with its SigV4 handling: signed again over the retry's
/// bytes), the turn's
/// forwarded prefix replaced by the retry's, and the request's byte count, body fate and
/// report from the retry.
///
/// Errors: the retry failed to send ([`send`]).
async fn send_retry(
    state: &AppState,
    ctx: &mut RequestCtx,
    client: (HeaderMap, Method, crate::proxy::outbound::Outbound),
    passed: Passed,
    uri: &http::Uri,
) -> Result<Response<UpstreamBody>, ProxyError> {
    if let (Some(turn), Some(prefix)) = (&ctx.turn, passed.forwarded_prefix.clone()) {
        state.sessions.replace_forwarded(
            &ctx.credential_scope,
            turn,
            prefix,
            passed.retired.clone(),
        );
    }
    let (mut headers, method, signing) = client;
    passed.apply_headers(&mut headers);
    let route = ctx.route_name().to_owned();
    signing
        .apply(&route, &method, uri, &mut headers, &passed.sent)
        .await?;
    ctx.bytes_out = passed.sent.len() as u64;
    ctx.body = passed.fate;
    ctx.report = passed.report;
    ctx.upstream_started = Some(Instant::now());
    send(state, uri, method, headers, body::full(passed.sent), None).await
}

/// Read the 4xx: an unknown-field verdict (stored) or an image rejection. `None`: nothing
/// new to learn.
async fn learn(
    state: &AppState,
    ctx: &RequestCtx,
    replay: &Replay,
    route: &reasoning::ResolvedRoute,
    model: &str,
    status: u16,
    error_body: Bytes,
) -> Option<Lesson> {
    // What was sent, as the passes read it: decoded when it went upstream still encoded.
    let sent = if replay.first.fate == BodyFate::Rewritten {
        replay.first.sent.clone()
    } else {
        let plan = &replay.plan;
        match body::decode(plan.encoding.as_deref(), &replay.first.sent, plan.limit) {
            Ok(d) => Bytes::from(d),
            Err(_) => return None,
        }
    };
    let route_name = ctx.route_name();
    if let Some(beta) = learn_betas(state, replay, route, model, route_name, status, &error_body) {
        return beta;
    }
    let format = replay.plan.dialect.format();
    if let Some(wording) = format.rejected_signature(status, &error_body) {
        return learn_signatures(state, replay, route, model, route_name, &sent, &wording);
    }
    let restored = replay.first.report.restore.turns > 0;
    if restored && reasoning::restore_rejected::blames_restore(&error_body) {
        return learn_no_restore(state, route, model, route_name, status, &error_body);
    }
    let droppable = Arc::clone(&replay.plan.droppable);
    let detect_route = route.clone();
    let kept_body = error_body.clone();
    let found = tokio::task::spawn_blocking(move || {
        match reasoning::detect(status, &error_body, &sent, &detect_route, &droppable) {
            Some(d) => Some(Ok(d)),
            None => classify_image_rejection(status, &error_body).map(Err),
        }
    })
    .await
    .ok()
    .flatten()?;
    match found {
        Ok(detected)
            if restored
                && detected
                    .fields
                    .iter()
                    .any(|f| matches!(f, Field::Message(_))) =>
        {
            learn_no_restore(state, route, model, route_name, status, &kept_body)
        }
        Ok(detected) => learn_unknown_fields(state, route, model, route_name, status, &detected),
        Err(rejection) => Some(learn_image(
            state, route, model, route_name, status, &rejection,
        )),
    }
}

/// An unknown-field rejection (`detected`): store its verdict for (host, model) and retry
/// without the fields. `None` when every field was known already (nothing new: no retry).
fn learn_unknown_fields(
    state: &AppState,
    route: &reasoning::ResolvedRoute,
    model: &str,
    route_name: &str,
    status: u16,
    detected: &reasoning::Detected,
) -> Option<Lesson> {
    let learned =
        state
            .store
            .verdicts()
            .learn(&route.host, model, &detected.fields, &detected.wording);
    if learned.is_empty() {
        tracing::info!(target: "cachekeeper::retry", route = %route_name, host = %route.host, model = %model, "unknown-field rejection teaches nothing new; not retrying");
        return None;
    }
    let fields = learned.joined();
    tracing::info!(
        target: "cachekeeper::retry",
        route = %route_name,
        host = %route.host,
        model = %model,
        status,
        fields = %fields,
        wording = %detected.wording,
        "upstream named fields as unknown; verdict stored, retrying once without them"
    );
    Some(Lesson::UnknownFields(fields))
}

/// An image rejection: retry with the passes recovering from it; a model that sees no
/// images is also stored as a verdict for (host, model), so later requests drop images too.
fn learn_image(
    state: &AppState,
    route: &reasoning::ResolvedRoute,
    model: &str,
    route_name: &str,
    status: u16,
    rejection: &ImageRejection,
) -> Lesson {
    if rejection.kind == ImageRejectionKind::ModelCannotSeeImages {
        let verdict = FieldSet::from([Field::NoImageInput]);
        state
            .store
            .verdicts()
            .learn(&route.host, model, &verdict, rejection.wording);
    }
    tracing::info!(
        target: "cachekeeper::retry",
        route = %route_name,
        host = %route.host,
        model = %model,
        status,
        kind = rejection.kind.label(),
        wording = %rejection.wording,
        "upstream rejected an image; rebuilding and retrying once"
    );
    Lesson::Image(rejection.kind)
}

/// The upstream rejected a thinking signature: remember every signed block of what was sent
/// as rejected for the request's credential scope (the shaping pass strips them from now on)
/// and retry once. `None` when none is new (the retry would send the same blocks).
fn learn_signatures(
    state: &AppState,
    replay: &Replay,
    route: &reasoning::ResolvedRoute,
    model: &str,
    route_name: &str,
    sent: &[u8],
    wording: &str,
) -> Option<Lesson> {
    let blocks = reasoning::signatures::signed_blocks(sent);
    let new = ScopedRejections::new(&state.store, &replay.plan.credential_scope).learn(&blocks);
    if new == 0 {
        tracing::info!(target: "cachekeeper::retry", route = %route_name, host = %route.host, model = %model, "thinking-signature rejection teaches nothing new; not retrying");
        return None;
    }
    tracing::info!(
        target: "cachekeeper::retry",
        route = %route_name,
        host = %route.host,
        model = %model,
        status = 400,
        blocks = new,
        wording = %crate::state::wording_excerpt(wording),
        "upstream rejected a thinking signature; the request's signed blocks are remembered as rejected, retrying once without them"
    );
    Some(Lesson::Signatures(new))
}

/// A request carrier restore changed was refused for what the restore added: remember
/// `model:no_restore` for (host, model) and retry once with the client's own carriers only.
/// `None` when it was already known (the retry would send the same bytes).
fn learn_no_restore(
    state: &AppState,
    route: &reasoning::ResolvedRoute,
    model: &str,
    route_name: &str,
    status: u16,
    error_body: &[u8],
) -> Option<Lesson> {
    let wording = crate::state::wording_excerpt(&String::from_utf8_lossy(error_body));
    let learned = state.store.verdicts().learn(
        &route.host,
        model,
        &FieldSet::from([Field::NoRestore]),
        &wording,
    );
    if learned.is_empty() {
        return None;
    }
    tracing::info!(
        target: "cachekeeper::retry",
        route = %route_name,
        host = %route.host,
        model = %model,
        status,
        wording = %wording,
        "upstream rejected what carrier restore added; restore is off for this host and model, retrying once with the client's own carriers"
    );
    Some(Lesson::NoRestore)
}

/// The 4xx rejects `anthropic-beta` values the request carried
/// ([`reasoning::betas::rejected`]): `None` when it does not (read the 4xx otherwise);
/// `Some(None)` when it does but nothing may be learned (a value the client sent that is not
/// on `droppable_betas`, or nothing new): the 4xx goes back as it came; `Some(Some(_))` when
/// values were stored as `beta:<value>` for (host, model), to retry once without them.
fn learn_betas(
    state: &AppState,
    replay: &Replay,
    route: &reasoning::ResolvedRoute,
    model: &str,
    route_name: &str,
    status: u16,
    error_body: &[u8],
) -> Option<Option<Lesson>> {
    use reasoning::betas;
    // Where the values travelled: the body's `anthropic_beta` array (Amazon Bedrock; read
    // back from the bytes, on this error path only), else the header.
    let (client_values, sent_values) = if replay.plan.route.provider.row.betas_in_body {
        (
            betas::in_body(&replay.original),
            betas::in_body(&replay.first.sent),
        )
    } else {
        let client = replay.plan.anthropic_beta.clone();
        let sent =
            betas::forwarded(client.as_deref(), &replay.first.set_headers).map(str::to_owned);
        (client, sent)
    };
    let client = betas::values(client_values.as_deref());
    let carried = betas::values(sent_values.as_deref());
    let added: Vec<&str> = carried
        .iter()
        .copied()
        .filter(|v| !client.contains(v))
        .collect();
    let rejected = betas::rejected(status, error_body, &carried, &added)?;
    let droppable = &replay.plan.droppable_betas;
    let (learnable, kept): (Vec<&String>, Vec<&String>) = rejected.values.iter().partition(|v| {
        added.contains(&v.as_str()) || droppable.iter().any(|d| d.trim() == v.as_str())
    });
    if !kept.is_empty() {
        let kept = kept
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(",");
        tracing::info!(
            target: "cachekeeper::retry",
            route = %route_name,
            host = %route.host,
            model = %model,
            status,
            betas = %kept,
            wording = %rejected.wording,
            "upstream rejected anthropic-beta values the client sent; not on [reasoning] droppable_betas, so they are kept and the error goes to the client"
        );
    }
    if learnable.is_empty() {
        return Some(None);
    }
    let fields: FieldSet = learnable
        .iter()
        .map(|v| Field::Beta((*v).clone()))
        .collect();
    let learned = state
        .store
        .verdicts()
        .learn(&route.host, model, &fields, &rejected.wording);
    if learned.is_empty() {
        tracing::info!(target: "cachekeeper::retry", route = %route_name, host = %route.host, model = %model, "anthropic-beta rejection teaches nothing new; not retrying");
        return Some(None);
    }
    let joined = learned.joined();
    let whose = if learnable.iter().all(|v| added.contains(&v.as_str())) {
        "the proxy added"
    } else {
        "on [reasoning] droppable_betas"
    };
    tracing::info!(
        target: "cachekeeper::retry",
        route = %route_name,
        host = %route.host,
        model = %model,
        status,
        fields = %joined,
        wording = %rejected.wording,
        "upstream rejected anthropic-beta values {whose}; verdict stored, retrying once without them (and the body fields they enable)"
    );
    Some(Some(Lesson::Betas(joined)))
}
