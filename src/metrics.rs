//! The proxy's metrics, served at `GET /metrics` in the Prometheus text format (version
//! 0.0.4), through the Prometheus project's Rust client (`prometheus-client`). This module
//! owns every metric name; `docs/metrics.md` lists them for users.
//!
//! Each request is recorded once, when its log line is written ([`Metrics::record`], called
//! from the request context's `emit`), from a [`RequestSample`] of what the line says.
//!
//! Labels are bounded: route names come from the config; dialect, status class, outcome,
//! error kind, pass, retry reason and collapse cause from fixed lists in the code; model
//! names are capped to the first [`MAX_MODEL_LABELS`] distinct models seen (the rest are
//! [`OTHER_MODEL`]). No label ever holds a session id, a credential, a path or a query.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::dialect::usage::Usage;
use crate::rewrite::RewriteReport;
use crate::telemetry::Outcome;

/// Distinct model names that get a label of their own: the first this many seen since the
/// proxy started; later ones are counted under [`OTHER_MODEL`]. Bounds the series per route
/// whatever clients put in `model`.
pub(crate) const MAX_MODEL_LABELS: usize = 20;
/// A model name longer than this (bytes) is counted under [`OTHER_MODEL`]: no real model id
/// comes close, and a label is kept in memory for the proxy's life.
pub(crate) const MAX_MODEL_LABEL_BYTES: usize = 128;
/// The model label of every model past the cap.
pub(crate) const OTHER_MODEL: &str = "other";
/// The model label of a request that named no model.
const NO_MODEL: &str = "-";

/// The overhead histograms' first bucket bound, seconds (50 µs: a request with nothing to
/// rewrite spends tens of µs in the proxy).
pub(crate) const OVERHEAD_BUCKET_START_S: f64 = 50e-6;
/// Each bucket bound doubles the previous one.
const OVERHEAD_BUCKET_FACTOR: f64 = 2.0;
/// Bucket count: 50 µs × 2^18 ≈ 13.1 s, the first bound past 10 s (a large image batch to
/// transcode can take seconds).
const OVERHEAD_BUCKETS: u16 = 19;

/// The content type of [`Metrics::encode`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

