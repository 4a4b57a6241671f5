//! cachekeeper: a reverse proxy between LLM agents and LLM providers that keeps the
//! provider's prompt-cache prefix stable while it retires, repairs and shapes what the agent
//! sends. See `README.md` for the user's view and `docs/dev/architecture.md` for the architecture.
//!
//! Layers, dependencies pointing down only:
//! - `proxy` (one request's context and phases, the one retry) on top;
//! - `rewrite` (the passes in order, the one report) over the policies `images` and
//!   `reasoning`, which read `provider` (the one provider table) and `state` (the one storage
//!   interface);
//! - `dialect` (one view of a body per wire format) over `json` (the span scanner, splicing);
//! - `wire` (listener, upstream client, bodies, streams), which knows nothing of LLMs.
//!
//! `wire` and `state` are crates of their own (`crates/wire`, `crates/state`: they cannot
//! import anything above them), re-exported here under those names.
//!
//! Modules are `pub` only where the binary, the integration tests or the benchmarks use them.
#![forbid(unsafe_code)]

pub mod accounting;
pub mod caching;
pub mod cli;
pub mod config;
pub(crate) mod credential;
pub(crate) mod dashboard;
pub mod dialect;
pub mod digest;
pub mod images;
pub(crate) mod json;
pub mod media;
pub(crate) mod metrics;
pub(crate) mod pipeline;
pub mod provider;
pub mod proxy;
pub mod reasoning;
pub(crate) mod reserved;
pub use reserved::exposure_warning;
pub mod response;
pub mod rewrite;
pub mod route;
pub use cachekeeper_state as state;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod texts;
pub use cachekeeper_wire as wire;

/// Tests: how many times this process has parsed a JSON body (validated and indexed it, the
/// scan every pass reads), on every thread. `tests/parses.rs`, alone in its binary, reads it
/// around requests to check that the proxy parses a request body once.
#[doc(hidden)]
pub fn json_parses() -> u64 {
    json::parses_total()
}
