//! The listener and the life of one request.
//!
//! Phases, in order (one [`RequestLog`] carries what each phase learned):
//! 1. **route**: `/healthz`; longest-prefix route match (404 listing the prefixes); the
//!    client token check; WebSocket upgrades are tunnelled from here.
//! 2. **body**: generation paths (POST, see [`classify_path`]) are read up to
//!    `max_rewrite_bytes` and decoded; everything else streams through untouched.
//! 3. **passes**: [`rewrite_request`] on a blocking thread; any failure forwards the original
//!    bytes (fail open). `dry_run` logs what would change and forwards the original.
//! 4. **upstream**: header hygiene, send, `first_byte_timeout_ms`.
//! 5. **response**: status and headers copied (hop-by-hop dropped, `x-cachekeeper-rewrites`
//!    and, for event streams, `x-accel-buffering: no` added); the body streams back through
//!    [`ObservedBody`], which writes the log line when it ends.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::config::ReasoningConfig;
use crate::config::{Loaded, ServerConfig};
use crate::dialect::Dialect;
use crate::images::recovery::{classify_image_rejection, ImageRejectionKind};
use crate::proxy::errors::ProxyError;
use crate::reasoning::{self, ResolvedRoute};
use crate::rewrite::{
    rewrite_request, ReasoningInputs, RewriteContext, RewriteOutcome, RewriteReport, VerdictLookup,
};
use crate::route::{classify_path, error_dialect_for_path, model_from_path, Matched, RouteTable};
use crate::state::{Field, FieldSet, Store, StoreOptions};
use crate::telemetry::{redact_query, Outcome, RequestLog};
use crate::wire::body::{self, ReadBody};
use crate::wire::stream::ObservedBody;
use crate::wire::upstream::{self, BoxError, HttpClient};

/// The body type of every response the proxy sends.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// Response header that tells the client what the passes did.
pub const REWRITES_HEADER: &str = "x-cachekeeper-rewrites";
/// Request header carrying the client token when `[server] client_token` is set.
pub const TOKEN_HEADER: &str = "x-cachekeeper-token";

/// How long a client may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Shared, read-only state of a running proxy.
struct AppState {
    routes: RouteTable,
    client: HttpClient,
    server: ServerConfig,
    reasoning: ReasoningConfig,
    store: Store,
    /// Bounds how many requests run the passes at once, so concurrent image decodes cannot
    /// grow memory without limit (each pass run is CPU-bound anyway).
    passes: tokio::sync::Semaphore,
    /// Transcoded images, shared by all requests (bounded by `[images] transcode_cache_bytes`).
    transcodes: Arc<crate::images::cache::TranscodeCache>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Routes(String),
    #[error(transparent)]
    Client(#[from] upstream::ClientBuildError),
}

/// A bound, not yet running proxy.
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
}

