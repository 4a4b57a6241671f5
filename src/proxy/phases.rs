//! The life of one request, as named phases over one [`RequestCtx`], in this order:
//!
//! 0. **reserved** ([`reserved`]): the client token checked and a `/t/<token>` segment
//!    stripped; `/healthz`, `/metrics` and the dashboard answered before any route.
//! 1. **route** ([`route`]): the client token's verdict; `CONNECT` refused; longest-prefix
//!    route match (404 listing the prefixes); the path's dialect and endpoint class.
//!    WebSocket upgrades leave here for [`upgrade`].
//! 2. **read body** ([`read_body`]): generation paths (POST) are read up to
//!    `max_rewrite_bytes` within the global buffer budget (`max_buffered_bytes`); everything
//!    else, larger bodies and bodies that found no room within `buffer_wait_ms`, stream
//!    through untouched.
//! 3. **plan** ([`plan`]): what the passes read besides the body (route, provider, credential
//!    scope, headers, verdicts), gathered once.
//! 4. **rewrite** ([`passes::run`]): the request passes in their lane (inline for a small body
//!    without image data, else the blocking pool), failing open;
//!    `dry_run` logs what would change and forwards the original bytes.
//! 5. **send** ([`send`]): header hygiene, `first_byte_timeout_ms`.
//! 6. **on error status** ([`retry::on_error_status`]): a 4xx to a buffered request may
//!    earn the one retry.
//! 7. **respond** ([`respond`]): status and headers copied (hop-by-hop dropped,
//!    `x-cachekeeper-rewrites` and, for event streams, `x-accel-buffering: no` added); the
//!    body streams back through the [`ResponseObserver`].
//! 8. **log**: the observer writes the request's line from the context when the body ends
//!    (or at once, for the proxy's own errors and upgrades).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;

use crate::accounting::session::SESSION_HEADER;
use crate::dialect::format::Endpoint;
use crate::dialect::Dialect;
use crate::provider::UpstreamAuth;
use crate::proxy::aws;
use crate::proxy::ctx::{ms_since, BodyFate, RequestCtx};
use crate::proxy::errors::ProxyError;
use crate::proxy::observe::{Observing, ResponseObserver};
use crate::proxy::outbound::Outbound;
use crate::proxy::passes::{self, Plan};
use crate::proxy::reserved;
use crate::proxy::retry::{self, Replay};
use crate::proxy::send::{classify_client_error, send, upstream_label};
use crate::proxy::{AppState, OVERHEAD_HEADER, REWRITES_HEADER};
use crate::route::{model_from_path, Route};
use crate::telemetry::Outcome;
use crate::wire::body::{self, BudgetPermit, ReadBody};
use crate::wire::stream::ObservedBody;
use crate::wire::tee::Framing;
use crate::wire::upstream::{self, UpstreamBody};
use crate::wire::{tunnel, ResponseBody};

/// One request, through every phase. Never fails: errors become responses in the dialect's
/// shape. The client token is checked (and a `/t/<token>` segment stripped) first; the
/// reserved paths ([`crate::reserved`]) are answered before any route is matched.
pub(crate) async fn handle(
    state: Arc<AppState>,
    mut req: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let started = Instant::now();
    // The URI as the client sent it, before a `/t/<token>` segment is stripped: what a SigV4
    // signature covers (`crate::proxy::aws`).
    let received_uri = req.uri().clone();
    let admission = reserved::admit(&state, &mut req);
    if let Some(which) = crate::reserved::classify(req.uri().path()) {
        return Ok(reserved::serve(&state, which, &req, admission, started).await);
    }
    let mut ctx = RequestCtx::new(req.method(), req.uri());
    if let Some(token) = state.server.client_token.as_deref() {
        ctx.mask_secret(token);
    }
    ctx.started = started;
    ctx.metrics = Some(Arc::clone(&state.metrics));
    Ok(
        match proxy(&state, &mut ctx, req, received_uri, admission.proxied()).await {
            Ok(Flow::Respond(resp)) => respond(&state, ctx, resp),
            Ok(Flow::Done(resp)) => resp,
            Err(err) => fail(ctx, err),
        },
    )
}

