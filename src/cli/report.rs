//! `cachekeeper report --config FILE [--session ID] [--since DURATION] [--json]`: where the
//! prompt-cache tokens of each recorded session went (`docs/guide/cache-money.md#cachekeeper-report`).
//!
//! Per session: turns, uncached / cache-read / cache-write / output tokens ("not reported"
//! when no turn reported the number, never 0), the cache-read share ("n/a" when not reported),
//! prefix collapses and the write tokens they cost by cause, billed-input equivalents and the
//! saving against no cache ("not priced" when the provider table has no multipliers for the
//! model; money with its currency where `[[pricing]]` covers the model). `--session ID`: that
//! session's turns. `--json`: the same data for scripts ([`SessionSummary`] list, or one
//! [`SessionDetail`]). The sums are [`crate::accounting::summary`]'s, as the dashboard's.
//!
//! [`SessionSummary`]: crate::accounting::summary::SessionSummary
//! [`SessionDetail`]: crate::accounting::summary::SessionDetail
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_macros,
    reason = "the CLI's home: subcommands print to stdout and stderr, off any request's path"
)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use comfy_table::CellAlignment;

use crate::cli::table::{push_table, table, thousands};

use crate::accounting::pricing::Pricing;
use crate::accounting::record::turns_from;
use crate::accounting::summary::{self, MoneySum, SessionDetail, SessionSummary};
use crate::config::Config;
use crate::state::{Kind, StoreOptions};

use super::state::age;

/// The arguments of `cachekeeper report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Path of proxy.toml (its `[state] path` names the database; its `[[pricing]]` entries
    /// price the tokens in money). Default: ./proxy.toml, else proxy.toml in the platform's
    /// config directory, as for `serve`.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Show this session's turns.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only turns of the last DURATION (e.g. 30m, 2h, 7d).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Print JSON (a list of sessions, or with --session one session and its turns).
    #[arg(long)]
    pub json: bool,
}

