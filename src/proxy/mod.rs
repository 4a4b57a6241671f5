//! The proxy: one request's life from the listener to the log line, over the wire layer
//! ([`crate::wire`]) and the request passes ([`crate::rewrite`]).
//!
//! - [`ctx`]: the one per-request context.
//! - [`phases`]: the phases of a request, in their documented order.
//! - [`reserved`]: the client token and the listener's reserved paths, before any route.
//! - [`passes`]: running the request passes in their lane (inline, text or image pool),
//!   failing open.
//! - [`retry`]: the one retry after a 4xx the proxy can learn from.
//! - [`observe`]: the response observer that ends every request with its log line.
//! - [`errors`]: the proxy's own errors, in each dialect's shape.
//! - [`aws`]: which requests are signed again with the proxy's AWS credentials (Bedrock).
//! - [`outbound`]: what is done to a request's credential before it goes (and before the
//!   retry): SigV4 signed again, or the route's own token added.

mod aws;
mod ctx;
pub(crate) mod errors;
mod observe;
mod outbound;
mod passes;
mod phases;
mod record;
mod reload;
mod reserved;
mod retry;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use tokio::net::TcpListener;

use crate::accounting::pricing::Pricing;
use crate::accounting::session::SessionTracker;
use crate::config::{Loaded, ReasoningConfig, ServerConfig};
use crate::images::cache::TranscodeCache;
use crate::metrics::Metrics;
use crate::route::RouteTable;
use crate::state::{Store, StoreOptions};
use crate::wire::body::BufferBudget;
use crate::wire::stream::Cutoff;
use crate::wire::upstream::{self, HttpClient};

/// Response header that tells the client what the passes did (a [`HeaderName`] constant:
/// inserting by `&str` parses and lowercases the name on every response).
pub(crate) const REWRITES_HEADER: HeaderName = HeaderName::from_static("x-cachekeeper-rewrites");
/// Request header carrying the client token when `[server] client_token` is set.
pub(crate) const TOKEN_HEADER: &str = "x-cachekeeper-token";
/// Response header on every response: the request overhead (from receiving the request to
/// handing it to the upstream client; for the proxy's own answers, to the answer), in ms
/// with 3 decimals ([`overhead_value`]).
pub(crate) const OVERHEAD_HEADER: HeaderName = HeaderName::from_static("x-cachekeeper-overhead-ms");

