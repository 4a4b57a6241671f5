//! `cachekeeper replay --config FILE [--route NAME] [--only NAME] SESSION.jsonl [--json]`: run
//! passes over a recorded session offline and compare, under the exact-prefix cache model
//! ([`crate::accounting::cache_model`]), three ways of sending it:
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
//! `--route` overrides the lines' route; `--only` takes one route's lines. `docs/replay.md`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_macros,
    reason = "the CLI's home: subcommands print to stdout and stderr, off any request's path"
)]

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use comfy_table::{presets, CellAlignment, Table};

use crate::cli::table::thousands;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::accounting::cache_model::{self, CacheModel, Rule};
use crate::accounting::prefix::DigestKey;
use crate::accounting::pricing::{self, Multipliers};
use crate::accounting::session::{SessionTracker, TurnInput};
use crate::accounting::TurnAccount;
use crate::config::{Config, ReasoningConfig};
use crate::dialect::Dialect;
use crate::images::cache::TranscodeCache;
use crate::pipeline::{self, Plan, RunFor, Step};
use crate::provider::CacheActivation;
use crate::rewrite::RewriteReport;
use crate::route::{Route, RouteTable};
use crate::state::load::{Reads, Snapshot};
use crate::state::{MemoryBackend, Store};

/// Images the `keep_newest_3` comparison keeps.
pub const KEEP_NEWEST: usize = 3;

/// The text that replaces an image in the `keep_newest_3` comparison.
pub const PLACEHOLDER: &str = "[image omitted]";

/// The arguments of `cachekeeper replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Path of proxy.toml (its routes give the passes' settings and the provider). Default:
    /// ./proxy.toml, else proxy.toml in the platform's config directory, as for `serve`.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Replay every line on this route (default: each line's `route`).
    #[arg(long, value_name = "NAME")]
    pub route: Option<String>,
    /// Replay only the lines recorded for this route, skipping the others (a `serve
    /// --record` file holds every route's requests); with `--route`, on that route.
    #[arg(long, value_name = "NAME")]
    pub only: Option<String>,
    /// The session: one `{"ts": <unix ms>, "route": NAME, "body": <request>}` per line.
    pub session: PathBuf,
    /// Print JSON (for scripts) instead of tables.
    #[arg(long)]
    pub json: bool,
}

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

impl ReplayError {
    fn exit_code(&self) -> ExitCode {
        match self {
            ReplayError::Config(_)
            | ReplayError::UnknownRoute { .. }
            | ReplayError::NoCacheRule { .. } => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }
}

/// One collapse in a replay: a turn whose prefix changed before the previous turn's end,
/// found and attributed by the proxy's own accounting
/// ([`crate::accounting::session::SessionTracker`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayCollapse {
    /// 1-based.
    pub turn: u32,
    /// `tools`, `system` or `messages[N]` (cache order).
    pub at: String,
    /// `provider_expiry`, `eviction`, `repair`, `restore`, `client_tools`, `client_system`,
    /// `client_history` ([`crate::accounting::Cause::as_str`]).
    pub cause: &'static str,
    /// The turn's cache-write tokens (model estimate).
    pub write_tokens: u64,
}

/// A turn whose prefix did not change but whose cache entries had expired (idle longer
/// than the TTL): an expiry-driven write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpiryWrite {
    /// 1-based.
    pub turn: u32,
    /// Since the previous turn, ms.
    pub idle_ms: u64,
    /// The turn's cache-write tokens (model estimate).
    pub write_tokens: u64,
    /// Tokens a live entry would have let it read.
    pub expired_tokens: u64,
}

