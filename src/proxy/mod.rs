//! The proxy: one request's life from the listener to the log line, over the wire layer
//! ([`crate::wire`]) and the request passes ([`crate::rewrite`]).

pub mod errors;
mod phases;

pub use phases::{ResponseBody, Server, StartError, REWRITES_HEADER, TOKEN_HEADER};
