//! The HTTP layer: what a reverse proxy needs, with no knowledge of LLMs or their wire formats.
//!
//! - [`upstream`]: the pooled TLS client, proxy tunnel and header hygiene.
//! - [`body`]: the bounded request-body read and `content-encoding` decoding.
//! - [`stream`]: the response body on its way back (idle timeout, observer hook).

pub mod body;
pub mod stream;
pub mod upstream;