/// How the phases before "respond" ended.
enum Flow {
    /// An upstream response to stream back to the client.
    Respond(Response<UpstreamBody>),
    /// A response already complete (an upgrade), its log line written.
    Done(Response<ResponseBody>),
}

/// Phases 1–6. `received_uri`: the URI before the client token's path segment was
/// stripped.
async fn proxy(
    state: &AppState,
    ctx: &mut RequestCtx,
    req: Request<Incoming>,
    received_uri: http::Uri,
    token_ok: bool,
) -> Result<Flow, ProxyError> {
    let (route, uri) = route(state, ctx, &req, token_ok)?;
    if tunnel::is_upgrade(&req) {
        return Ok(Flow::Done(upgrade(state, ctx.take(), req, uri).await));
    }
    let (parts, incoming) = req.into_parts();
    let mut headers = parts.headers;
    // Read before the proxy's own headers are dropped.
    // Any bytes: a UTF-8 name (`☃`) is kept; bytes that are not UTF-8 become U+FFFD.
    let client_session = headers
        .get(SESSION_HEADER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // The headers as received, for a SigV4 signature's check (`host` included): kept only
    // on a route that signs and for a request that is signed.
    let signed = crate::credential::sigv4_signed(&headers);
    let unauthenticated = !headers.contains_key(header::AUTHORIZATION);
    // A body a signature covers is read to check the signature and sign again, even where no
    // pass runs (a Bearer API key's request is nothing of the proxy's to sign).
    let sign = state.signers.signs(&route) && (signed || unauthenticated);
    let received_headers = (sign || signed).then(|| headers.clone());
    upstream::upstream_request_headers(&mut headers, false);
    let own_token = own_token(state, &route, &headers, &uri)?;
    let parse = parts.method == Method::POST && ctx.endpoint.is_some();
    let read = read_body(state, ctx, &headers, incoming, parse || sign).await?;
    let received = |body| aws::Received {
        route: &route,
        method: &parts.method,
        uri: &received_uri,
        headers: received_headers.as_ref().unwrap_or(&headers),
        body,
    };
    // The buffered body's room in the budget, returned when this function ends (the
    // original, the rewritten copy and the replay are all dropped by then).
    let mut _reserved = BudgetPermit::default();
    // `sent`: the bytes that go upstream when they are known (a SigV4 signature covers them).
    let (outgoing, upload_done, replay, sent, signing) = match read {
        Read::Streamed(body, done) => {
            let signing = match &received_headers {
                Some(_) => aws::decide(&state.signers, &received(None)).await,
                None => own_token.clone().unwrap_or(Outbound::None),
            };
            (body, Some(done), None, Bytes::new(), signing)
        }
        Read::Buffered(original, permit) => {
            _reserved = permit;
            let signing = match &received_headers {
                Some(_) => aws::decide(&state.signers, &received(Some(&original))).await,
                None => own_token.unwrap_or(Outbound::None),
            };
            if parse {
                let mut plan = plan(
                    state,
                    ctx,
                    Arc::clone(&route),
                    &headers,
                    uri.clone(),
                    &signing,
                );
                plan.client_session = client_session;
                let replay = rewrite(
                    state,
                    ctx,
                    plan,
                    &parts.method,
                    &mut headers,
                    original,
                    &signing,
                )
                .await;
                let sent = replay.first.sent.clone();
                (body::full(sent.clone()), None, Some(replay), sent, signing)
            } else {
                // Read for its signature only: sent as it came, signed again.
                ctx.bytes_out = original.len() as u64;
                (body::full(original.clone()), None, None, original, signing)
            }
        }
    };
    signing
        .apply(&route.name, &parts.method, &uri, &mut headers, &sent)
        .await?;
    ctx.upstream_auth = signing.label();
    let now = Instant::now();
    ctx.upstream_started = Some(now);
    ctx.request_overhead = Some(now.duration_since(ctx.started));
    let resp = send(state, &uri, parts.method, headers, outgoing, upload_done).await?;
    let resp = match replay {
        // A request sent as the client signed it is never sent again changed: its retry
        // could not be signed.
        Some(replay)
            if resp.status().is_client_error() && !ctx.dry_run() && !signing.keeps_original() =>
        {
            retry::on_error_status(state, ctx, replay, resp).await?
        }
        _ => resp,
    };
    ctx.ttfb_ms = ctx.upstream_started.map(ms_since);
    ctx.upstream_head = Some(Instant::now());
    Ok(Flow::Respond(resp))
}

/// The route's own access token ([`crate::google_token`]) for a request that carries no
/// credential, on a route with `[routes.google]`; `None` otherwise.
///
/// Errors: [`ProxyError::NoToken`] when the route has no token (yet).
fn own_token(
    state: &AppState,
    route: &Route,
    headers: &HeaderMap,
    uri: &http::Uri,
) -> Result<Option<Outbound>, ProxyError> {
    let Some(slot) = state.tokens.slot(route) else {
        return Ok(None);
    };
    if crate::credential::present(headers, uri.query()) {
        return Ok(None);
    }
    match slot.bearer() {
        Ok(v) => Ok(Some(Outbound::Token(v))),
        Err(reason) => Err(ProxyError::NoToken {
            route: route.name.clone(),
            reason,
        }),
    }
}

/// Phases 3 and 4 for a buffered generation request: the plan's passes run on `original`,
/// `headers` get their edits; the context gets the outcome. Returns what the one retry
/// needs (the first run's bytes in `first.sent`).
async fn rewrite(
    state: &AppState,
    ctx: &mut RequestCtx,
    plan: Plan,
    method: &Method,
    headers: &mut HeaderMap,
    original: Bytes,
    signing: &Outbound,
) -> Replay {
    let route = Arc::clone(&plan.route);
    record(state, ctx, &route, headers, &original);
    let plan = Arc::new(plan);
    ctx.credential_scope = plan.credential_scope.clone();
    ctx.sealing = plan.sealing.clone();
    let client_headers = headers.clone();
    let passed = passes::run(&plan, &state.passes, original.clone(), None, true, None).await;
    passed.apply_headers(headers);
    ctx.body = passed.fate;
    ctx.bytes_out = passed.sent.len() as u64;
    ctx.report = passed.report.clone();
    ctx.answers = passed.answers;
    if let Some(turn) = passed.turn.clone() {
        ctx.turn = Some(turn);
        ctx.sessions = Some(Arc::clone(&state.sessions));
    }
    if let Some(m) = &ctx.report.model {
        ctx.model = Some(m.clone());
    }
    Replay {
        plan,
        original,
        client_headers,
        method: method.clone(),
        first: passed,
        signing: signing.clone(),
    }
}

/// `serve --record FILE`: a buffered generation request written as received.
fn record(
    state: &AppState,
    ctx: &RequestCtx,
    route: &Route,
    headers: &HeaderMap,
    original: &Bytes,
) {
    if let Some(rec) = state.record.as_ref() {
        if ctx.endpoint == Some(Endpoint::Generate) {
            let enc = headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok());
            let ts = crate::proxy::ctx::now_ms();
            rec.record(ts, &route.name, &ctx.rest, enc, original.clone());
        }
    }
}