type Labels<const N: usize> = [(&'static str, String); N];
type Counters<const N: usize> = Family<Labels<N>, Counter>;
type Histograms = Family<Labels<1>, Histogram, fn() -> Histogram>;

/// What one request's log line says, as the metrics read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestSample<'a> {
    /// The route's name from the config, `-` before routing.
    pub route: &'a str,
    /// The body's wire format (`anthropic`, `openai`, `gemini`), `-` when unknown.
    pub dialect: &'a str,
    /// Status sent to the client (0: none was sent).
    pub status: u16,
    /// How the request ended.
    pub outcome: Outcome,
    /// The proxy's own error, or how the response body broke (a fixed label).
    pub error: Option<&'static str>,
    /// Request body bytes received from the client.
    pub bytes_in: u64,
    /// Request body bytes sent upstream (the last attempt's).
    pub bytes_out: u64,
    /// Response body bytes sent to the client.
    pub response_bytes: u64,
    /// What the passes did (the last run's).
    pub report: &'a RewriteReport,
    /// Why the one retry was sent: `unknown_field`, `image`, `thinking_signatures`, `beta`,
    /// `restore`.
    pub retry: Option<&'static str>,
    /// The request is a generation (not `count_tokens`, not a tunnelled path).
    pub generation: bool,
    /// The model the request named.
    pub model: Option<&'a str>,
    /// The usage the response reported.
    pub usage: &'a Usage,
    /// The turn's prefix collapse: its cause (`Cause::as_str`) and cache-write tokens.
    pub collapse: Option<(&'static str, Option<u64>)>,
    /// From receiving the request to handing it to the upstream client (first attempt).
    pub request_overhead: Option<Duration>,
    /// From the upstream's response head arriving to the response being handed back to the
    /// client.
    pub response_overhead: Option<Duration>,
}

/// Every metric of the proxy, and the registry that encodes them.
pub(crate) struct Metrics {
    /// Also holds `cachekeeper_build_info{version}` (always 1).
    registry: Registry,
    models: ModelLabels,
    /// Each route's series of the families below that have a label set per route, looked up
    /// once per route name ([`RouteSeries`]) rather than built and hashed per request.
    by_route: RwLock<HashMap<String, std::sync::Arc<RouteSeries>>>,
    /// Requests, errors and body bytes.
    traffic: Traffic,
    /// What the passes did.
    passes: Passes,
    /// Token usage, as reported.
    tokens: Tokens,
    /// Prefix collapses.
    collapse: Collapses,
    /// `cachekeeper_buffer_budget_exceeded_total{route}`: request bodies forwarded untouched
    /// because the buffer budget (`[server] max_buffered_bytes`) had no room for them within
    /// `buffer_wait_ms`.
    buffer_budget_exceeded: Counters<1>,
    /// The proxy's own time.
    overhead: Overhead,
}

/// Requests, the proxy's errors and body bytes, per route.
struct Traffic {
    /// `cachekeeper_requests_total{route, dialect, status_class, outcome}`: requests, counted
    /// when their log line is written.
    requests: Counters<4>,
    /// `cachekeeper_proxy_errors_total{route, kind}`: the proxy's own errors and broken
    /// response bodies, by the log line's `error` (`no_route`, `upstream_connect`,
    /// `upstream_broken`, `idle_timeout`, ...).
    errors: Counters<2>,
    /// `cachekeeper_request_received_bytes_total{route}`: request body bytes from clients.
    bytes_received: Counters<1>,
    /// `cachekeeper_request_forwarded_bytes_total{route}`: request body bytes sent upstream.
    bytes_forwarded: Counters<1>,
    /// `cachekeeper_response_bytes_total{route}`: response body bytes sent to clients.
    response_bytes: Counters<1>,
}

/// What the request passes did: rewrites, the retry, restored carriers.
struct Passes {
    /// `cachekeeper_rewrites_total{route, pass}`: each non-zero counter of
    /// `RewriteReport::counters` (the names of the log line and `x-cachekeeper-rewrites`),
    /// added by its value.
    rewrites: Counters<2>,
    /// `cachekeeper_retries_total{route, reason}`: the one retry, by why it was sent.
    retries: Counters<2>,
    /// `cachekeeper_carriers_restored_total{route}`: assistant turns whose reasoning
    /// carriers restore put back (the report's `reasoning_restored`).
    carriers_restored: Counters<1>,
}

/// The token counters of generations, as the providers reported them.
struct Tokens {
    /// `cachekeeper_cache_read_tokens_total{route, model}`: prompt tokens read from the
    /// provider's cache, as reported.
    cache_read_tokens: Counters<2>,
    /// `cachekeeper_cache_write_tokens_total{route, model}`: prompt tokens written to the
    /// cache (all TTLs), as reported.
    cache_write_tokens: Counters<2>,
    /// `cachekeeper_uncached_input_tokens_total{route, model}`: prompt tokens neither read
    /// nor written.
    uncached_input_tokens: Counters<2>,
    /// `cachekeeper_output_tokens_total{route, model}`: generated tokens (reasoning
    /// included).
    output_tokens: Counters<2>,
    /// `cachekeeper_usage_not_reported_total{route}`: generation responses delivered whole
    /// (2xx) that reported no usage number at all.
    usage_not_reported: Counters<1>,
}

/// Prefix collapses and what they cost.
struct Collapses {
    /// `cachekeeper_prefix_collapses_total{route, cause}`: turns whose forwarded
    /// prompt-cache prefix changed before the previous turn's end.
    collapses: Counters<2>,
    /// `cachekeeper_collapse_write_tokens_total{route, cause}`: the cache-write tokens of
    /// those turns, as reported.
    collapse_write_tokens: Counters<2>,
}

/// The proxy's own time on each side of the upstream (the overhead histograms).
struct Overhead {
    /// `cachekeeper_request_overhead_seconds{route}`: from receiving a request to handing
    /// it to the upstream client (first attempt).
    request_overhead: Histograms,
    /// `cachekeeper_response_overhead_seconds{route}`: from the upstream's response head
    /// to handing the response back to the client. Neither histogram holds the model's time.
    response_overhead: Histograms,
}

impl Traffic {
    /// Register the families, at zero, in this order.
    fn register(registry: &mut Registry) -> Self {
        Self {
            requests: counter(
                registry,
                "cachekeeper_requests",
                "Requests, by route, dialect, status class and how they ended",
                None,
            ),
            errors: counter(
                registry,
                "cachekeeper_proxy_errors",
                "The proxy's own errors and broken response bodies, by kind",
                None,
            ),
            bytes_received: counter(
                registry,
                "cachekeeper_request_received",
                "Request body bytes received from clients",
                Some(Unit::Bytes),
            ),
            bytes_forwarded: counter(
                registry,
                "cachekeeper_request_forwarded",
                "Request body bytes sent upstream (after the passes)",
                Some(Unit::Bytes),
            ),
            response_bytes: counter(
                registry,
                "cachekeeper_response",
                "Response body bytes sent to clients",
                Some(Unit::Bytes),
            ),
        }
    }
}

impl Passes {
    /// Register the families, at zero, in this order.
    fn register(registry: &mut Registry) -> Self {
        Self {
            rewrites: counter(
        registry,
        "cachekeeper_rewrites",
        "What the request passes saw and did, by counter of x-cachekeeper-rewrites",
        None,
            ),
            retries: counter(
        registry,
        "cachekeeper_retries",
        "Retries sent, by reason (unknown_field, image, thinking_signatures, restore, beta)",
        None,
            ),
            carriers_restored: counter(
        registry,
        "cachekeeper_carriers_restored",
        "Assistant turns whose reasoning carriers were restored",
        None,
            ),
        }
    }
}

impl Tokens {
    /// Register the families, at zero, in this order.
    fn register(registry: &mut Registry) -> Self {
        let tokens = || Unit::Other("tokens".to_owned());
        Self {
            cache_read_tokens: counter(
                registry,
                "cachekeeper_cache_read",
                "Prompt tokens read from the provider's cache, as reported",
                Some(tokens()),
            ),
            cache_write_tokens: counter(
                registry,
                "cachekeeper_cache_write",
                "Prompt tokens written to the provider's cache (all TTLs), as reported",
                Some(tokens()),
            ),
            uncached_input_tokens: counter(
                registry,
                "cachekeeper_uncached_input",
                "Prompt tokens neither read from nor written to the cache, as reported",
                Some(tokens()),
            ),
            output_tokens: counter(
                registry,
                "cachekeeper_output",
                "Generated tokens (reasoning included), as reported",
                Some(tokens()),
            ),
            usage_not_reported: counter(
                registry,
                "cachekeeper_usage_not_reported",
                "Generation responses delivered whole that reported no usage",
                None,
            ),
        }
    }
}

impl Collapses {
    /// Register the families, at zero, in this order.
    fn register(registry: &mut Registry) -> Self {
        let tokens = || Unit::Other("tokens".to_owned());
        Self {
            collapses: counter(
                registry,
                "cachekeeper_prefix_collapses",
                "Turns whose prompt-cache prefix changed before the previous turn's end, by cause",
                None,
            ),
            collapse_write_tokens: counter(
                registry,
                "cachekeeper_collapse_write",
                "Cache-write tokens of prefix-collapse turns, by cause",
                Some(tokens()),
            ),
        }
    }
}

impl Overhead {
    /// Register the two histograms ([`overhead_histogram`] buckets, by route), at zero.
    fn register(registry: &mut Registry) -> Self {
        let request_overhead: Histograms = Family::new_with_constructor(overhead_histogram);
        registry.register_with_unit(
            "cachekeeper_request_overhead",
            "Time from receiving a request to handing it to the upstream client",
            Unit::Seconds,
            request_overhead.clone(),
        );
        let response_overhead: Histograms = Family::new_with_constructor(overhead_histogram);
        registry.register_with_unit(
            "cachekeeper_response_overhead",
            "Time from the upstream's response head to handing the response to the client",
            Unit::Seconds,
            response_overhead.clone(),
        );
        Self {
            request_overhead,
            response_overhead,
        }
    }
}

/// One route's series: handles into [`Metrics`]' families (the same counters the text
/// encodes), each taken on its first use — as `get_or_create` would create it — so counting
/// a request does not build and hash label sets.
#[derive(Default)]
struct RouteSeries {
    bytes_received: OnceLock<Counter>,
    bytes_forwarded: OnceLock<Counter>,
    response_bytes: OnceLock<Counter>,
    carriers_restored: OnceLock<Counter>,
    usage_not_reported: OnceLock<Counter>,
    request_overhead: OnceLock<Histogram>,
    response_overhead: OnceLock<Histogram>,
    /// `cachekeeper_requests_total` by (dialect, status class, outcome), as met.
    requests: Mutex<Vec<(RequestLabels, Counter)>>,
}

/// The labels of `cachekeeper_requests_total` besides the route: dialect, status class,
/// outcome.
type RequestLabels = (String, &'static str, &'static str);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn overhead_histogram() -> Histogram {
    Histogram::new(exponential_buckets(
        OVERHEAD_BUCKET_START_S,
        OVERHEAD_BUCKET_FACTOR,
        OVERHEAD_BUCKETS,
    ))
}

impl Metrics {
    /// Every metric at zero, registered (the registration order is the text's order).
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        // Always one sample, so a scrape of a proxy that has seen no request is not empty.
        registry.register(
            "cachekeeper_build",
            "The running cachekeeper's version",
            Info::new([("version", env!("CARGO_PKG_VERSION"))]),
        );
        let traffic = Traffic::register(&mut registry);
        let passes = Passes::register(&mut registry);
        let tokens = Tokens::register(&mut registry);
        let collapse = Collapses::register(&mut registry);
        let buffer_budget_exceeded = counter(
            &mut registry,
            "cachekeeper_buffer_budget_exceeded",
            "Request bodies forwarded untouched: no room in max_buffered_bytes within buffer_wait_ms",
            None,
        );
        let overhead = Overhead::register(&mut registry);
        Self {
            registry,
            models: ModelLabels::default(),
            by_route: RwLock::new(HashMap::new()),
            traffic,
            passes,
            tokens,
            collapse,
            buffer_budget_exceeded,
            overhead,
        }
    }

    /// Also serve the state store's failed-write counter as
    /// `cachekeeper_state_write_errors_total` (the store counts; see `crates/state/src/outage.rs`).
    pub(crate) fn with_state_write_errors(mut self, errors: Counter) -> Self {
        self.registry.register(
            "cachekeeper_state_write_errors",
            "State store writes that failed (each try, retries during an outage included)",
            errors,
        );
        self
    }

    /// Also serve the log's counter of lines dropped because stderr's reader did not keep up
    /// as `cachekeeper_log_lines_dropped_total` ([`crate::telemetry::init_with`]).
    pub(crate) fn with_log_lines_dropped(mut self, dropped: Counter) -> Self {
        self.registry.register(
            "cachekeeper_log_lines_dropped",
            "Log lines dropped because the log's reader (stderr) did not keep up; requests never wait for the log",
            dropped,
        );
        self
    }

    /// Also serve the state store's counter of writes held during an outage and dropped for
    /// the bound as `cachekeeper_state_writes_dropped_total` (`crates/state/src/outage.rs`).
    pub(crate) fn with_state_writes_dropped(mut self, dropped: Counter) -> Self {
        self.registry.register(
            "cachekeeper_state_writes_dropped",
            "State store writes held during an outage and dropped for the bound (4,096 keys held, the oldest dropped first)",
            dropped,
        );
        self
    }

    /// Also serve the transcode cache's counts of transcodes shared through the store
    /// (`[state] share_transcodes`) as `cachekeeper_shared_transcodes_total{result}`:
    /// `read` (a miss answered by another instance's transcode, served without decoding),
    /// `written` (computed here, written for the others) (`crates/core/src/images/cache.rs`).
    pub(crate) fn with_shared_transcodes(
        mut self,
        counts: crate::images::cache::SharedCounts,
    ) -> Self {
        self.registry.register(
            "cachekeeper_shared_transcodes",
            "Transcoded images shared through the state store ([state] share_transcodes): read from another instance, or written for the others",
            counts,
        );
        self
    }

    /// Also serve the state store's counters of responses whose last chunk waited for the
    /// turn's writes to reach a shared store (`[state] write_wait_ms`) as
    /// `cachekeeper_state_write_waits_total{result}` (`crates/state/src/settle.rs`).
    pub(crate) fn with_state_write_waits(
        mut self,
        waits: crate::state::settle::WaitCounters,
    ) -> Self {
        self.registry.register(
            "cachekeeper_state_write_waits",
            "Responses whose last chunk waited for the turn's writes to reach Redis ([state] write_wait_ms), by result: written (in time), late (the bound passed; the writes complete later), held (Redis in an outage; no wait)",
            waits,
        );
        self
    }

    /// Count one request body forwarded untouched because the buffer budget had no room for
    /// it within `buffer_wait_ms` (`route`: the route's name).
    pub(crate) fn buffer_budget_exceeded(&self, route: &str) {
        self.buffer_budget_exceeded
            .get_or_create(&[("route", route.to_owned())])
            .inc();
    }

    /// The series handles of `route`, made on its first request.
    fn route_series(&self, route: &str) -> std::sync::Arc<RouteSeries> {
        if let Some(r) = self
            .by_route
            .read()
            .ok()
            .and_then(|m| m.get(route).cloned())
        {
            return r;
        }
        let mut m = match self.by_route.write() {
            Ok(m) => m,
            Err(_) => return std::sync::Arc::default(),
        };
        std::sync::Arc::clone(m.entry(route.to_owned()).or_default())
    }

    /// Count one request (call once, when its log line is written).
    pub(crate) fn record(&self, s: &RequestSample<'_>) {
        let route = || ("route", s.route.to_owned());
        let series = self.route_series(s.route);
        self.count_request(s, &series);
        if let Some(kind) = s.error {
            self.traffic
                .errors
                .get_or_create(&[route(), ("kind", kind.to_owned())])
                .inc();
        }
        let route_counter = |family: &Counters<1>| family.get_or_create(&[route()]).clone();
        inc_by(&series.bytes_received, s.bytes_in, || {
            route_counter(&self.traffic.bytes_received)
        });
        inc_by(&series.bytes_forwarded, s.bytes_out, || {
            route_counter(&self.traffic.bytes_forwarded)
        });
        inc_by(&series.response_bytes, s.response_bytes, || {
            route_counter(&self.traffic.response_bytes)
        });
        for (pass, n) in s.report.counters() {
            add(
                &self.passes.rewrites,
                || [route(), ("pass", pass.to_owned())],
                n as u64,
            );
        }
        if let Some(reason) = s.retry {
            self.passes
                .retries
                .get_or_create(&[route(), ("reason", reason.to_owned())])
                .inc();
        }
        inc_by(
            &series.carriers_restored,
            s.report.restore.turns as u64,
            || route_counter(&self.passes.carriers_restored),
        );
        if s.generation {
            self.record_usage(s, &series);
        }
        if let Some((cause, write_tokens)) = s.collapse {
            let labels = [route(), ("cause", cause.to_owned())];
            self.collapse.collapses.get_or_create(&labels).inc();
            if let Some(n) = write_tokens {
                add(&self.collapse.collapse_write_tokens, || labels, n);
            }
        }
        self.observe_overheads(s, &series);
    }

    /// `cachekeeper_requests_total`: one more for the request's (dialect, status class,
    /// outcome), through `series`' handle when the route has met that label set before.
    fn count_request(&self, s: &RequestSample<'_>, series: &RouteSeries) {
        let class = status_class(s.status);
        let outcome = s.outcome.as_str();
        if let Ok(mut known) = series.requests.lock() {
            match known
                .iter()
                .find(|((d, c, o), _)| d == s.dialect && *c == class && *o == outcome)
            {
                Some((_, counter)) => {
                    counter.inc();
                }
                None => {
                    let counter = self
                        .traffic
                        .requests
                        .get_or_create(&[
                            ("route", s.route.to_owned()),
                            ("dialect", s.dialect.to_owned()),
                            ("status_class", class.to_owned()),
                            ("outcome", outcome.to_owned()),
                        ])
                        .clone();
                    counter.inc();
                    known.push(((s.dialect.to_owned(), class, outcome), counter));
                }
            }
        }
    }

    /// The overhead histograms: each of the request's two times, when measured.
    fn observe_overheads(&self, s: &RequestSample<'_>, series: &RouteSeries) {
        let route = || ("route", s.route.to_owned());
        let route_histogram = |family: &Histograms| family.get_or_create(&[route()]).clone();
        if let Some(d) = s.request_overhead {
            series
                .request_overhead
                .get_or_init(|| route_histogram(&self.overhead.request_overhead))
                .observe(d.as_secs_f64());
        }
        if let Some(d) = s.response_overhead {
            series
                .response_overhead
                .get_or_init(|| route_histogram(&self.overhead.response_overhead))
                .observe(d.as_secs_f64());
        }
    }

    /// The token counters of a generation: each number the provider reported, added; a
    /// response delivered whole with none counts as `usage_not_reported`.
    fn record_usage(&self, s: &RequestSample<'_>, series: &RouteSeries) {
        let u = s.usage;
        if *u == Usage::default() {
            if s.outcome == Outcome::Complete && (200..300).contains(&s.status) {
                series
                    .usage_not_reported
                    .get_or_init(|| {
                        self.tokens
                            .usage_not_reported
                            .get_or_create(&[("route", s.route.to_owned())])
                            .clone()
                    })
                    .inc();
            }
            return;
        }
        let labels = [
            ("route", s.route.to_owned()),
            ("model", self.models.label(s.model)),
        ];
        for (family, n) in [
            (&self.tokens.cache_read_tokens, u.cache_read_tokens),
            (&self.tokens.cache_write_tokens, u.cache_write_tokens),
            (&self.tokens.uncached_input_tokens, u.uncached_input_tokens),
            (&self.tokens.output_tokens, u.output_tokens),
        ] {
            if let Some(n) = n {
                family.get_or_create(&labels).inc_by(n);
            }
        }
    }

    /// Every metric in the Prometheus text format ([`CONTENT_TYPE`]).
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(8 << 10);
        // Writing into a String cannot fail; an encoder error would leave a partial text.
        if prometheus_text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// A counter family, registered (`unit`: appended to the name, before `_total`).
fn counter<const N: usize>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> Counters<N> {
    let family = Family::default();
    match unit {
        Some(u) => registry.register_with_unit(name, help, u, family.clone()),
        None => registry.register(name, help, family.clone()),
    }
    family
}

/// Add `n` to the counter with `labels`; a zero creates no series (and builds no labels).
fn add<const N: usize>(family: &Counters<N>, labels: impl FnOnce() -> Labels<N>, n: u64) {
    if n > 0 {
        family.get_or_create(&labels()).inc_by(n);
    }
}

/// Add `n` to a route's series ([`RouteSeries`]), taking it from `make` on its first
/// non-zero add; a zero creates no series.
fn inc_by(counter: &OnceLock<Counter>, n: u64, make: impl FnOnce() -> Counter) {
    if n > 0 {
        counter.get_or_init(make).inc_by(n);
    }
}

/// `1xx` … `5xx`; `none` when no status was sent (the client left first).
fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "none",
    }
}

