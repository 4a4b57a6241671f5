//! cachekeeper: a reverse proxy between LLM agents and LLM providers that keeps the
//! provider's prompt-cache prefix stable while it retires, repairs and shapes what the agent
//! sends. See `README.md` for the user's view and `docs/architecture.md` for the architecture.
//!
//! Layers: the wire (`wire`) knows nothing of LLMs; the
//! passes (`rewrite`, `images`, `dialect`) are pure functions of the body and the route.
#![forbid(unsafe_code)]

pub mod config;
pub mod credential;
pub mod dialect;
pub mod images;
pub mod json;
pub mod provider;
pub mod proxy;
pub mod reasoning;
pub mod rewrite;
pub mod route;
pub mod state;
pub mod telemetry;
pub mod texts;
pub mod wire;