/// Phase 1: client token (`token_ok`: [`reserved::admit`]'s verdict), method, route, path
/// class. Returns the route and the upstream URI.
fn route(
    state: &AppState,
    ctx: &mut RequestCtx,
    req: &Request<Incoming>,
    token_ok: bool,
) -> Result<(Arc<Route>, http::Uri), ProxyError> {
    if !token_ok {
        // The log line names the route the request would have taken (the client is told
        // nothing about the routes beyond the error's shape, its dialect's).
        if let Some(m) = state.routes.find(&ctx.path, req.uri().query()) {
            ctx.route = Some(m.route);
            ctx.rest = m.rest;
        }
        return Err(ProxyError::BadClientToken);
    }
    if req.method() == Method::CONNECT {
        return Err(ProxyError::MethodNotAllowed(req.method().to_string()));
    }
    let Some(matched) = state.routes.find(&ctx.path, req.uri().query()) else {
        return Err(ProxyError::NoRoute {
            path: ctx.path.clone(),
            prefixes: state.routes.prefixes(),
        });
    };
    // A path that would climb out of the route's base path is refused (with no base path
    // there is nothing to leave: the path is forwarded as sent).
    if !matched.route.base_path.is_empty() && crate::route::climbs_out(&matched.rest) {
        // Answered in the route's dialect, named in the log line.
        ctx.route = Some(Arc::clone(&matched.route));
        ctx.rest = matched.rest;
        return Err(ProxyError::DotSegment);
    }
    let class = matched.route.classify(&matched.rest);
    ctx.dialect = matched.route.dialect.or(class.map(|(d, _)| d));
    if let Some(x) = crate::wire::limits::head_excess(req.headers()) {
        // Answered in the route's dialect, named in the log line.
        ctx.route = Some(Arc::clone(&matched.route));
        ctx.rest = matched.rest;
        return Err(ProxyError::HeadersTooLarge {
            fields: x.fields,
            bytes: x.bytes,
        });
    }
    ctx.endpoint = class.map(|(_, e)| e);
    ctx.model = matched
        .route
        .model_of(model_from_path(&matched.rest).as_deref(), None);
    ctx.upstream_uri = Some(matched.upstream_uri.clone());
    ctx.rest = matched.rest;
    ctx.route = Some(Arc::clone(&matched.route));
    let row = matched.route.provider.row;
    if row.auth == UpstreamAuth::Required
        && state.tokens.slot(&matched.route).is_none()
        && !crate::credential::present(req.headers(), req.uri().query())
    {
        return Err(ProxyError::NoCredential {
            route: matched.route.name.clone(),
            provider: row.name,
        });
    }
    Ok((matched.route, matched.upstream_uri))
}

