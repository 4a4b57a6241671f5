//! Subcommands of the `cachekeeper` binary that work on the library's internals (the binary,
//! `src/main.rs`, parses the command line and dispatches here).

pub mod replay;
pub mod report;
pub mod state;
pub(crate) mod table;
