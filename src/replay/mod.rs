//! Replay: run the proxy's passes over a recorded session offline and compare, under the
//! exact-prefix cache model ([`crate::accounting::cache_model`]), three ways of sending it:
//!
//! - `as_sent`: the bodies as the client sent them;
//! - `cachekeeper`: as the proxy would forward them on that route (the route's passes, its
//!   `[images]` settings and provider; no network, no learned verdicts, no captured carriers);
//! - `keep_newest_3`: every image but the newest 3 replaced by a short text (a comparison
//!   policy computed from the as-sent bodies; not something cachekeeper does).
//!
//! The file holds one JSON object per line, `{"ts": <unix ms>, "route": NAME, "body":
//! <request>}` and optionally `"path"` (the request path after the route's prefix, as
//! `serve --record` writes it; it picks the dialect when the route does not pin one).
//! The CLI (`cachekeeper replay`, [`crate::cli::replay`]) picks the lines and prints the
//! report; `docs/replay.md`.
//!
//! Modules: [`session`] drives one recorded session through the shared pipeline
//! ([`crate::pipeline`]) and the proxy's accounting; [`variant`] is one way of sending it;
//! [`report`] is what a replay finds.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::Config;
use crate::route::RouteTable;

mod report;
mod session;
mod variant;

pub use report::{ExpiryWrite, ReplayCollapse, ReplayReport, RuleReport, VariantReport};
use session::Session;
pub use variant::keep_newest;

/// Images the `keep_newest_3` comparison keeps.
pub const KEEP_NEWEST: usize = 3;

/// The text that replaces an image in the `keep_newest_3` comparison.
pub const PLACEHOLDER: &str = "[image omitted]";

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Config(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: line {line} is not a replay line ({{\"ts\", \"route\", \"body\"}}): {detail}"
    )]
    NotJson {
        path: String,
        line: usize,
        detail: String,
    },
    #[error("{path}: line {line} names no route; pass --route NAME")]
    NoRoute { path: String, line: usize },
    #[error("{path}: line {line} is for route {found:?}, earlier lines for {first:?}: a replay is of one route; pick its lines with --only NAME")]
    MixedRoutes {
        path: String,
        line: usize,
        first: String,
        found: String,
    },
    #[error("unknown route {name:?}; the config's routes: {}", known.join(", "))]
    UnknownRoute { name: String, known: Vec<String> },
    #[error("route {route}: provider {provider} has no prompt-cache rule for model {model:?} (set the route's `provider`)")]
    NoCacheRule {
        route: String,
        provider: String,
        model: String,
    },
    #[error("{path}: no requests")]
    Empty { path: String },
    #[error("{path}: no requests recorded for route {only:?} (--only)")]
    NoneForRoute { path: String, only: String },
}

#[derive(Deserialize)]
pub(super) struct Line<'a> {
    pub(super) ts: i64,
    #[serde(default)]
    pub(super) route: Option<String>,
    #[serde(default)]
    pub(super) path: Option<String>,
    #[serde(borrow)]
    pub(super) body: &'a RawValue,
}

/// Which lines a replay takes and on which route.
#[derive(Debug, Clone, Copy, Default)]
pub struct Select<'a> {
    /// Replay on this route (`--route`; default: each line's `route`).
    pub route: Option<&'a str>,
    /// Take only the lines whose `route` is this (`--only`); the others are counted in
    /// [`ReplayReport::skipped_lines`].
    pub only: Option<&'a str>,
}

/// Replay `session`'s lines that `select` takes, reporting progress (bytes read) to `bar`.
///
/// Errors: [`ReplayError`]: the config, the file, a line, the route, the provider's rule.
pub fn replay(
    config: &Path,
    select: Select<'_>,
    session: &Path,
    bar: &indicatif::ProgressBar,
) -> Result<ReplayReport, ReplayError> {
    let route = select.route;
    let loaded = Config::load(config).map_err(|e| ReplayError::Config(e.to_string()))?;
    let table = RouteTable::new(&loaded.config).map_err(ReplayError::Config)?;
    let path = session.display().to_string();
    let file = File::open(session).map_err(|source| ReplayError::Read {
        path: path.clone(),
        source,
    })?;
    let mut reader = BufReader::new(file);
    let mut state: Option<Session> = None;
    let mut text = String::new();
    let mut n = 0usize;
    let mut skipped = 0u32;
    loop {
        text.clear();
        let read = reader
            .read_line(&mut text)
            .map_err(|source| ReplayError::Read {
                path: path.clone(),
                source,
            })?;
        if read == 0 {
            break;
        }
        n += 1;
        bar.inc(read as u64);
        if text.trim().is_empty() {
            continue;
        }
        let line: Line<'_> = serde_json::from_str(&text).map_err(|e| ReplayError::NotJson {
            path: path.clone(),
            line: n,
            detail: e.to_string(),
        })?;
        if select.only.is_some() && line.route.as_deref() != select.only {
            skipped = skipped.saturating_add(1);
            continue;
        }
        let name = route
            .map(str::to_owned)
            .or_else(|| line.route.clone())
            .ok_or_else(|| ReplayError::NoRoute {
                path: path.clone(),
                line: n,
            })?;
        if state.is_none() {
            state = Some(Session::start(&table, &loaded.config, &name, &line)?);
        }
        let Some(s) = state.as_mut() else { break };
        if s.route.name != name {
            return Err(ReplayError::MixedRoutes {
                path,
                line: n,
                first: s.route.name.clone(),
                found: name,
            });
        }
        s.turn(&line);
        bar.set_message(format!("turn {n}"));
    }
    let Some(s) = state else {
        return Err(match select.only {
            Some(only) => ReplayError::NoneForRoute {
                path,
                only: only.to_owned(),
            },
            None => ReplayError::Empty { path },
        });
    };
    Ok(s.finish(path, skipped))
}
