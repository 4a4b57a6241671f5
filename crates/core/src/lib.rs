//! cachekeeper's core: the wire formats (`dialect`, one `WireFormat` impl per format), the
//! one provider table (`provider`), the rewrite passes and their policies (`images`,
//! `reasoning`, `caching`, `rewrite`), the pipeline that runs them on one parse (`pipeline`),
//! and the accounting of cache usage (`accounting`). No listener, no runtime: the binary's
//! crate (`cachekeeper`) serves requests; the storage interface is `cachekeeper-state`, HTTP
//! bodies and streams `cachekeeper-wire`. See docs/dev/architecture.md#layers.
#![forbid(unsafe_code)]

pub use cachekeeper_state as state;
pub use cachekeeper_wire as wire;
pub mod accounting;
pub mod caching;
pub mod config;
pub mod dialect;
pub mod digest;
pub mod images;
pub mod json;
pub mod media;
pub mod pipeline;
pub mod provider;
pub mod reasoning;
pub mod reserved;
pub mod response;
pub mod rewrite;
pub mod route;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod texts;

/// Tests: how many times this process has parsed a JSON body (validated and indexed it, the
/// scan every pass reads), on every thread. `tests/parses.rs`, alone in its binary, reads it
/// around requests to check that the proxy parses a request body once.
#[doc(hidden)]
pub fn json_parses() -> u64 {
    json::parses_total()
}
