//! Subcommands of the `cachekeeper` binary that work on the library's internals (the binary,
//! `src/main.rs`, parses the command line and dispatches here).

pub mod replay;
pub mod report;
pub mod state;
pub(crate) mod table;

/// The config at `path`, or the error printed (`error: …`) and exit code 2: how every
/// subcommand loads `proxy.toml`.
pub fn load_config(
    path: &std::path::Path,
) -> Result<crate::config::Loaded, std::process::ExitCode> {
    crate::config::Config::load(path).map_err(|e| {
        eprintln!("error: {e}");
        std::process::ExitCode::from(2)
    })
}