/// What phase 2 read.
enum Read {
    /// The whole body, to run the passes on, and its reservation in the buffer budget (held
    /// until the request has been sent and answered, retry included).
    Buffered(Bytes, BudgetPermit),
    /// The body streams upstream as it arrives; the receiver fires when it has been sent.
    Streamed(UpstreamBody, tokio::sync::oneshot::Receiver<()>),
}

/// Phase 2: read a generation body up to `max_rewrite_bytes` within the global buffer budget
/// (`max_buffered_bytes`, waiting up to `buffer_wait_ms` for room); stream everything else.
/// Every client body, read or streamed, may pause at most `body_idle_timeout_ms` between two
/// chunks.
async fn read_body(
    state: &AppState,
    ctx: &mut RequestCtx,
    headers: &HeaderMap,
    incoming: Incoming,
    parse: bool,
) -> Result<Read, ProxyError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let idle = Duration::from_millis(state.server.body_idle_timeout_ms);
    if !parse {
        return Ok(Read::Streamed(
            body::streamed(Vec::new(), incoming, idle, tx),
            rx,
        ));
    }
    let content_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limits = body::ReadLimits {
        limit: state.server.max_rewrite_bytes,
        idle,
        budget: &state.buffers,
        budget_wait: Duration::from_millis(state.server.buffer_wait_ms),
    };
    match body::read_bounded(incoming, content_length, limits).await {
        Err(e) => Err(ProxyError::ClientBody(e.to_string())),
        Ok(ReadBody::TooLarge { head, rest }) => {
            ctx.body = BodyFate::TooLarge;
            ctx.bytes_in = content_length.unwrap_or(0);
            ctx.bytes_out = ctx.bytes_in;
            Ok(Read::Streamed(body::streamed(head, rest, idle, tx), rx))
        }
        Ok(ReadBody::OverBudget { head, rest }) => {
            tracing::warn!(
                target: "cachekeeper::server",
                route = ctx.route_name(),
                max_buffered_bytes = state.server.max_buffered_bytes,
                buffer_wait_ms = state.server.buffer_wait_ms,
                "no room in the buffer budget within buffer_wait_ms; forwarding the body untouched"
            );
            state.metrics.buffer_budget_exceeded(ctx.route_name());
            ctx.body = BodyFate::OverBudget;
            ctx.bytes_in = content_length.unwrap_or(0);
            ctx.bytes_out = ctx.bytes_in;
            Ok(Read::Streamed(body::streamed(head, rest, idle, tx), rx))
        }
        Ok(ReadBody::Buffered(original, permit)) => {
            ctx.bytes_in = original.len() as u64;
            Ok(Read::Buffered(original, permit))
        }
    }
}

