//! The proxy: one request's life from the listener to the log line, over the wire layer
//! ([`crate::wire`]) and the request passes ([`crate::rewrite`]).
//!
//! - [`ctx`]: the one per-request context.
//! - [`phases`]: the phases of a request, in their documented order.
//! - [`reserved`]: the client token and the listener's reserved paths, before any route.
//! - [`passes`]: running the request passes off the async threads, failing open.
//! - [`retry`]: the one retry after a 4xx the proxy can learn from.
//! - [`observe`]: the response observer that ends every request with its log line.
//! - [`errors`]: the proxy's own errors, in each dialect's shape.

mod ctx;
pub(crate) mod errors;
mod observe;
mod passes;
mod phases;
mod record;
mod reserved;
mod retry;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::accounting::pricing::Pricing;
use crate::accounting::session::SessionTracker;
use crate::config::{Loaded, ReasoningConfig, ServerConfig};
use crate::images::cache::TranscodeCache;
use crate::metrics::Metrics;
use crate::route::RouteTable;
use crate::state::{Store, StoreOptions};
use crate::wire::upstream::{self, HttpClient};

/// Response header that tells the client what the passes did.
pub(crate) const REWRITES_HEADER: &str = "x-cachekeeper-rewrites";
/// Request header carrying the client token when `[server] client_token` is set.
pub(crate) const TOKEN_HEADER: &str = "x-cachekeeper-token";
/// Response header on every response: the request overhead (from receiving the request to
/// handing it to the upstream client; for the proxy's own answers, to the answer), in ms
/// with 3 decimals ([`overhead_value`]).
pub(crate) const OVERHEAD_HEADER: &str = "x-cachekeeper-overhead-ms";

/// The [`OVERHEAD_HEADER`] value of a duration: milliseconds with 3 decimals (`0.412`).
pub(crate) fn overhead_value(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// Shared, read-only state of a running proxy.
pub(crate) struct AppState {
    pub routes: RouteTable,
    pub client: HttpClient,
    pub server: ServerConfig,
    pub reasoning: ReasoningConfig,
    pub store: Store,
    /// Bounds how many requests run the passes at once, so concurrent image decodes cannot
    /// grow memory without limit (each pass run is CPU-bound anyway).
    pub passes: tokio::sync::Semaphore,
    /// Transcoded images, shared by all requests (bounded by `[images] transcode_cache_bytes`).
    pub transcodes: Arc<TranscodeCache>,
    /// The metrics every request is counted in (`GET /metrics`).
    pub metrics: Arc<Metrics>,
    /// Sessions, turns and prefix collapses (cache accounting).
    pub sessions: Arc<SessionTracker>,
    /// `[[pricing]]`, for the dashboard.
    pub pricing: Arc<Pricing>,
    /// `serve --record FILE`: where buffered generation requests are written ([`record`]).
    pub record: Option<record::Recorder>,
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
    state: Arc<AppState>,
}

impl Server {
    /// Bind the listener (`listen` overrides `[server] listen`; port 0 picks a free port)
    /// and build the route table, upstream client and state store.
    ///
    /// Errors: the address cannot be bound, a route is unusable, or `ca_file` is unreadable.
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
                passes: tokio::sync::Semaphore::new(concurrent_passes()),
                transcodes: Arc::new(TranscodeCache::new(cfg.images.transcode_cache_bytes)),
                metrics: Arc::new(Metrics::new()),
                sessions: Arc::new(SessionTracker::new(store.clone())),
                pricing: Arc::new(Pricing::new(&cfg.pricing)),
                record: None,
                store,
            }),
        })
    }

    /// Also write every buffered generation request a route receives to `path`, one
    /// `cachekeeper replay` line each (`serve --record FILE`; the file is created mode 0600
    /// and appended to; `docs/replay.md`).
    ///
    /// Errors: the file cannot be opened.
    pub fn record_to(mut self, path: &std::path::Path) -> Result<Self, StartError> {
        let rec = record::Recorder::open(path).map_err(|source| StartError::Record {
            path: path.display().to_string(),
            source,
        })?;
        if let Some(state) = Arc::get_mut(&mut self.state) {
            state.record = Some(rec);
        }
        Ok(self)
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` completes, then stop accepting, let in-flight requests
    /// (streams included) finish for up to `shutdown_grace_ms`, and flush the state store's
    /// queued writes ([`Store::flush`]).
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let grace = Duration::from_millis(self.state.server.shutdown_grace_ms);
        let state = self.state;
        let store = state.store.clone();
        let kept = Arc::clone(&state);
        let handler = move |req| phases::handle(Arc::clone(&state), req);
        crate::wire::listener::serve(self.listener, handler, shutdown, grace).await;
        // The writes still queued (the last turns' carriers) reach the disk before the
        // process exits; the flush waits on the writer thread, so off the runtime.
        let _ = tokio::task::spawn_blocking(move || {
            store.flush();
            if let Some(rec) = &kept.record {
                rec.flush();
            }
        })
        .await;
    }
}

/// Requests that may run the passes at once: twice the CPUs (at least 2).
fn concurrent_passes() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2)
}