/// The figures of one way of sending the session (tokens are the model's estimates).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantReport {
    pub turns: u32,
    pub collapses: Vec<ReplayCollapse>,
    pub expiry_writes: Vec<ExpiryWrite>,
    /// Summed over the turns, tokens.
    pub input_tokens: u64,
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, those written at 1-hour breakpoints.
    pub cache_write_1h_tokens: u64,
    pub cache_read_tokens: u64,
    pub uncached_tokens: u64,
    /// Billed-input equivalents: uncached + read × read multiplier + write × write multiplier,
    /// in uncached-input tokens; `None`: not priced.
    pub billed_input_equiv: Option<f64>,
    /// What the same input would bill with no cache (= `input_tokens`).
    pub no_cache_equiv: u64,
    /// Images the model sees per turn, mean.
    pub mean_images: f64,
}

/// A replay's result (`--json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub file: String,
    pub route: String,
    pub provider: String,
    pub model: String,
    pub dialect: &'static str,
    pub turns: u32,
    pub rule: RuleReport,
    /// The multipliers the billed-input equivalents use
    /// ([`crate::accounting::pricing::multipliers`]); `None`: not priced.
    pub multipliers: Option<Multipliers>,
    /// Turns whose body the passes could not read (forwarded as sent).
    pub unparsed_turns: u32,
    /// Lines of other routes that `--only` skipped.
    pub skipped_lines: u32,
    pub as_sent: VariantReport,
    pub cachekeeper: VariantReport,
    pub keep_newest_3: VariantReport,
}

/// The cache rule applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleReport {
    /// `explicit` or `automatic`.
    pub activation: &'static str,
    pub ttl_s: Option<u64>,
    pub long_ttl_s: Option<u64>,
    pub min_tokens: u64,
    pub lookback_blocks: Option<usize>,
}

