//! cachekeeper's HTTP layer: what a reverse proxy needs, with no knowledge of LLMs or their
//! wire formats. It depends on no other crate of the workspace; the `cachekeeper` crate
//! re-exports it as `cachekeeper::wire`.
//!
//! - [`listener`]: accept, serve HTTP/1.1 + HTTP/2, graceful shutdown.
//! - [`limits`]: request-head limits (hyper's parser caps and the proxy's own).
//! - [`upstream`]: the pooled TLS client, proxy tunnel and header hygiene.
//! - [`body`]: the bounded request-body read and `content-encoding` decoding.
//! - [`stream`]: the response body on its way back (idle timeout, observer hook).
//! - [`tunnel`]: WebSocket / HTTP upgrades.
//! - [`tee`]: a copy of the response body for an observer, decoded by [`decode`] and framed
//!   into events by [`sse`].
//! - [`eventstream`]: AWS event-stream frames (`application/vnd.amazon.eventstream`, Amazon
//!   Bedrock's streaming responses) decoded into messages, in any split.
//!
//! Feature `testing`: test-only APIs for the tests of the crates above (never in a release
//! build's code paths).
#![forbid(unsafe_code)]

pub mod body;
pub mod decode;
pub mod eventstream;
pub mod limits;
pub mod listener;
pub mod sse;
pub mod stream;
pub mod tee;
pub mod tunnel;
pub mod upstream;

/// The body type of every response the proxy sends.
pub type ResponseBody =
    http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, upstream::BoxError>;

#[cfg(test)]
mod testing;