/// Every line of a comma-list header joined with `,` (`None` when absent): a client may send
/// `anthropic-beta` as several lines, and a pass that sets the header replaces all of them
/// (the failing input: `-H anthropic-beta:a-1 -H anthropic-beta:b-2` lost `b-2` when the proxy
/// merged its own value in).
fn joined_header(headers: &HeaderMap, name: &str) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Phase 3: what the passes read besides the body. `signing`: what is done to the request's
/// credential ([`Outbound`]): a request sent as the client signed it runs the passes dry,
/// and one whose SigV4 signature was not checked (signed by the proxy on a `sign_all` route)
/// is scoped as carrying no credential, not by the access key id it claims
/// ([`crate::credential::anonymous`]).
fn plan(
    state: &AppState,
    ctx: &RequestCtx,
    route: Arc<Route>,
    headers: &HeaderMap,
    upstream_uri: http::Uri,
    signing: &Outbound,
) -> Plan {
    let header_str = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let credential = if signing.vouches_for_credential() {
        crate::credential::identify(headers, upstream_uri.query())
    } else {
        crate::credential::anonymous()
    };
    Plan {
        dialect: ctx.dialect.unwrap_or(Dialect::Openai),
        upstream_path: format!("{}{}", route.base_path, ctx.rest),
        // The path's model as the route reads it, which the route phase put on `ctx`.
        path_model: ctx.model.clone(),
        credential_scope: credential.scope,
        sealing: credential.sealing,
        digest_key: credential.digest_key,
        encoding: header_str(header::CONTENT_ENCODING.as_str()),
        anthropic_beta: joined_header(headers, "anthropic-beta"),
        droppable: state.reasoning.droppable_params.clone().into(),
        droppable_betas: state.reasoning.droppable_betas.clone().into(),
        store: state.store.clone(),
        transcodes: Arc::clone(&state.transcodes),
        limit: state.server.max_rewrite_bytes,
        decode_wait: Duration::from_millis(state.server.buffer_wait_ms),
        upstream_uri,
        route,
        sessions: (ctx.endpoint == Some(Endpoint::Generate)).then(|| Arc::clone(&state.sessions)),
        client_session: None,
        arrived_ms: ctx.arrived_ms,
        signed: signing.keeps_original(),
    }
}

/// The content type of an AWS event stream (binary frames), as Amazon Bedrock's streaming
/// operations answer (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html).
const AWS_EVENT_STREAM: &[u8] = b"application/vnd.amazon.eventstream";

/// How a response body is cut for its observer, from its `content-type` (case-insensitive):
/// SSE, an AWS event stream (binary frames, Bedrock's InvokeModelWithResponseStream and
/// ConverseStream: read from a decoded copy, never appended to), else one JSON body.
fn framing(headers: &HeaderMap) -> Framing {
    let Some(ct) = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes) else {
        return Framing::Json;
    };
    let starts = |prefix: &[u8]| {
        ct.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    if starts(b"text/event-stream") {
        Framing::EventStream
    } else if starts(AWS_EVENT_STREAM) {
        Framing::AwsEventStream
    } else {
        Framing::Json
    }
}

/// Phase 7: stream the upstream's response back through the observer, which writes the log
/// line when the body ends.
fn respond(
    state: &AppState,
    mut ctx: RequestCtx,
    resp: Response<UpstreamBody>,
) -> Response<ResponseBody> {
    let (mut parts, body) = resp.into_parts();
    ctx.status = parts.status.as_u16();
    upstream::strip_hop_by_hop(&mut parts.headers, false);
    let framing = framing(&parts.headers);
    // Both kinds of event stream are streams: logged so, and never buffered by a proxy in
    // front (`x-accel-buffering: no`).
    ctx.streamed = framing != Framing::Json;
    // An error event may be appended to SSE only: a plain-text event cannot go inside a
    // compressed stream (such a stream is aborted instead when it breaks), nor inside an AWS
    // event stream's binary frames.
    let may_append =
        framing == Framing::EventStream && !parts.headers.contains_key(header::CONTENT_ENCODING);
    if ctx.streamed {
        parts
            .headers
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
    }
    if may_append {
        // An error event may be appended if the upstream breaks mid-way.
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    if let Ok(v) = HeaderValue::from_str(&ctx.rewrites_header()) {
        parts.headers.insert(REWRITES_HEADER, v);
    }
    parts.headers.insert(OVERHEAD_HEADER, ctx.overhead_header());
    let idle = Duration::from_millis(state.server.idle_timeout_ms);
    // A generation's successful response is observed (usage, carriers); anything else only
    // counted.
    let observing = (ctx.endpoint == Some(Endpoint::Generate) && parts.status.is_success())
        .then_some(ctx.dialect)
        .flatten()
        .map(|dialect| {
            let encoding = parts
                .headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok());
            Observing::new(dialect, framing, encoding, state.store.clone())
        });
    ctx.response_overhead = ctx.upstream_head.map(|t| t.elapsed());
    let observed = ObservedBody::new(
        body,
        idle,
        may_append,
        ResponseObserver::new(ctx, may_append, observing),
    )
    .cut_by(state.cutoff.waiter());
    Response::from_parts(parts, observed.boxed_unsync())
}