#[derive(Deserialize)]
struct Line<'a> {
    ts: i64,
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// Run `cachekeeper replay`. Exit codes: 0 done; 1 the session cannot be read; 2 a bad
/// config, an unknown route, or no cache rule.
pub fn run(args: &ReplayArgs) -> ExitCode {
    let config = match crate::cli::find_config(args.config.as_deref()) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let bar = if args.json || !std::io::stderr().is_terminal() || !std::io::stdout().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let len = std::fs::metadata(&args.session).map_or(0, |m| m.len());
        let bar = indicatif::ProgressBar::new(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} replaying [{bar:40}] {bytes}/{total_bytes} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    };
    let result = replay(
        &config,
        Select {
            route: args.route.as_deref(),
            only: args.only.as_deref(),
        },
        &args.session,
        &bar,
    );
    bar.finish_and_clear();
    match result {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => outln!("{s}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print_report(&report);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// One way of sending the session, fed turn by turn.
struct Variant {
    /// The session name its turns are tracked under.
    name: &'static str,
    model: CacheModel,
    report: VariantReport,
    images: u64,
    last_ts: Option<i64>,
}

/// What one variant sends for one turn.
struct Sent<'a> {
    dialect: Dialect,
    /// The client's bytes.
    client: &'a [u8],
    /// The bytes this variant sends.
    forwarded: &'a [u8],
    /// What changed them.
    report: &'a RewriteReport,
    ts: i64,
}

impl Variant {
    fn new(name: &'static str, rule: Rule) -> Self {
        Self {
            name,
            model: CacheModel::new(rule),
            report: VariantReport {
                turns: 0,
                collapses: Vec::new(),
                expiry_writes: Vec::new(),
                input_tokens: 0,
                cache_write_tokens: 0,
                cache_write_1h_tokens: 0,
                cache_read_tokens: 0,
                uncached_tokens: 0,
                billed_input_equiv: None,
                no_cache_equiv: 0,
                mean_images: 0.0,
            },
            images: 0,
            last_ts: None,
        }
    }

    /// Feed one turn: the cache model's figures, and the proxy's own collapse detection.
    /// `turn`: the turn as the proxy's pipeline committed it (the `cachekeeper` variant), its
    /// collapse found here ([`SessionTracker::settle`]); `None`: the turn is begun here from
    /// `sent`.
    fn turn(&mut self, s: &Session, sent: &Sent<'_>, turn: Option<TurnAccount>) {
        // A body the model cannot read counts as an empty turn (the provider would reject it).
        let t = self
            .model
            .turn(sent.dialect, sent.forwarded, sent.ts)
            .unwrap_or_default();
        let account = match turn {
            Some(mut a) => {
                s.tracker.settle(&mut a);
                Some(a)
            }
            None => {
                let input = s.turn_input(self.name, sent);
                let memory = Snapshot::memory_only();
                s.tracker
                    .begin(&input, &Reads::new(s.tracker.store(), &memory))
                    .map(|(a, _)| a)
            }
        };
        let r = &mut self.report;
        r.turns += 1;
        r.input_tokens += t.input;
        r.cache_write_tokens += t.write;
        r.cache_write_1h_tokens += t.write_long;
        r.cache_read_tokens += t.read;
        r.uncached_tokens += t.uncached;
        self.images += u64::from(t.images);
        match account.and_then(|a| a.collapse) {
            Some(c) => r.collapses.push(ReplayCollapse {
                turn: r.turns,
                at: c.at,
                cause: c.cause.as_str(),
                write_tokens: t.write,
            }),
            None if t.expired > 0 => r.expiry_writes.push(ExpiryWrite {
                turn: r.turns,
                idle_ms: self
                    .last_ts
                    .map_or(0, |p| u64::try_from(sent.ts.saturating_sub(p)).unwrap_or(0)),
                write_tokens: t.write,
                expired_tokens: t.expired,
            }),
            None => {}
        }
        self.last_ts = Some(sent.ts);
    }

    fn finish(mut self, m: Option<&Multipliers>) -> VariantReport {
        let r = &mut self.report;
        r.no_cache_equiv = r.input_tokens;
        r.billed_input_equiv = m.map(|m| {
            let short = r.cache_write_tokens - r.cache_write_1h_tokens;
            r.uncached_tokens as f64
                + r.cache_read_tokens as f64 * m.read
                + short as f64 * m.write_5m
                + r.cache_write_1h_tokens as f64 * m.write_1h.unwrap_or(m.write_5m)
        });
        r.mean_images = if r.turns == 0 {
            0.0
        } else {
            self.images as f64 / f64::from(r.turns)
        };
        self.report
    }
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

/// A replay in progress.
struct Session {
    route: Arc<Route>,
    reasoning: ReasoningConfig,
    dialect: Dialect,
    model: String,
    rule: Rule,
    multipliers: Option<Multipliers>,
    unparsed: u32,
    /// The proxy's collapse detection, over an in-memory store.
    tracker: Arc<SessionTracker>,
    /// The transcode cache of the `cachekeeper` variant's passes (`[images]
    /// transcode_cache_bytes`; the bytes are the same without it, only slower).
    transcodes: Arc<TranscodeCache>,
    /// `[server] max_rewrite_bytes`.
    limit: u64,
    /// Requests without a credential: the all-zero digest key.
    key: DigestKey,
    /// The three ways of sending, as a bundle so [`Session::turn`] can lend `self`.
    variants: Option<Box<[Variant; 3]>>,
}

impl Session {
    fn start(
        table: &RouteTable,
        config: &Config,
        name: &str,
        first: &Line<'_>,
    ) -> Result<Session, ReplayError> {
        let route = table
            .routes()
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .ok_or_else(|| ReplayError::UnknownRoute {
                name: name.to_owned(),
                known: table.routes().iter().map(|r| r.name.clone()).collect(),
            })?;
        let body: Value = serde_json::from_str(first.body.get()).unwrap_or(Value::Null);
        let dialect = dialect_of(&route, first.path.as_deref(), &body);
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let cache = route
            .provider
            .cache_rule(&model)
            .ok_or_else(|| ReplayError::NoCacheRule {
                route: route.name.clone(),
                provider: route.provider.row.name.to_owned(),
                model: model.clone(),
            })?;
        let rule = Rule::from_cache_rule(cache);
        let multipliers = pricing::multipliers(route.provider.row.name, &model);
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 30);
        Ok(Session {
            route,
            reasoning: config.reasoning.clone(),
            transcodes: Arc::new(TranscodeCache::new(config.images.transcode_cache_bytes)),
            limit: config.server.max_rewrite_bytes,
            dialect,
            model,
            rule,
            multipliers,
            unparsed: 0,
            tracker: Arc::new(SessionTracker::new(store)),
            key: DigestKey::for_credential(None),
            variants: Some(Box::new([
                Variant::new("as_sent", rule),
                Variant::new("cachekeeper", rule),
                Variant::new("keep_newest_3", rule),
            ])),
        })
    }

    /// The session tracker's input for one variant's turn (the variant's name is its
    /// session).
    fn turn_input<'a>(&'a self, variant: &'static str, sent: &Sent<'a>) -> TurnInput<'a> {
        TurnInput {
            dialect: sent.dialect,
            route: &self.route.name,
            provider: &self.route.provider,
            model: &self.model,
            scope: "",
            key: &self.key,
            client_session: Some(variant),
            client: sent.client,
            forwarded: sent.forwarded,
            report: sent.report,
            now_ms: sent.ts,
            retired: None,
        }
    }

    /// The pipeline's plan for one turn of the `cachekeeper` variant (session `variant`) on
    /// `rest` (the recorded path, else the dialect's), arrived at `ts` (Unix ms): the proxy's
    /// own plan for a request without a credential, anthropic-beta or content-encoding.
    fn plan(&self, variant: &str, rest: &str, ts: i64) -> Plan {
        Plan {
            dialect: self.dialect,
            route: Arc::clone(&self.route),
            upstream_uri: http::Uri::default(),
            upstream_path: format!("{}{}", self.route.base_path, rest),
            path_model: self.route.model_of(crate::route::model_from_path(rest), None),
            credential_scope: String::new(),
            sealing: None,
            digest_key: self.key.clone(),
            encoding: None,
            anthropic_beta: None,
            droppable: self.reasoning.droppable_params.clone().into(),
            droppable_betas: self.reasoning.droppable_betas.clone().into(),
            store: self.tracker.store().clone(),
            transcodes: Arc::clone(&self.transcodes),
            limit: self.limit,
            decode_wait: std::time::Duration::ZERO,
            sessions: Some(Arc::clone(&self.tracker)),
            client_session: Some(variant.to_owned()),
            arrived_ms: ts,
        }
    }

    fn turn(&mut self, line: &Line<'_>) {
        let Some(mut v) = self.variants.take() else {
            return;
        };
        let body = line.body.get().as_bytes();
        let dialect = self.dialect;
        let none = RewriteReport::default();
        fn sent<'a>(
            dialect: Dialect,
            client: &'a [u8],
            forwarded: &'a [u8],
            report: &'a RewriteReport,
            ts: i64,
        ) -> Sent<'a> {
            Sent {
                dialect,
                client,
                forwarded,
                report,
                ts,
            }
        }
        let ts = line.ts;
        v[0].turn(self, &sent(dialect, body, body, &none, ts), None);
        // As the proxy forwards it: the proxy's own pipeline (session opened from the one
        // parse, cold-cache eviction, restore, passes, accounting) over replay's memory store.
        let rest = line
            .path
            .clone()
            .unwrap_or_else(|| default_path(dialect).to_owned());
        let plan = self.plan(v[1].name, &rest, ts);
        let run_for = RunFor::whole_turn();
        // Replay's store is in memory: nothing to load.
        let memory = Snapshot::memory_only();
        let done = pipeline::prepare(&plan, &bytes::Bytes::copy_from_slice(body))
            .ok()
            .and_then(
                |parsed| match pipeline::run(&plan, &parsed, run_for, &memory) {
                    Ok(Step::Done(done)) => Some(*done),
                    // Replay defers nothing and its store is in memory: neither happens.
                    Ok(Step::Load(_) | Step::Deferred { .. }) | Err(_) => None,
                },
            );
        match done {
            Some((outcome, (turn, _), _)) => {
                let fwd = match &outcome.body {
                    Some(b) if !self.route.dry_run => b.as_slice(),
                    _ => body,
                };
                v[1].turn(self, &sent(dialect, body, fwd, &outcome.report, ts), turn);
            }
            None => {
                // The passes cannot read it: the proxy forwards it unchanged.
                self.unparsed += 1;
                v[1].turn(self, &sent(dialect, body, body, &none, ts), None);
            }
        }
        // Every image but the newest 3 replaced: an eviction, as the accounting sees it.
        let (kept, replaced) =
            keep_newest(dialect, body, KEEP_NEWEST).map_or((None, 0), |(b, n)| (Some(b), n));
        let mut evicted = RewriteReport::default();
        evicted.images.retired = replaced;
        let kept = kept.as_deref().unwrap_or(body);
        v[2].turn(self, &sent(dialect, body, kept, &evicted, ts), None);
        self.variants = Some(v);
    }

    fn finish(self, file: String, skipped_lines: u32) -> ReplayReport {
        let m = self.multipliers.as_ref();
        let rule = self.rule;
        let [as_sent, cachekeeper, keep] = match self.variants {
            Some(v) => *v,
            None => [
                Variant::new("as_sent", rule),
                Variant::new("cachekeeper", rule),
                Variant::new("keep_newest_3", rule),
            ],
        };
        ReplayReport {
            file,
            route: self.route.name.clone(),
            provider: self.route.provider.row.name.to_owned(),
            model: self.model,
            dialect: self.dialect.as_str(),
            turns: as_sent.report.turns,
            rule: RuleReport {
                activation: match rule.activation {
                    CacheActivation::Explicit => "explicit",
                    CacheActivation::Automatic => "automatic",
                },
                ttl_s: rule.ttl_ms.map(|t| t / 1000),
                long_ttl_s: rule.long_ttl_ms.map(|t| t / 1000),
                min_tokens: rule.min_tokens,
                lookback_blocks: (rule.activation == CacheActivation::Explicit)
                    .then_some(rule.lookback),
            },
            unparsed_turns: self.unparsed,
            skipped_lines,
            as_sent: as_sent.finish(m),
            cachekeeper: cachekeeper.finish(m),
            keep_newest_3: keep.finish(m),
            multipliers: self.multipliers,
        }
    }
}

