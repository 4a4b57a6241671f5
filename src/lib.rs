//! cachekeeper: a reverse proxy between LLM agents and LLM providers that keeps the
//! provider's prompt-cache prefix stable while it retires, repairs and shapes what the agent
//! sends. See `README.md` for the user's view and `docs/dev/architecture.md` for the architecture.
//!
//! This crate is the top of the workspace (`docs/dev/architecture.md#layers`): the proxy
//! (`proxy`: one request's context and phases, the one retry), telemetry, metrics, the
//! dashboard and the CLI. Below it, each a crate the compiler keeps from importing upward:
//! `cachekeeper-core` (wire formats, provider table, rewrite passes, pipeline, accounting),
//! `cachekeeper-state` (the storage interface and backends) and `cachekeeper-wire` (HTTP,
//! bodies, streams; no LLM knowledge). Their modules are re-exported here under their own names,
//! so `cachekeeper::dialect`, `cachekeeper::state`, ... name the same items.
#![forbid(unsafe_code)]

pub mod cli;
pub(crate) mod credential;
pub(crate) mod dashboard;
pub(crate) mod google_token;
pub(crate) mod metrics;
pub mod proxy;
pub mod replay;
pub(crate) mod sigv4;
pub use cachekeeper_state as state;
pub mod telemetry;
pub use cachekeeper_wire as wire;

// The core crate's modules, under the paths the binary's modules and the tests use.
pub use cachekeeper_core::json_parses;
pub use cachekeeper_core::reserved::exposure_warning;
#[cfg(test)]
pub(crate) use cachekeeper_core::testing;
pub use cachekeeper_core::{
    accounting, caching, config, dialect, digest, images, json, media, pipeline, provider,
    reasoning, reserved, response, rewrite, route, texts,
};