/// The [`OVERHEAD_HEADER`] value of a duration: milliseconds with 3 decimals (`0.412`).
pub(crate) fn overhead_value(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

pub use reload::{ReloadError, Reloaded, Reloader};

/// Shared, read-only state of a running proxy: one snapshot per configuration. A `SIGHUP`
/// reload ([`Reloader`]) builds a new snapshot from the new file, sharing every field that
/// holds what the proxy learned or is doing (store, semaphores, transcodes, metrics, sessions,
/// recorder — the `Arc` fields); a request keeps the snapshot it started with to its end.
pub(crate) struct AppState {
    pub routes: RouteTable,
    pub client: HttpClient,
    pub server: ServerConfig,
    pub reasoning: ReasoningConfig,
    pub store: Store,
    /// The lanes the passes run in ([`passes::Pools`]): a small body without image data runs
    /// inline; larger ones and image work take bounded permits of separate pools, so concurrent
    /// image decodes cannot grow memory without limit nor make text requests wait. Shared
    /// (an `Arc`) so a config reload keeps the same bounds.
    pub passes: Arc<passes::Pools>,
    /// Transcoded images, shared by all requests (bounded by `[images] transcode_cache_bytes`).
    pub transcodes: Arc<TranscodeCache>,
    /// The metrics every request is counted in (`GET /metrics`).
    pub metrics: Arc<Metrics>,
    /// Sessions, turns and prefix collapses (cache accounting).
    pub sessions: Arc<SessionTracker>,
    /// `[[pricing]]`, for the dashboard.
    pub pricing: Arc<Pricing>,
    /// `serve --record FILE`: where buffered generation requests are written ([`record`]).
    pub record: Option<Arc<record::Recorder>>,
    /// The global budget for buffered request bodies (`[server] max_buffered_bytes`, sized
    /// at start-up), shared by every snapshot.
    pub buffers: Arc<BufferBudget>,
    /// Ends the responses still open when the shutdown grace is nearly over (every
    /// snapshot's responses: shared).
    pub cutoff: Cutoff,
    /// The SigV4 signer of each route whose provider signs (Amazon Bedrock), from the
    /// proxy's own AWS credentials ([`aws::Signers`]).
    pub signers: Arc<aws::Signers>,
    /// The Google access token of each route with `[routes.google]` (Vertex AI), kept fresh
    /// by a background task ([`crate::google_token::Tokens`]).
    pub tokens: Arc<crate::google_token::Tokens>,
}

impl AppState {
    /// The snapshot of `loaded`'s reloadable settings (routes, `[server]` timeouts and limits,
    /// `[reasoning]`, `[[pricing]]`, the upstream client) over `shared`'s long-lived parts.
    ///
    /// `previous`: the snapshot this one replaces (a reload), whose SigV4 signers it keeps for
    /// the routes whose `[routes.aws]` is unchanged.
    ///
    /// Errors: a route is unusable, or `ca_file` is unreadable.
    fn build(loaded: &Loaded, shared: Shared, previous: Option<&Self>) -> Result<Self, StartError> {
        let cfg = &loaded.config;
        let routes = RouteTable::new(cfg).map_err(StartError::Routes)?;
        let signers = Arc::new(aws::Signers::new(
            &routes,
            previous.map(|p| p.signers.as_ref()),
        ));
        let tokens = Arc::new(crate::google_token::Tokens::new(
            &routes,
            &loaded.base_dir,
            previous.map(|p| p.tokens.as_ref()),
        ));
        let ca = cfg.server.ca_file.as_ref().map(|p| loaded.base_dir.join(p));
        let client = upstream::build_client(
            Duration::from_millis(cfg.server.connect_timeout_ms),
            ca.as_deref(),
        )?;
        Ok(Self {
            routes,
            client,
            server: cfg.server.clone(),
            reasoning: cfg.reasoning.clone(),
            pricing: Arc::new(Pricing::new(&cfg.pricing)),
            store: shared.store,
            passes: shared.passes,
            transcodes: shared.transcodes,
            metrics: shared.metrics,
            sessions: shared.sessions,
            record: shared.record,
            buffers: shared.buffers,
            cutoff: shared.cutoff,
            signers,
            tokens,
        })
    }

    /// This snapshot's settings over `shared` (the `--record` file set after start-up).
    fn with_shared(&self, shared: Shared) -> Self {
        Self {
            routes: self.routes.clone(),
            client: self.client.clone(),
            server: self.server.clone(),
            reasoning: self.reasoning.clone(),
            pricing: Arc::clone(&self.pricing),
            store: shared.store,
            passes: shared.passes,
            transcodes: shared.transcodes,
            metrics: shared.metrics,
            sessions: shared.sessions,
            record: shared.record,
            buffers: shared.buffers,
            cutoff: shared.cutoff,
            signers: Arc::clone(&self.signers),
            tokens: Arc::clone(&self.tokens),
        }
    }

    /// The long-lived parts a reload keeps.
    fn shared(&self) -> Shared {
        Shared {
            store: self.store.clone(),
            passes: Arc::clone(&self.passes),
            transcodes: Arc::clone(&self.transcodes),
            metrics: Arc::clone(&self.metrics),
            sessions: Arc::clone(&self.sessions),
            record: self.record.clone(),
            buffers: Arc::clone(&self.buffers),
            cutoff: self.cutoff.clone(),
        }
    }
}

/// What outlives a reload: what the proxy learned (store, sessions, transcodes, metrics) and
/// what bounds it (the passes' lanes), and the `--record` file.
struct Shared {
    store: Store,
    passes: Arc<passes::Pools>,
    transcodes: Arc<TranscodeCache>,
    metrics: Arc<Metrics>,
    sessions: Arc<SessionTracker>,
    record: Option<Arc<record::Recorder>>,
    buffers: Arc<BufferBudget>,
    cutoff: Cutoff,
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
    /// The listener is beyond loopback without a client token while a route lends the
    /// proxy's cloud credentials ([`crate::config::Config::lending_refusal`]).
    #[error("{0}")]
    Lending(String),
    #[error("cannot open the record file {path}: {source}")]
    Record {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A bound, not yet running proxy.
pub struct Server {
    listener: TcpListener,
    live: Arc<arc_swap::ArcSwap<AppState>>,
    reloader: Reloader,
}

impl Server {
    /// Bind the listener (`listen` overrides `[server] listen`; port 0 picks a free port)
    /// and build the route table, upstream client and state store.
    ///
    /// Errors: the address cannot be bound, a route is unusable, or `ca_file` is unreadable.
    pub async fn bind(loaded: &Loaded, listen: Option<SocketAddr>) -> Result<Self, StartError> {
        let cfg = &loaded.config;
        let store = Store::open(&StoreOptions::from_config(&cfg.state, &loaded.base_dir));
        let transcodes = Arc::new(if cfg.state.share_transcodes {
            TranscodeCache::shared(cfg.images.transcode_cache_bytes, store.clone())
        } else {
            TranscodeCache::new(cfg.images.transcode_cache_bytes)
        });
        store.set_write_wait(cfg.state.write_wait_ms());
        let buffers = Arc::new(BufferBudget::new(cfg.server.max_buffered_bytes));
        let shared = Shared {
            passes: Arc::new(passes::Pools::new(cpus(), Arc::clone(&buffers))),
            metrics: Arc::new(
                Metrics::new()
                    .with_state_write_errors(store.write_errors())
                    .with_state_writes_dropped(store.writes_dropped())
                    .with_log_lines_dropped(crate::telemetry::lines_dropped())
                    .with_shared_transcodes(transcodes.shared_counts())
                    .with_state_write_waits(store.write_waits()),
            ),
            transcodes,
            sessions: Arc::new(SessionTracker::new(store.clone())),
            record: None,
            buffers,
            cutoff: Cutoff::new(),
            store,
        };
        let state = AppState::build(loaded, shared, None)?;
        // The proxy's AWS credentials are read now, before the first request.
        state.signers.ready().await;
        // And each route's first Google access token (bounded wait).
        state.tokens.ready().await;
        let addr = listen.unwrap_or(cfg.server.listen);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        if let Some(refusal) = cfg.lending_refusal(bound) {
            return Err(StartError::Lending(refusal));
        }
        if let Some(w) = crate::reserved::exposure_warning(bound, cfg.server.client_token.is_some())
        {
            tracing::warn!(target: "cachekeeper::server", "{w}");
        }
        let live = Arc::new(arc_swap::ArcSwap::from_pointee(state));
        let reloader = Reloader::new(Arc::clone(&live), loaded, listen.is_some(), bound);
        Ok(Self {
            listener,
            live,
            reloader,
        })
    }

    /// Also write every buffered generation request a route receives to `path`, one
    /// `cachekeeper replay` line each (`serve --record FILE`; the file is created mode 0600
    /// and appended to; `docs/replay.md`). A reload keeps recording to the same file.
    ///
    /// Errors: the file cannot be opened.
    pub fn record_to(self, path: &std::path::Path) -> Result<Self, StartError> {
        let rec = record::Recorder::open(path).map_err(|source| StartError::Record {
            path: path.display().to_string(),
            source,
        })?;
        self.reloader.set_record(Arc::new(rec));
        Ok(self)
    }

    /// The handle that reloads this server's configuration (`SIGHUP`); usable while it runs.
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// The state store the server writes to (the fault tests inject faults into it:
    /// [`Store::inject_fault`]).
    #[doc(hidden)]
    pub fn store(&self) -> Store {
        self.live.load().store.clone()
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` completes, then stop accepting, let in-flight requests
    /// (streams included) finish for up to `shutdown_grace_ms` (as it was at start-up; the
    /// responses still open near its end are ended, an event stream after its last complete
    /// event: [`crate::wire::listener::serve`]), and flush the state store's queued writes
    /// ([`Store::flush`]). Each request runs on the
    /// configuration snapshot current when it arrived ([`Reloader`]).
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let live = self.live;
        let grace = Duration::from_millis(live.load().server.shutdown_grace_ms);
        let serving = Arc::clone(&live);
        let handler = move |req| phases::handle(serving.load_full(), req);
        let cutoff = live.load().cutoff.clone();
        crate::wire::listener::serve(self.listener, handler, shutdown, grace, cutoff).await;
        // The writes still queued (the last turns' carriers) reach the disk before the
        // process exits; the flush waits on the writer thread, so off the runtime.
        let last = live.load_full();
        let _ = tokio::task::spawn_blocking(move || {
            last.store.flush();
            if let Some(rec) = &last.record {
                rec.flush();
            }
        })
        .await;
    }
}

/// The CPUs the passes' lanes are sized by ([`passes::Pools::new`]): the available
/// parallelism, 1 when unknown.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