/// The models that have a label of their own (the first [`MAX_MODEL_LABELS`] seen).
#[derive(Debug, Default)]
struct ModelLabels {
    seen: Mutex<Vec<String>>,
}

impl ModelLabels {
    /// The label of `model`: itself while under the cap, else [`OTHER_MODEL`]; `-` when no
    /// model was named.
    fn label(&self, model: Option<&str>) -> String {
        let Some(model) = model else {
            return NO_MODEL.to_owned();
        };
        if model.len() > MAX_MODEL_LABEL_BYTES {
            return OTHER_MODEL.to_owned();
        }
        let Ok(mut seen) = self.seen.lock() else {
            return OTHER_MODEL.to_owned();
        };
        if seen.iter().any(|m| m == model) {
            return model.to_owned();
        }
        if seen.len() < MAX_MODEL_LABELS {
            seen.push(model.to_owned());
            return model.to_owned();
        }
        OTHER_MODEL.to_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;

    fn sample<'a>(report: &'a RewriteReport, usage: &'a Usage) -> RequestSample<'a> {
        RequestSample {
            route: "anthropic",
            dialect: "anthropic",
            status: 200,
            outcome: Outcome::Complete,
            error: None,
            bytes_in: 100,
            bytes_out: 90,
            response_bytes: 500,
            report,
            retry: None,
            generation: true,
            model: Some("claude-x"),
            usage,
            collapse: None,
            request_overhead: Some(Duration::from_micros(120)),
            response_overhead: Some(Duration::from_micros(30)),
        }
    }

    /// The value of the sample line `name{labels}` (labels as encoded, in order).
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
    fn a_request_is_counted_with_its_tokens_bytes_and_passes() {
        let m = Metrics::new();
        let mut report = RewriteReport::default();
        report.images.seen = 3;
        report.images.retired = 2;
        report.restore.turns = 4;
        let usage = Usage {
            uncached_input_tokens: Some(10),
            cache_read_tokens: Some(1000),
            cache_write_tokens: None,
            output_tokens: Some(7),
            ..Usage::default()
        };
        m.record(&sample(&report, &usage));
        let mut s = sample(&report, &usage);
        s.retry = Some("image");
        s.collapse = Some(("eviction", Some(1234)));
        m.record(&s);
        let t = m.encode();
        let rc = r#"{route="anthropic",model="claude-x"}"#;
        assert_eq!(
            value(&t, &format!("cachekeeper_cache_read_tokens_total{rc}")),
            Some(2000.0),
            "{t}"
        );
        assert_eq!(
            value(&t, &format!("cachekeeper_uncached_input_tokens_total{rc}")),
            Some(20.0)
        );
        assert_eq!(
            value(&t, &format!("cachekeeper_output_tokens_total{rc}")),
            Some(14.0)
        );
        // Not reported: no series at all, never a 0 that reads as "reported zero".
        assert!(!t.contains("cachekeeper_cache_write_tokens_total{"), "{t}");
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_requests_total{route="anthropic",dialect="anthropic",status_class="2xx",outcome="complete"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_request_received_bytes_total{route="anthropic"}"#
            ),
            Some(200.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_rewrites_total{route="anthropic",pass="images_retired"}"#
            ),
            Some(4.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_rewrites_total{route="anthropic",pass="images_seen"}"#
            ),
            Some(6.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_carriers_restored_total{route="anthropic"}"#
            ),
            Some(8.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_retries_total{route="anthropic",reason="image"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_prefix_collapses_total{route="anthropic",cause="eviction"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_collapse_write_tokens_total{route="anthropic",cause="eviction"}"#
            ),
            Some(1234.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_request_overhead_seconds_count{route="anthropic"}"#
            ),
            Some(2.0)
        );
        // 120 µs falls in the (100 µs, 200 µs] bucket.
        let bucket = |le: &str| {
            t.lines()
                .find(|l| {
                    l.starts_with("cachekeeper_request_overhead_seconds_bucket{")
                        && l.contains(&format!("le=\"{le}\""))
                        && l.contains(r#"route="anthropic""#)
                })
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(bucket("0.0001").as_deref(), Some("0"), "{t}");
        assert_eq!(bucket("0.0002").as_deref(), Some("2"), "{t}");
        assert_eq!(bucket("+Inf").as_deref(), Some("2"), "{t}");
        assert!(t.contains("# TYPE cachekeeper_request_overhead_seconds histogram"));
    }

    #[test]
    fn overhead_buckets_resolve_50_microseconds_to_10_seconds() {
        let bounds: Vec<f64> = exponential_buckets(
            OVERHEAD_BUCKET_START_S,
            OVERHEAD_BUCKET_FACTOR,
            OVERHEAD_BUCKETS,
        )
        .collect();
        assert!((bounds[0] - 50e-6).abs() < 1e-12);
        let last = bounds[bounds.len() - 1];
        assert!(last >= 10.0, "{last}");
        assert!(
            bounds[bounds.len() - 2] < 10.0,
            "no bucket past the first ≥ 10 s"
        );
    }

    #[test]
    fn usage_not_reported_counts_whole_2xx_generations_only() {
        let m = Metrics::new();
        let report = RewriteReport::default();
        let none = Usage::default();
        m.record(&sample(&report, &none));
        let mut broken = sample(&report, &none);
        broken.outcome = Outcome::UpstreamBroken;
        m.record(&broken);
        let mut not_generation = sample(&report, &none);
        not_generation.generation = false;
        m.record(&not_generation);
        let t = m.encode();
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_usage_not_reported_total{route="anthropic"}"#
            ),
            Some(1.0),
            "{t}"
        );
        assert!(!t.contains("cachekeeper_output_tokens_total{"));
    }

    #[test]
    fn model_labels_are_capped_and_long_names_are_other() {
        let m = Metrics::new();
        let report = RewriteReport::default();
        let usage = Usage {
            output_tokens: Some(1),
            ..Usage::default()
        };
        let names: Vec<String> = (0..MAX_MODEL_LABELS + 5).map(|i| format!("m{i}")).collect();
        for name in &names {
            let mut s = sample(&report, &usage);
            s.model = Some(name);
            m.record(&s);
        }
        let long = "x".repeat(MAX_MODEL_LABEL_BYTES + 1);
        let mut s = sample(&report, &usage);
        s.model = Some(&long);
        m.record(&s);
        // A model seen before the cap filled keeps its label.
        let mut s = sample(&report, &usage);
        s.model = Some("m0");
        m.record(&s);
        let t = m.encode();
        let series = t
            .lines()
            .filter(|l| l.starts_with("cachekeeper_output_tokens_total{"))
            .count();
        assert_eq!(series, MAX_MODEL_LABELS + 1, "{t}");
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_output_tokens_total{route="anthropic",model="other"}"#
            ),
            Some(6.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_output_tokens_total{route="anthropic",model="m0"}"#
            ),
            Some(2.0)
        );
        assert!(!t.contains(&long));
    }