impl Server {
    /// Bind the listener (`listen` overrides `[server] listen`; port 0 picks a free port)
    /// and build the route table and upstream client.
    pub async fn bind(loaded: &Loaded, listen: Option<SocketAddr>) -> Result<Self, StartError> {
        let cfg = &loaded.config;
        let routes = RouteTable::new(cfg).map_err(StartError::Routes)?;
        let ca = cfg.server.ca_file.as_ref().map(|p| loaded.base_dir.join(p));
        let client = upstream::build_client(
            Duration::from_millis(cfg.server.connect_timeout_ms),
            ca.as_deref(),
        )?;
        let addr = listen.unwrap_or(cfg.server.listen);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let store = Store::open(&StoreOptions::from_config(&cfg.state, &loaded.base_dir));
        Ok(Self {
            listener,
            state: Arc::new(AppState {
                routes,
                client,
                server: cfg.server.clone(),
                reasoning: cfg.reasoning.clone(),
                store,
                passes: tokio::sync::Semaphore::new(concurrent_passes()),
                transcodes: Arc::new(crate::images::cache::TranscodeCache::new(
                    cfg.images.transcode_cache_bytes,
                )),
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` completes, then stop accepting and let in-flight requests
    /// (streams included) finish for up to `shutdown_grace_ms`.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let graceful = GracefulShutdown::new();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // A client must send its request headers within this long (slow-header clients).
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT);
        let grace = Duration::from_millis(self.state.server.shutdown_grace_ms);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (stream, _peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(target: "cachekeeper::server", error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let state = self.state.clone();
                    let svc = service_fn(move |req| handle(state.clone(), req));
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                    let conn = graceful.watch(conn.into_owned());
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(target: "cachekeeper::server", error = %e, "connection ended with an error");
                        }
                    });
                }
                () = &mut shutdown => break,
            }
        }
        drop(self.listener);
        tracing::info!(target: "cachekeeper::server", grace_ms = grace.as_millis() as u64, "shutting down; waiting for in-flight requests");
        if tokio::time::timeout(grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(target: "cachekeeper::server", "grace period over; closing remaining connections");
        }
    }
}

/// Requests that may run the passes at once: twice the CPUs (at least 2).
fn concurrent_passes() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2)
}

fn text_response(status: StatusCode, text: &'static str) -> Response<ResponseBody> {
    let mut r = Response::new(full_body(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r
}

fn full_body(b: Bytes) -> ResponseBody {
    Full::new(b).map_err(|never| match never {}).boxed_unsync()
}

fn ms_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One request, through every phase. Never fails: errors become responses.
async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let started = Instant::now();
    let path = req.uri().path().to_owned();
    if path == "/healthz" && (req.method() == Method::GET || req.method() == Method::HEAD) {
        return Ok(text_response(StatusCode::OK, "ok\n"));
    }
    let mut log = RequestLog {
        method: req.method().to_string(),
        path: path.clone(),
        query: req.uri().query().map(redact_query),
        body: "passthrough",
        ..RequestLog::default()
    };

    // Phase 1: client token, route.
    if let Some(expected) = &state.server.client_token {
        let given = req.headers().get(TOKEN_HEADER).map(HeaderValue::as_bytes);
        if !given.is_some_and(|g| constant_time_eq(g, expected.as_bytes())) {
            let dialect = error_dialect_for_path(&path, None);
            return Ok(proxy_error(
                ProxyError::BadClientToken,
                dialect,
                log,
                started,
            ));
        }
    }
    if req.method() == Method::CONNECT {
        let err = ProxyError::MethodNotAllowed(req.method().to_string());
        return Ok(proxy_error(
            err,
            error_dialect_for_path(&path, None),
            log,
            started,
        ));
    }
    let query = req.uri().query().map(str::to_owned);
    let Some(matched) = state.routes.find(&path, query.as_deref()) else {
        let err = ProxyError::NoRoute {
            path: path.clone(),
            prefixes: state.routes.prefixes(),
        };
        return Ok(proxy_error(
            err,
            error_dialect_for_path(&path, None),
            log,
            started,
        ));
    };
    log.route = matched.route.name.clone();
    let class = classify_path(&matched.rest);
    let dialect = matched.route.dialect.or(class.map(|(d, _)| d));
    log.dialect = dialect.map(Dialect::as_str);
    if is_upgrade(&req) {
        return Ok(tunnel_upgrade(&state, matched, req, log, started).await);
    }

    // Phase 2 + 3: body and passes.
    let parse = req.method() == Method::POST && class.is_some();
    let (parts, incoming) = req.into_parts();
    let mut headers = parts.headers;
    upstream::upstream_request_headers(&mut headers, false);
    let mut rewrites_header = "passthrough".to_owned();
    let mut replay: Option<Replay> = None;
    let mut upload_done: Option<tokio::sync::oneshot::Receiver<()>> = None;
    let upstream_body = if parse {
        let content_length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match body::read_bounded(incoming, state.server.max_rewrite_bytes, content_length).await {
            Err(e) => {
                let err = ProxyError::ClientBody(e.to_string());
                return Ok(proxy_error(err, dialect, log, started));
            }
            Ok(ReadBody::TooLarge { head, rest }) => {
                log.body = "too_large";
                rewrites_header = "too_large".to_owned();
                log.bytes_in = content_length.unwrap_or(0);
                log.bytes_out = log.bytes_in;
                let (tx, rx) = tokio::sync::oneshot::channel();
                upload_done = Some(rx);
                body::streamed(head, rest, tx)
            }
            Ok(ReadBody::Buffered(original)) => {
                log.bytes_in = original.len() as u64;
                let client_headers = headers.clone();
                let dialect = dialect.unwrap_or(Dialect::Openai);
                let passed = run_passes(
                    &state,
                    &matched,
                    dialect,
                    &mut headers,
                    original.clone(),
                    None,
                    &mut log,
                )
                .await;
                rewrites_header = rewrites_summary(&log, matched.route.dry_run);
                log.bytes_out = passed.sent.len() as u64;
                let body = body::full(passed.sent.clone());
                replay = Some(Replay {
                    original,
                    client_headers,
                    dialect,
                    passed,
                });
                body
            }
        }
    } else {
        let (tx, rx) = tokio::sync::oneshot::channel();
        upload_done = Some(rx);
        body::streamed(Vec::new(), incoming, tx)
    };

    // Phase 4: upstream, and at most one retry after an unknown-field 4xx.
    let method = parts.method;
    let upstream_started = Instant::now();
    let resp = match send_upstream(
        &state,
        &matched,
        method.clone(),
        headers,
        upstream_body,
        upload_done,
    )
    .await
    {
        Ok(r) => r,
        Err(err) => return Ok(proxy_error(err, dialect, log, started)),
    };
    let resp = match replay {
        Some(replay) if resp.status().is_client_error() && !matched.route.dry_run => {
            match retry_once(&state, &matched, &method, replay, resp, &mut log).await {
                Ok(r) => r,
                Err(err) => return Ok(proxy_error(err, dialect, log, started)),
            }
        }
        _ => resp,
    };
    if let Some(fields) = &log.retried_without {
        // The retry re-ran the passes: report what went out the second time.
        rewrites_header = format!(
            "{}; retried_without={fields}",
            rewrites_summary(&log, matched.route.dry_run)
        );
    }
    if log.model.is_none() {
        log.model = model_from_path(&matched.rest).map(str::to_owned);
    }
    log.ttfb_ms = Some(ms_since(upstream_started));

    // Phase 5: response.
    let (mut rparts, rbody) = resp.into_parts();
    log.status = rparts.status.as_u16();
    upstream::strip_hop_by_hop(&mut rparts.headers, false);
    let is_sse = rparts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
    if is_sse {
        rparts
            .headers
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
        // An error event may be appended if the upstream breaks mid-way.
        rparts.headers.remove(header::CONTENT_LENGTH);
    }
    if let Ok(v) = HeaderValue::from_str(&rewrites_header) {
        rparts.headers.insert(REWRITES_HEADER, v);
    }
    let idle = Duration::from_millis(state.server.idle_timeout_ms);
    let observed = ObservedBody::new(rbody, idle, is_sse.then_some(dialect), log, started);
    Ok(Response::from_parts(rparts, observed.boxed_unsync()))
}

/// What the passes produced for one buffered request.
struct Passed {
    /// The bytes sent upstream.
    sent: Bytes,
    /// The reasoning route shaping used (for reading a 4xx).
    reasoning_route: Option<ResolvedRoute>,
}

/// A buffered request, kept for the one retry.
struct Replay {
    /// The client's body as received (still encoded).
    original: Bytes,
    /// The client's headers after hygiene, before the passes touched them.
    client_headers: http::HeaderMap,
    dialect: Dialect,
    passed: Passed,
}

/// Longest 4xx body read to look for an unknown-field verdict, bytes.
const ERROR_BODY_LIMIT: u64 = 1024 * 1024;

/// Send one request upstream. The response headers must arrive within
/// `first_byte_timeout_ms` of the request body having been sent: at once for a buffered body,
/// or from `upload_done` for a body streamed from the client.
async fn send_upstream(
    state: &AppState,
    matched: &Matched<'_>,
    method: Method,
    headers: http::HeaderMap,
    body: upstream::UpstreamBody,
    upload_done: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Result<Response<upstream::UpstreamBody>, ProxyError> {
    let mut up = Request::new(body);
    *up.method_mut() = method;
    *up.uri_mut() = matched.upstream_uri.clone();
    *up.version_mut() = Version::HTTP_11;
    *up.headers_mut() = headers;
    let first_byte = Duration::from_millis(state.server.first_byte_timeout_ms);
    let deadline = async move {
        if let Some(done) = upload_done {
            // A dropped sender (the body failed) starts the timer too.
            let _ = done.await;
        }
        tokio::time::sleep(first_byte).await;
    };
    let outcome = tokio::select! {
        r = state.client.request(up) => Ok(r),
        () = deadline => Err(()),
    };
    match outcome {
        Err(()) => Err(ProxyError::FirstByteTimeout {
            upstream: upstream_label(matched),
            ms: state.server.first_byte_timeout_ms,
        }),
        Ok(Err(e)) => Err(classify_client_error(
            &e,
            upstream_label(matched),
            state.server.connect_timeout_ms,
        )),
        Ok(Ok(resp)) => Ok(resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed_unsync())),
    }
}

/// What a 4xx taught, deciding the one retry.
enum Lesson {
    /// Fields the upstream named as unknown (new for this host and model).
    UnknownFields(String),
    /// An image the upstream rejected, to repair / shrink / replace.
    Image(ImageRejectionKind),
}

/// A 4xx arrived for a buffered request. Two cases earn the one retry
/// (`docs/architecture.md#the-one-retry`):
/// it names a field this request sent as unknown, new for this (host, model) — the verdict
/// is stored first; or it rejects an image the passes can repair, shrink or replace (a model
/// that sees no images is remembered the same way). The request is rebuilt from the client's
/// original body and sent once more when that changes the bytes; otherwise the 4xx goes to
/// the client unchanged.
async fn retry_once(
    state: &AppState,
    matched: &Matched<'_>,
    method: &Method,
    replay: Replay,
    resp: Response<upstream::UpstreamBody>,
    log: &mut RequestLog,
) -> Result<Response<upstream::UpstreamBody>, ProxyError> {
    let (rparts, rbody) = resp.into_parts();
    let status = rparts.status.as_u16();
    let idle = Duration::from_millis(state.server.idle_timeout_ms);
    let read = tokio::time::timeout(idle, body::read_prefix(rbody, ERROR_BODY_LIMIT)).await;
    let (head, rest) = match read {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            return Err(ProxyError::UpstreamBroken {
                upstream: upstream_label(matched),
                detail: format!("{status} response body broke: {e}"),
            })
        }
        Err(_) => {
            return Err(ProxyError::UpstreamBroken {
                upstream: upstream_label(matched),
                detail: format!(
                    "{status} response body stalled for {} ms",
                    state.server.idle_timeout_ms
                ),
            })
        }
    };
    let pass_through = |head: Bytes, rest: Option<upstream::UpstreamBody>| {
        let body = match rest {
            Some(rest) => body::prepend(vec![head], rest),
            None => body::full(head),
        };
        Response::from_parts(rparts, body)
    };
    let (Some(route), Some(model), None) = (
        replay.passed.reasoning_route.clone(),
        log.model
            .clone()
            .or_else(|| model_from_path(&matched.rest).map(str::to_owned)),
        rest.as_ref(),
    ) else {
        return Ok(pass_through(head, rest));
    };
    let sent = replay.passed.sent.clone();
    let droppable = state.reasoning.droppable_params.clone();
    let error_body = head.clone();
    let detect_route = route.clone();
    let found = tokio::task::spawn_blocking(move || {
        match reasoning::detect(status, &error_body, &sent, &detect_route, &droppable) {
            Some(d) => Some(Ok(d)),
            None => classify_image_rejection(status, &error_body).map(Err),
        }
    })
    .await
    .ok()
    .flatten();
    let lesson = match found {
        None => return Ok(pass_through(head, rest)),
        Some(Ok(detected)) => {
            let learned = state.store.verdicts().learn(
                &route.host,
                &model,
                &detected.fields,
                &detected.wording,
            );
            if learned.is_empty() {
                tracing::info!(target: "cachekeeper::retry", route = %log.route, host = %route.host, model = %model, "unknown-field rejection teaches nothing new; not retrying");
                return Ok(pass_through(head, rest));
            }
            let fields = learned.joined();
            tracing::info!(
                target: "cachekeeper::retry",
                route = %log.route,
                host = %route.host,
                model = %model,
                status,
                fields = %fields,
                wording = %detected.wording,
                "upstream named fields as unknown; verdict stored, retrying once without them"
            );
            Lesson::UnknownFields(fields)
        }
        Some(Err(rejection)) => {
            if rejection.kind == ImageRejectionKind::ModelCannotSeeImages {
                let verdict = FieldSet::from([Field::NoImageInput]);
                state
                    .store
                    .verdicts()
                    .learn(&route.host, &model, &verdict, rejection.wording);
            }
            tracing::info!(
                target: "cachekeeper::retry",
                route = %log.route,
                host = %route.host,
                model = %model,
                status,
                kind = ?rejection.kind,
                wording = %rejection.wording,
                "upstream rejected an image; rebuilding and retrying once"
            );
            Lesson::Image(rejection.kind)
        }
    };
    let recovery = match &lesson {
        Lesson::Image(kind) => Some(*kind),
        Lesson::UnknownFields(_) => None,
    };
    let mut headers = replay.client_headers;
    let passed = run_passes(
        state,
        matched,
        replay.dialect,
        &mut headers,
        replay.original,
        recovery,
        log,
    )
    .await;
    if passed.sent == replay.passed.sent {
        return Ok(pass_through(head, rest));
    }
    log.retried_without = Some(match lesson {
        Lesson::UnknownFields(fields) => fields,
        Lesson::Image(kind) => format!("image:{kind:?}"),
    });
    log.bytes_out = passed.sent.len() as u64;
    send_upstream(
        state,
        matched,
        method.clone(),
        headers,
        body::full(passed.sent),
        None,
    )
    .await
}

/// Decode, run the passes and decide which bytes go upstream; sets `content-length` and the
/// passes' headers on `headers`. Fails open: any failure sends the original bytes with their
/// original headers.
async fn run_passes(
    state: &AppState,
    matched: &Matched<'_>,
    dialect: Dialect,
    headers: &mut http::HeaderMap,
    original: Bytes,
    recovery: Option<ImageRejectionKind>,
    log: &mut RequestLog,
) -> Passed {
    let sent = run_passes_inner(state, matched, dialect, headers, original, recovery, log).await;
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(sent.sent.len()));
    sent
}

async fn run_passes_inner(
    state: &AppState,
    matched: &Matched<'_>,
    dialect: Dialect,
    headers: &mut http::HeaderMap,
    original: Bytes,
    recovery: Option<ImageRejectionKind>,
    log: &mut RequestLog,
) -> Passed {
    let unchanged = |sent: Bytes| Passed {
        sent,
        reasoning_route: None,
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let anthropic_beta = headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let route = matched.route.clone();
    let dry_run = route.dry_run;
    let upstream_path = format!("{}{}", route.base_path, matched.rest);
    let path_model = model_from_path(&matched.rest).map(str::to_owned);
    let store = state.store.clone();
    let droppable = state.reasoning.droppable_params.clone();
    let limit = state.server.max_rewrite_bytes;
    let input = original.clone();
    let transcodes = Arc::clone(&state.transcodes);
    let credential_scope = crate::credential::scope(headers, matched.upstream_uri.query());
    // Closed only if the state is torn down; then run unbounded rather than fail.
    let _permit = state.passes.acquire().await.ok();
    let joined = tokio::task::spawn_blocking(move || {
        let decoded = body::decode(encoding.as_deref(), &input, limit)?;
        let host = route.authority.host().to_owned();
        let ctx = RewriteContext {
            dialect,
            images: &route.images,
            transcodes: Some(&transcodes),
            credential_scope: &credential_scope,
            image_recovery: recovery,
            reasoning: Some(ReasoningInputs {
                provider: route.provider.as_deref(),
                upstream_host: &host,
                upstream_path: &upstream_path,
                carriers_override: route.carriers.as_deref(),
                droppable_params: &droppable,
                anthropic_beta: anthropic_beta.as_deref(),
                path_model: path_model.as_deref(),
                verdicts: &store,
            }),
        };
        let first = rewrite_request(&ctx, &decoded);
        // A model learned to see no images gets them replaced up front.
        let knows_no_images = |o: &RewriteOutcome| {
            o.reasoning_route
                .as_ref()
                .zip(o.report.model.as_deref())
                .is_some_and(|(r, m)| store.omit(&r.host, m).contains(&Field::NoImageInput))
        };
        match first {
            Ok(o) if recovery.is_none() && o.report.images_seen > 0 && knows_no_images(&o) => {
                let ctx = RewriteContext {
                    image_recovery: Some(ImageRejectionKind::ModelCannotSeeImages),
                    ..ctx
                };
                Some(rewrite_request(&ctx, &decoded))
            }
            other => Some(other),
        }
    })
    .await;
    let route_name = &matched.route.name;
    let outcome = match joined {
        Ok(Some(Ok(outcome))) => outcome,
        Ok(Some(Err(e))) => {
            log.body = "unparsed";
            tracing::info!(target: "cachekeeper::rewrite", route = %route_name, reason = %e, "body left unchanged");
            return unchanged(original);
        }
        Ok(None) => {
            log.body = "unparsed";
            tracing::info!(target: "cachekeeper::rewrite", route = %route_name, "body could not be decoded; left unchanged");
            return unchanged(original);
        }
        Err(e) => {
            log.body = "pass_failed";
            tracing::warn!(target: "cachekeeper::rewrite", route = %route_name, error = %e, "a rewrite pass failed; forwarding the original request");
            return unchanged(original);
        }
    };
    apply_report(log, &outcome.report);
    for reason in &outcome.report.reasons {
        tracing::info!(target: "cachekeeper::rewrite", route = %route_name, dry_run, reason = %reason, "rewrite");
    }
    let reasoning_route = outcome.reasoning_route;
    let sent = match outcome.body {
        None => {
            log.body = "unchanged";
            original
        }
        Some(_) if dry_run => {
            log.body = "dry_run";
            original
        }
        Some(new) => {
            log.body = "rewritten";
            // The passes worked on the decoded body; send it decoded.
            headers.remove(header::CONTENT_ENCODING);
            Bytes::from(new)
        }
    };
    if !dry_run {
        for (name, value) in &outcome.set_headers {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(n, v);
            }
        }
    }
    Passed {
        sent,
        reasoning_route,
    }
}

fn apply_report(log: &mut RequestLog, report: &RewriteReport) {
    log.images_repaired = report.images_repaired;
    log.images_downscaled = report.images_downscaled;
    log.images_repeat_capped = report.images_repeat_capped;
    log.images_replaced = report.images_replaced;
    let c = &report.shape;
    log.reasoning_edits = c.carriers_dropped
        + c.carriers_filled
        + c.pads
        + c.thinking_stripped
        + c.cache_control_moved
        + c.params_dropped
        + c.flags_added
        + usize::from(c.binding_set);
    log.model = report.model.clone();
    log.images_seen = report.images_seen;
    log.images_retired = report.images_retired;
    log.carriers_retired = report.carriers_retired;
}

/// The `x-cachekeeper-rewrites` value: what the passes did, as counts.
fn rewrites_summary(log: &RequestLog, dry_run: bool) -> String {
    let mut s = format!(
        "images_seen={}; images_repaired={}; images_downscaled={}; images_repeat_capped={}; \
         images_replaced={}; images_retired={}; carriers_retired={}; reasoning_edits={}; body={}",
        log.images_seen,
        log.images_repaired,
        log.images_downscaled,
        log.images_repeat_capped,
        log.images_replaced,
        log.images_retired,
        log.carriers_retired,
        log.reasoning_edits,
        log.body
    );
    if dry_run {
        s.push_str("; dry_run=1");
    }
    s
}

fn upstream_label(m: &Matched<'_>) -> String {
    format!("{}://{}", m.route.scheme, m.route.authority)
}

fn classify_client_error(
    e: &hyper_util::client::legacy::Error,
    upstream: String,
    connect_timeout_ms: u64,
) -> ProxyError {
    let detail = error_chain(e);
    if e.is_connect() {
        if has_timed_out(e) {
            return ProxyError::ConnectTimeout {
                upstream,
                ms: connect_timeout_ms,
            };
        }
        return ProxyError::UpstreamConnect { upstream, detail };
    }
    ProxyError::UpstreamBroken { upstream, detail }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn has_timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        cur = c.source();
    }
    false
}

fn proxy_error(
    err: ProxyError,
    dialect: Option<Dialect>,
    mut log: RequestLog,
    started: Instant,
) -> Response<ResponseBody> {
    log.status = err.status().as_u16();
    log.error = Some(err.label());
    tracing::warn!(
        target: "cachekeeper::server",
        route = %log.route,
        error = %err,
        kind = err.label(),
        retryable = err.retryable(),
        "request failed in the proxy"
    );
    log.emit(Outcome::ProxyError, ms_since(started));
    let mut resp = err.response::<Bytes>(dialect).map(full_body);
    if let Ok(v) = HeaderValue::from_str(&format!("proxy_error={}", err.label())) {
        resp.headers_mut().insert(REWRITES_HEADER, v);
    }
    resp
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    // Compare digests so neither length nor content leaks through timing.
    Sha256::digest(a) == Sha256::digest(b)
}

fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Tunnel a WebSocket (or any HTTP/1.1 upgrade): forward the handshake, and on `101` copy
/// bytes both ways until either side closes.
async fn tunnel_upgrade(
    state: &AppState,
    matched: Matched<'_>,
    mut req: Request<Incoming>,
    mut log: RequestLog,
    started: Instant,
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
    *up.uri_mut() = matched.upstream_uri.clone();
    *up.version_mut() = Version::HTTP_11;
    *up.headers_mut() = headers;
    let upstream_name = upstream_label(&matched);
    let resp = match state.client.request(up).await {
        Ok(r) => r,
        Err(e) => {
            let err = classify_client_error(&e, upstream_name, state.server.connect_timeout_ms);
            return proxy_error(err, None, log, started);
        }
    };
    log.status = resp.status().as_u16();
    log.ttfb_ms = Some(ms_since(started));
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (mut rparts, rbody) = resp.into_parts();
        upstream::strip_hop_by_hop(&mut rparts.headers, false);
        let observed = ObservedBody::new(
            rbody.map_err(|e| Box::new(e) as BoxError).boxed_unsync(),
            Duration::from_millis(state.server.idle_timeout_ms),
            None,
            log,
            started,
        );
        return Response::from_parts(rparts, observed.boxed_unsync());
    }
    let mut resp = resp;
    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    let route = log.route.clone();
    tokio::spawn(async move {
        match tokio::try_join!(client_upgrade, upstream_upgrade) {
            Ok((client_io, upstream_io)) => {
                let mut c = TokioIo::new(client_io);
                let mut u = TokioIo::new(upstream_io);
                if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                    tracing::debug!(target: "cachekeeper::server", route = %route, error = %e, "upgraded tunnel closed");
                }
            }
            Err(e) => {
                tracing::warn!(target: "cachekeeper::server", route = %route, error = %e, "upgrade failed");
            }
        }
    });
    log.emit(Outcome::Upgraded, ms_since(started));
    let (rparts, _) = resp.into_parts();
    Response::from_parts(
        rparts,
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync(),
    )
}
