//! cachekeeper: a reverse proxy between LLM agents and LLM providers that keeps the
//! provider's prompt-cache prefix stable while it retires, repairs and shapes what the agent
//! sends. See `README.md` for the user's view and `../shared/design.md` for the architecture.
#![forbid(unsafe_code)]

pub mod config;
pub mod dialect;
pub mod images;
pub mod json_edit;
pub mod rewrite;
pub mod texts;
