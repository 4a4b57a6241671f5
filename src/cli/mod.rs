//! Subcommands of the `cachekeeper` binary that work on the library's internals (the binary,
//! `src/main.rs`, parses the command line and dispatches here).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_macros,
    reason = "the CLI's home: subcommands print to stdout and stderr, off any request's path"
)]

/// `print!` to stdout through [`write_out`]: a closed pipe ends the process quietly.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!($($arg)*)) };
}

/// `println!` to stdout through [`write_out`]: a closed pipe ends the process quietly.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

pub mod replay;
pub mod report;
pub mod state;
pub(crate) mod table;

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Write a subcommand's output to stdout. When the reader has gone (`report | head -1`: a
/// closed pipe) the process exits with 0 at once, silently, since the reader has what it
/// wanted (`println!` would panic, exit code 101); any other write error is printed
/// (`error: cannot write to stdout: …`) and exits 1.
pub fn write_out(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// The config file's name, looked for when `--config` is not given.
pub const CONFIG_FILE: &str = "proxy.toml";

/// The places every subcommand looks for a config without `--config`, in order:
/// `./proxy.toml`, then `<config dir>/cachekeeper/proxy.toml` (the `dirs` crate's
/// `config_dir`: `$XDG_CONFIG_HOME` or `~/.config` on Linux, `~/Library/Application Support`
/// on macOS, `%APPDATA%` on Windows).
pub fn config_candidates() -> Vec<PathBuf> {
    let mut places = vec![PathBuf::from(".").join(CONFIG_FILE)];
    if let Some(dir) = dirs::config_dir() {
        places.push(dir.join("cachekeeper").join(CONFIG_FILE));
    }
    places
}

/// The config path of every subcommand: `explicit` (`--config`) when given, else the first of
/// [`config_candidates`] that exists. Errors: none exists; the message (printed,
/// `error: …`) names every place looked, exit code 2.
pub fn config_path(explicit: Option<&Path>) -> Result<PathBuf, ExitCode> {
    if let Some(p) = explicit {
        return Ok(p.to_owned());
    }
    let places = config_candidates();
    if let Some(found) = places.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let looked: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    eprintln!(
        "error: no config file: looked for {}; pass --config FILE (the repository's proxy.toml \
         is a commented example)",
        looked.join(" and ")
    );
    Err(ExitCode::from(2))
}

/// [`config_path`], then `config loaded: <file>` (the absolute path) on stderr, as `serve`
/// logs it: how `report`, `state`, `verdicts` and `replay` find their config.
pub fn find_config(explicit: Option<&Path>) -> Result<PathBuf, ExitCode> {
    let path = config_path(explicit)?;
    let shown = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    eprintln!("config loaded: {}", shown.display());
    Ok(path)
}

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