/// The dialect of a session's bodies: the route's pinned one, else the recorded path's,
/// else the body's shape.
fn dialect_of(route: &Route, path: Option<&str>, body: &Value) -> Dialect {
    if let Some(d) = route.dialect {
        return d;
    }
    if let Some((d, _)) = path.and_then(|p| route.classify(p)) {
        return d;
    }
    let has = |k: &str| body.get(k).is_some();
    let serves = |d: Dialect| route.provider.row.dialects.contains(&d);
    if has("contents") {
        Dialect::Gemini
    } else if has("input") {
        Dialect::OpenaiResponses
    } else if serves(Dialect::Anthropic)
        && (has("system") || anthropic_blocks(body) || !serves(Dialect::Openai))
    {
        Dialect::Anthropic
    } else {
        Dialect::Openai
    }
}

/// Whether a message holds a content block only the Anthropic wire has (`tool_use`,
/// `tool_result`, `thinking`, `redacted_thinking`, or an image with a `source`). The failing
/// input: an Anthropic body without `system` was replayed as OpenAI Chat.
fn anthropic_blocks(body: &Value) -> bool {
    let anthropic_only = |b: &Value| {
        matches!(
            b.get("type").and_then(Value::as_str),
            Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking")
        ) || b.get("source").is_some()
    };
    body.get("messages")
        .and_then(Value::as_array)
        .is_some_and(|ms| {
            ms.iter().any(|m| {
                m.get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|bs| bs.iter().any(anthropic_only))
            })
        })
}