/// Run `cachekeeper report`. Exit codes: 0 done (also when nothing is recorded yet); 1 the
/// database cannot be read, or `--session` names no recorded session; 2 a bad config or
/// duration.
pub fn run(args: &ReportArgs) -> ExitCode {
    let now = summary::now_ms();
    let since = match args.since.as_deref().map(|s| summary::since_ms(s, now)) {
        None => None,
        Some(Ok(ms)) => Some(ms),
        Some(Err(e)) => {
            eprintln!("error: --since: {e}");
            return ExitCode::from(2);
        }
    };
    let loaded = match crate::cli::find_config(args.config.as_deref())
        .and_then(|path| crate::cli::load_config(&path))
    {
        Ok(l) => l,
        Err(code) => return code,
    };
    let pricing = pricing_of(&loaded.config);
    let opts = StoreOptions::from_config(&loaded.config.state, &loaded.base_dir);
    let path = opts.location();
    let turns = if opts.redis.is_some() || opts.path.exists() {
        // Read-only: the report changes nothing (a read-only copy of the file works too).
        let read = opts.open_reader().and_then(|mut b| b.scan(Kind::Usage));
        match read {
            Ok(records) => {
                let turns = turns_from(&records);
                if turns.len() < records.len() {
                    eprintln!(
                        "warning: skipped {} usage record(s) in {path} that this build cannot read",
                        records.len() - turns.len()
                    );
                }
                turns
            }
            Err(e) => {
                eprintln!("error: cannot read state database {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        if args.session.is_none() {
            if args.json {
                outln!("[]");
                eprintln!("no sessions recorded yet (no state database at {path})");
            } else {
                outln!("no sessions recorded yet (no state database at {path})");
            }
            return ExitCode::SUCCESS;
        }
        Vec::new()
    };
    let window = args
        .since
        .as_deref()
        .map(|s| format!(" in the last {}", s.trim()))
        .unwrap_or_default();
    if let Some(id) = &args.session {
        let Some(detail) = summary::session_detail(&turns, &pricing, id, since) else {
            eprintln!("error: no turns of session {id:?}{window} in {path}");
            return ExitCode::FAILURE;
        };
        if args.json {
            return print_json(&detail);
        }
        out!("{}", render_session(&detail, now));
        return ExitCode::SUCCESS;
    }
    let sessions = summary::sessions(&turns, &pricing, since);
    if args.json {
        return print_json(&sessions);
    }
    if sessions.is_empty() {
        outln!("no sessions recorded{window} in {path}");
        return ExitCode::SUCCESS;
    }
    out!("{}", render_sessions(&sessions, now, &path, &window));
    ExitCode::SUCCESS
}

/// The money prices of `config`'s `[[pricing]]` entries.
fn pricing_of(config: &Config) -> Pricing {
    Pricing::new(&config.pricing)
}

fn print_json<T: serde::Serialize>(value: &T) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            outln!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot write JSON: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Shown for a token sum no turn reported.
const NOT_REPORTED: &str = "not reported";
/// Shown for a share of nothing reported.
const NA: &str = "n/a";
/// Shown where the provider table has no multipliers for the model.
const NOT_PRICED: &str = "not priced";

fn tokens(n: Option<u64>) -> String {
    n.map_or_else(|| NOT_REPORTED.to_owned(), thousands)
}

/// Input-token equivalents, rounded to whole tokens (negative: a loss).
fn equiv(v: f64) -> String {
    let r = v.round();
    let abs = thousands(r.abs() as u64);
    if r < 0.0 {
        format!("-{abs}")
    } else {
        abs
    }
}

fn share(s: Option<f64>) -> String {
    s.map_or_else(|| NA.to_owned(), |s| format!("{:.1}%", s * 100.0))
}

fn money(m: &MoneySum) -> String {
    format!("{:.2} {}", m.saving, m.currency)
}

/// The saving: equivalents, then money per currency where `[[pricing]]` covers the model.
fn saving(s: &SessionSummary) -> String {
    let mut out = s.saving_equiv.map_or_else(|| NOT_PRICED.to_owned(), equiv);
    if !s.money.is_empty() {
        let m: Vec<String> = s.money.iter().map(money).collect();
        out.push_str(&format!(" ({})", m.join(" + ")));
    }
    out
}

fn billed(s: &SessionSummary) -> String {
    let mut out = s.billed_equiv.map_or_else(|| NOT_PRICED.to_owned(), equiv);
    if !s.money.is_empty() {
        let m: Vec<String> = s
            .money
            .iter()
            .map(|m| format!("{:.2} {}", m.amount, m.currency))
            .collect();
        out.push_str(&format!(" ({})", m.join(" + ")));
    }
    out
}

fn collapses(s: &SessionSummary) -> String {
    match s.collapse_write_tokens {
        Some(w) if s.collapses > 0 => format!("{} ({} written)", s.collapses, thousands(w)),
        _ => s.collapses.to_string(),
    }
}

/// Unix ms as `YYYY-MM-DDTHH:MM:SSZ`.
fn time(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Control characters (a client-chosen session id or model name) shown as spaces.
fn clean(s: &str) -> String {
    s.replace(|c: char| c.is_control(), " ")
}

/// Longest model name a table shows, characters; a longer one is cut, ending in `…` (the
/// client names the model: a 200-character name made every row 300 columns wide). `--json`
/// and the session ids keep every character (an id is what `--session` takes).
const MAX_MODEL_CHARS: usize = 48;

/// A model name for a table cell: [`clean`], at most [`MAX_MODEL_CHARS`] characters.
fn model_cell(s: &str) -> String {
    let cleaned = clean(s);
    if cleaned.chars().count() <= MAX_MODEL_CHARS {
        return cleaned;
    }
    let mut cut: String = cleaned.chars().take(MAX_MODEL_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// One row per session, then its collapses by cause.
fn sessions_table(out: &mut String, sessions: &[SessionSummary], now: i64) {
    let mut t = table(
        &[
            "session",
            "route",
            "model",
            "last",
            "turns",
            "uncached",
            "cache read",
            "cache write",
            "output",
            "read share",
            "collapses",
            "billed input",
            "saving",
        ],
        4,
    );
    for s in sessions {
        let model = if s.models.len() > 1 {
            format!("{} (+{})", model_cell(&s.model), s.models.len() - 1)
        } else {
            model_cell(&s.model)
        };
        t.add_row(vec![
            clean(&s.session),
            clean(&s.route),
            model,
            format!("{} ago", age((now - s.last_ts_ms) / 1000)),
            s.turns.to_string(),
            tokens(s.uncached_input_tokens),
            tokens(s.cache_read_tokens),
            tokens(s.cache_write_tokens),
            tokens(s.output_tokens),
            share(s.cache_read_share),
            collapses(s),
            billed(s),
            saving(s),
        ]);
    }
    push_table(out, &t);
    if sessions.iter().any(|s| !s.by_cause.is_empty()) {
        out.push('\n');
        let mut t = table(
            &["session", "collapse cause", "collapses", "write tokens"],
            2,
        );
        for s in sessions {
            for c in &s.by_cause {
                t.add_row(vec![
                    clean(&s.session),
                    c.cause.as_str().to_owned(),
                    c.collapses.to_string(),
                    tokens(c.write_tokens),
                ]);
            }
        }
        push_table(out, &t);
    }
}

/// What the billed-input columns mean.
const FOOTNOTE: &str = "billed input and saving: input-token equivalents (cache reads and \
writes weighted by the provider's published multipliers; saving = without cache - billed, net \
of the write premium); money where [[pricing]] covers the model";

/// The listing of every session.
fn render_sessions(sessions: &[SessionSummary], now: i64, path: &str, window: &str) -> String {
    let turns: u64 = sessions.iter().map(|s| u64::from(s.turns)).sum();
    let mut out = format!(
        "{} session(s), {} turn(s){window} in {path}\n\n",
        sessions.len(),
        turns
    );
    sessions_table(&mut out, sessions, now);
    out.push('\n');
    out.push_str(FOOTNOTE);
    out.push('\n');
    out
}

/// One session: its row, then one row per turn.
fn render_session(d: &SessionDetail, now: i64) -> String {
    let s = &d.summary;
    let mut out = format!(
        "session {}: {} turn(s), {} to {}\n\n",
        clean(&s.session),
        s.turns,
        time(s.first_ts_ms),
        time(s.last_ts_ms)
    );
    sessions_table(&mut out, std::slice::from_ref(s), now);
    out.push('\n');
    let mut t = table(
        &[
            "turn",
            "time",
            "model",
            "uncached",
            "cache read",
            "cache write",
            "output",
            "collapse at",
            "cause",
            "write tokens",
        ],
        3,
    );
    // Left-align the collapse columns' text.
    for i in [7, 8] {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Left);
        }
    }
    for r in &d.turns {
        let (at, cause, written) = match &r.collapse {
            Some(c) => (
                c.at.clone(),
                c.cause.as_str().to_owned(),
                tokens(c.write_tokens),
            ),
            None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
        };
        t.add_row(vec![
            r.turn.to_string(),
            time(r.ts_ms),
            model_cell(&r.model),
            tokens(r.uncached_input_tokens),
            tokens(r.cache_read_tokens),
            tokens(r.cache_write_tokens),
            tokens(r.output_tokens),
            at,
            cause,
            written,
        ]);
    }
    push_table(&mut out, &t);
    out.push('\n');
    out.push_str(FOOTNOTE);
    out.push('\n');
    out
}

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
    fn number_formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(127_720), "127,720");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(tokens(None), "not reported");
        assert_eq!(equiv(-1234.6), "-1,235");
        assert_eq!(equiv(0.2), "0");
        assert_eq!(share(None), "n/a");
        assert_eq!(share(Some(0.3374)), "33.7%");
        assert_eq!(time(1_764_614_400_000), "2025-12-01T18:40:00Z");
        assert_eq!(clean("a\nb\tc"), "a b c");
        assert_eq!(model_cell("claude-sonnet-4-5"), "claude-sonnet-4-5");
        let long = "m".repeat(200);
        let cell = model_cell(&long);
        assert_eq!(cell.chars().count(), MAX_MODEL_CHARS);
        assert!(cell.ends_with('…') && cell.starts_with("mmm"));
        assert_eq!(model_cell(&"é".repeat(48)), "é".repeat(48));
    }
}