/// The proxy's own error: logged, then answered in the dialect's shape.
fn fail(mut ctx: RequestCtx, err: ProxyError) -> Response<ResponseBody> {
    ctx.set_error(&err);
    tracing::warn!(
        target: "cachekeeper::server",
        route = ctx.route_name(),
        error = %err,
        kind = err.label(),
        retryable = err.retryable(),
        "request failed in the proxy"
    );
    // Read before the log line: writing it moves the context out.
    let dialect = ctx.error_dialect();
    let overhead = ctx.overhead_header();
    ctx.emit(Outcome::ProxyError);
    let mut resp = err.response::<Bytes>(dialect).map(full_body);
    if let Ok(v) = HeaderValue::from_str(&format!("proxy_error={}", err.label())) {
        resp.headers_mut().insert(REWRITES_HEADER, v);
    }
    resp.headers_mut().insert(OVERHEAD_HEADER, overhead);
    resp
}

/// Tunnel a WebSocket (or any HTTP/1.1 upgrade): forward the handshake, and on `101` copy
/// bytes both ways until either side closes.
async fn upgrade(
    state: &AppState,
    mut ctx: RequestCtx,
    mut req: Request<Incoming>,
    uri: http::Uri,
) -> Response<ResponseBody> {
    let client_upgrade = hyper::upgrade::on(&mut req);
    let (parts, _) = req.into_parts();
    let mut headers = parts.headers;
    upstream::upstream_request_headers(&mut headers, true);
    let mut up = Request::new(
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *up.method_mut() = parts.method;
    *up.uri_mut() = uri.clone();
    *up.version_mut() = Version::HTTP_11;
    *up.headers_mut() = headers;
    ctx.request_overhead = Some(ctx.started.elapsed());
    let resp = match state.client.request(up).await {
        Ok(r) => r,
        Err(e) => {
            let err =
                classify_client_error(&e, upstream_label(&uri), state.server.connect_timeout_ms);
            return fail(ctx, err);
        }
    };
    ctx.ttfb_ms = Some(ms_since(ctx.started));
    ctx.upstream_head = Some(Instant::now());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let resp = resp.map(|b| {
            b.map_err(|e| Box::new(e) as upstream::BoxError)
                .boxed_unsync()
        });
        let mut resp = respond(state, ctx, resp);
        // Not a rewritten body: the upgrade handshake's answer says nothing of the passes.
        resp.headers_mut().remove(REWRITES_HEADER);
        return resp;
    }
    ctx.status = resp.status().as_u16();
    let mut resp = resp;
    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(tunnel::copy_both_ways(
        client_upgrade,
        upstream_upgrade,
        ctx.route_name().to_owned(),
    ));
    let overhead = ctx.overhead_header();
    ctx.response_overhead = ctx.upstream_head.map(|t| t.elapsed());
    ctx.emit(Outcome::Upgraded);
    let (mut rparts, _) = resp.into_parts();
    rparts.headers.insert(OVERHEAD_HEADER, overhead);
    Response::from_parts(
        rparts,
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync(),
    )
}

pub(super) fn full_body(b: Bytes) -> ResponseBody {
    Full::new(b).map_err(|never| match never {}).boxed_unsync()
}