/// A request path of the dialect, for a line that recorded none.
fn default_path(dialect: Dialect) -> &'static str {
    dialect.format().example_path()
}

/// `body` with every image but the newest `keep` replaced by [`PLACEHOLDER`] text (a
/// `cache_control` the image had stays on the text), and how many were replaced; `None`
/// when the body is not JSON. Images are counted in document order of the message list.
/// The body is always re-serialized (keys sorted), so every turn of the comparison has the
/// same key order and only the replacements change its prefix.
pub fn keep_newest(dialect: Dialect, body: &[u8], keep: usize) -> Option<(Vec<u8>, usize)> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let key = dialect.format().conversation().key;
    let mut replaced = 0;
    if let Some(list) = value.get_mut(key) {
        let total = count_images(list);
        replaced = total.saturating_sub(keep);
        let mut to_replace = replaced;
        replace_images(dialect, list, &mut to_replace);
    }
    serde_json::to_vec(&value).ok().map(|b| (b, replaced))
}

fn count_images(v: &Value) -> usize {
    match v {
        Value::Object(obj) if cache_model::is_image(obj) => 1,
        Value::Object(obj) => obj.values().map(count_images).sum(),
        Value::Array(items) => items.iter().map(count_images).sum(),
        _ => 0,
    }
}

