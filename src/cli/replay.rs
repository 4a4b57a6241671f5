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

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use comfy_table::{presets, CellAlignment, Table};

use crate::cli::table::thousands;
use crate::replay::{replay, ReplayError, ReplayReport, Select, VariantReport};

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

/// The exit code of a failed replay: 2 for a bad config, an unknown route or no cache rule,
/// else 1.
fn exit_code(e: &ReplayError) -> ExitCode {
    match e {
        ReplayError::Config(_)
        | ReplayError::UnknownRoute { .. }
        | ReplayError::NoCacheRule { .. } => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    }
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
            exit_code(&e)
        }
    }
}

fn print_report(r: &ReplayReport) {
    print_model(r);
    let variants = [
        ("as sent", &r.as_sent),
        ("cachekeeper", &r.cachekeeper),
        ("keep newest 3", &r.keep_newest_3),
    ];
    print_table(&variants);
    for (name, v) in variants {
        print_events(name, v);
    }
}

/// The report's opening lines: the session, the cache model and the prices it was read with.
fn print_model(r: &ReplayReport) {
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
}

/// The variants side by side, one row per figure.
fn print_table(variants: &[(&str, &VariantReport)]) {
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
}

/// One variant's cache expiries and collapses, the first [`LISTED_COLLAPSES`] of them listed.
fn print_events(name: &str, v: &VariantReport) {
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
        return;
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

/// How a table row renders one variant.
type Cell = dyn Fn(&VariantReport) -> String;

/// Collapses listed per variant in the table output (`--json` lists all).
const LISTED_COLLAPSES: usize = 12;
