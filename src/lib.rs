//! cachekeeper: a reverse proxy between LLM agents and LLM providers that keeps the
//! provider's prompt-cache prefix stable while it retires, repairs and shapes what the agent
//! sends. See `README.md` for the user's view and `../shared/design.md` for the architecture.
//!
//! Layers: the wire (`server`, `upstream`, `body`, `stream`) knows nothing of LLMs; the
//! passes (`rewrite`, `images`, `dialect`) are pure functions of the body and the route.
#![forbid(unsafe_code)]

pub mod body;
pub mod config;
pub mod credential;
pub mod dialect;
pub mod error;
pub mod images;
pub mod json_edit;
pub mod reasoning;
pub mod rewrite;
pub mod route;
pub mod server;
pub mod state;
pub mod stream;
pub mod telemetry;
pub mod texts;
pub mod upstream;