fn replace_images(dialect: Dialect, v: &mut Value, left: &mut usize) {
    if *left == 0 {
        return;
    }
    match v {
        Value::Object(obj) if cache_model::is_image(obj) => {
            let keep = obj.get("cache_control").map(Value::to_string);
            let keep = keep.as_deref().map(|raw| ("cache_control", raw));
            let style = dialect.format().image_placeholder_style();
            let Ok(text) = serde_json::from_str(&style.block(PLACEHOLDER, keep)) else {
                return;
            };
            *v = text;
            *left -= 1;
        }
        Value::Object(obj) => {
            for (_, child) in obj.iter_mut() {
                replace_images(dialect, child, left);
            }
        }
        Value::Array(items) => {
            for child in items {
                replace_images(dialect, child, left);
            }
        }
        _ => {}
    }
}

fn print_report(r: &ReplayReport) {
    outln!(
        "{}: {} turns on route {} (provider {}, model {}, {} wire)",
        r.file,
        r.turns,
        r.route,
        r.provider,
        r.model,
        r.dialect
    );
    if r.skipped_lines > 0 {
        outln!(
            "skipped {} line(s) of other routes (--only)",
            r.skipped_lines
        );
    }
    let ttl = |t: Option<u64>| t.map_or_else(|| "none".to_owned(), |t| format!("{t} s"));
    outln!(
        "cache model: {} caching, TTL {}{}, minimum {} tokens{}",
        r.rule.activation,
        ttl(r.rule.ttl_s),
        r.rule
            .long_ttl_s
            .map(|t| format!(" (1h markers: {t} s)"))
            .unwrap_or_default(),
        r.rule.min_tokens,
        r.rule
            .lookback_blocks
            .map(|n| format!(", {n}-block lookback"))
            .unwrap_or_default()
    );
    match &r.multipliers {
        Some(m) => outln!(
            "billed-input equivalents: read {}x, write {}x{} ({})",
            m.read,
            m.write_5m,
            m.write_1h
                .map(|w| format!(", 1h write {w}x"))
                .unwrap_or_default(),
            m.source
        ),
        None => outln!("billed-input equivalents: not priced"),
    }
    if r.unparsed_turns > 0 {
        outln!(
            "{} turn(s) could not be read by the passes (forwarded as sent)",
            r.unparsed_turns
        );
    }
    let variants = [
        ("as sent", &r.as_sent),
        ("cachekeeper", &r.cachekeeper),
        ("keep newest 3", &r.keep_newest_3),
    ];
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header(
        std::iter::once("tokens (estimated)".to_owned())
            .chain(variants.iter().map(|(n, _)| (*n).to_owned())),
    );
    let rows: [(&str, &Cell); 8] = [
        ("collapses", &|v| v.collapses.len().to_string()),
        ("cache write", &|v| thousands(v.cache_write_tokens)),
        ("cache read", &|v| thousands(v.cache_read_tokens)),
        ("uncached", &|v| thousands(v.uncached_tokens)),
        ("input", &|v| thousands(v.input_tokens)),
        ("billed-input equiv.", &|v| {
            v.billed_input_equiv
                .map_or_else(|| "not priced".to_owned(), |b| thousands(b.round() as u64))
        }),
        ("saving vs no cache", &|v| {
            v.billed_input_equiv.map_or_else(
                || "not priced".to_owned(),
                |b| {
                    if v.no_cache_equiv == 0 {
                        "n/a".to_owned()
                    } else {
                        format!("{:.1}%", 100.0 * (1.0 - b / v.no_cache_equiv as f64))
                    }
                },
            )
        }),
        ("images seen / turn", &|v| format!("{:.1}", v.mean_images)),
    ];
    for (name, f) in rows {
        table.add_row(std::iter::once(name.to_owned()).chain(variants.iter().map(|(_, v)| f(v))));
    }
    for col in 1..=variants.len() {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    outln!("{table}");
    for (name, v) in variants {
        for e in &v.expiry_writes {
            outln!(
                "{name}: turn {} after {} s idle: cache expired, {} written ({} would have been read)",
                e.turn,
                e.idle_ms / 1000,
                thousands(e.write_tokens),
                thousands(e.expired_tokens)
            );
        }
        if v.collapses.is_empty() {
            outln!("{name}: no collapses");
            continue;
        }
        let list: Vec<String> = v
            .collapses
            .iter()
            .take(LISTED_COLLAPSES)
            .map(|c| {
                format!(
                    "turn {} {} {} ({} written)",
                    c.turn,
                    c.at,
                    c.cause,
                    thousands(c.write_tokens)
                )
            })
            .collect();
        let more = v.collapses.len().saturating_sub(LISTED_COLLAPSES);
        outln!(
            "{name}: {} collapse(s): {}{}",
            v.collapses.len(),
            list.join("; "),
            if more > 0 {
                format!("; … {more} more (--json lists all)")
            } else {
                String::new()
            }
        );
    }
}

/// How a table row renders one variant.
type Cell = dyn Fn(&VariantReport) -> String;

/// Collapses listed per variant in the table output (`--json` lists all).
const LISTED_COLLAPSES: usize = 12;

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_blocks_tell_the_wire_without_a_system_prompt() {
        let tool = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]});
        assert!(anthropic_blocks(&tool));
        let image = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": "x"}}]}]});
        assert!(anthropic_blocks(&image));
        let chat = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:"}}]}, {"role": "tool", "content": "x"}]});
        assert!(!anthropic_blocks(&chat));
        assert!(!anthropic_blocks(&serde_json::json!({"messages": "x"})));
    }

    #[test]
    fn keep_newest_replaces_the_oldest_images() {
        let img = |n: u8| {
            serde_json::json!({"type": "image", "source": {"type": "base64",
                "media_type": "image/png", "data": format!("AAA{n}")}})
        };
        let body = serde_json::json!({"messages": [
            {"role": "user", "content": [img(1), {"type": "text", "text": "x"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                "content": [img(2)]}]},
            {"role": "user", "content": [img(3), img(4)]},
        ]});
        let bytes = serde_json::to_vec(&body).unwrap();
        let out: Value =
            serde_json::from_slice(&keep_newest(Dialect::Anthropic, &bytes, 3).unwrap().0).unwrap();
        assert_eq!(
            out["messages"][0]["content"][0],
            serde_json::json!({"type": "text", "text": PLACEHOLDER})
        );
        assert_eq!(out["messages"][1]["content"][0]["content"][0], img(2));
        assert_eq!(out["messages"][2]["content"][1], img(4));
        assert_eq!(keep_newest(Dialect::Anthropic, &bytes, 4).unwrap().1, 0);
        assert_eq!(keep_newest(Dialect::Anthropic, &bytes, 3).unwrap().1, 1);
        assert!(keep_newest(Dialect::Anthropic, b"{", 3).is_none());
    }
}