    /// A model name is the client's text: quotes, backslashes and newlines are escaped, so a
    /// name cannot forge a series.
    #[test]
    fn a_model_name_cannot_break_the_text() {
        let m = Metrics::new();
        let report = RewriteReport::default();
        let usage = Usage {
            output_tokens: Some(1),
            ..Usage::default()
        };
        let mut s = sample(&report, &usage);
        s.model = Some("x\"} 99\ncachekeeper_requests_total{a=\"\\");
        m.record(&s);
        let t = m.encode();
        assert!(
            t.contains(r#"model="x\"} 99\ncachekeeper_requests_total{a=\"\\"} 1"#),
            "{t}"
        );
        assert!(!t
            .lines()
            .any(|l| l.starts_with("cachekeeper_requests_total{a=")));
    }

    /// A route's series handles count into the families the text encodes, and a zero still
    /// creates no series (as `get_or_create` on the first non-zero add did).
    #[test]
    fn route_series_are_the_families_series() {
        let m = Metrics::new();
        let report = RewriteReport::default();
        let usage = Usage::default();
        let mut quiet = sample(&report, &usage);
        quiet.bytes_in = 0;
        quiet.bytes_out = 0;
        quiet.response_bytes = 0;
        quiet.request_overhead = None;
        quiet.response_overhead = None;
        quiet.generation = false;
        m.record(&quiet);
        let t = m.encode();
        for absent in [
            "cachekeeper_request_received_bytes_total{",
            "cachekeeper_response_bytes_total{",
            "cachekeeper_request_overhead_seconds_count{",
            "cachekeeper_usage_not_reported_total{",
        ] {
            assert!(!t.contains(absent), "{absent} in {t}");
        }
        let mut other = sample(&report, &usage);
        other.route = "openai";
        other.dialect = "openai";
        for s in [sample(&report, &usage), other, sample(&report, &usage)] {
            m.record(&s);
        }
        let t = m.encode();
        let v = |series: &str| value(&t, series);
        assert_eq!(
            v(r#"cachekeeper_request_received_bytes_total{route="anthropic"}"#),
            Some(200.0),
            "{t}"
        );
        assert_eq!(
            v(r#"cachekeeper_request_received_bytes_total{route="openai"}"#),
            Some(100.0)
        );
        assert_eq!(
            v(
                r#"cachekeeper_requests_total{route="anthropic",dialect="anthropic",status_class="2xx",outcome="complete"}"#
            ),
            Some(3.0)
        );
        assert_eq!(
            v(
                r#"cachekeeper_requests_total{route="openai",dialect="openai",status_class="2xx",outcome="complete"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            v(r#"cachekeeper_usage_not_reported_total{route="anthropic"}"#),
            Some(2.0)
        );
        assert_eq!(
            v(r#"cachekeeper_response_overhead_seconds_count{route="openai"}"#),
            Some(1.0)
        );
    }

    #[test]
    fn errors_and_status_classes() {
        let m = Metrics::new();
        let report = RewriteReport::default();
        let usage = Usage::default();
        let mut s = sample(&report, &usage);
        s.route = "-";
        s.dialect = "-";
        s.status = 404;
        s.outcome = Outcome::ProxyError;
        s.error = Some("no_route");
        s.generation = false;
        s.request_overhead = None;
        s.response_overhead = None;
        m.record(&s);
        let t = m.encode();
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_proxy_errors_total{route="-",kind="no_route"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &t,
                r#"cachekeeper_requests_total{route="-",dialect="-",status_class="4xx",outcome="proxy_error"}"#
            ),
            Some(1.0)
        );
        assert!(!t.contains(r#"cachekeeper_request_overhead_seconds_count{route="-"}"#));
        assert!(!t.contains("cachekeeper_buffer_budget_exceeded_total{"));
        m.buffer_budget_exceeded("anthropic");
        m.buffer_budget_exceeded("anthropic");
        assert_eq!(
            value(
                &m.encode(),
                r#"cachekeeper_buffer_budget_exceeded_total{route="anthropic"}"#
            ),
            Some(2.0)
        );
        assert_eq!(status_class(0), "none");
        assert_eq!(status_class(101), "1xx");
    }
}
