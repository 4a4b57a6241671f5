//! `cachekeeper state --config FILE [--kind KIND] [--purge [--older-than DAYS]]`: what the
//! state store holds, or delete it.
//!
//! The listing gives counts, sizes ([`Record::size`](crate::state::Record::size), bytes) and
//! ages per kind and per (kind, upstream host, model); never a record's content, and never a
//! credential scope (only how many distinct ones). `--purge` deletes the records (of
//! `--kind`, written more than `--older-than` days ago) and prints how many; a running proxy
//! notices within [`RELOAD_INTERVAL`] and forgets what it cached of them.
//! `docs/state.md#the-state-command`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_macros,
    reason = "the CLI's home: subcommands print to stdout and stderr, off any request's path"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::table::{push_table, table};

use crate::state::sqlite::RecordInfo;
use crate::state::{now_secs, Backend, Kind, StoreOptions, RELOAD_INTERVAL};

/// Seconds in a day (`--older-than` is in days).
const DAY_SECS: i64 = 86_400;

/// The arguments of `cachekeeper state`.
#[derive(Debug, clap::Args)]
pub struct StateArgs {
    /// Path of proxy.toml (its `[state] path` names the database). Default: ./proxy.toml,
    /// else proxy.toml in the platform's config directory, as for `serve`.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Only records of this kind (verdict, carrier, rejected_signature, ...; an unknown name
    /// lists them all).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Delete the records (every kind, or KIND's) and print how many.
    #[arg(long)]
    pub purge: bool,
    /// With --purge: only records written more than DAYS days ago.
    #[arg(long, value_name = "DAYS", requires = "purge")]
    pub older_than: Option<u32>,
}

/// Run `cachekeeper state`. Exit codes: 0 done; 1 the database cannot be opened or written;
/// 2 a bad config or an unknown kind.
pub fn run(args: &StateArgs) -> ExitCode {
    let kinds = match args.kind.as_deref() {
        None => Kind::ALL.to_vec(),
        Some(name) => match Kind::from_name(name) {
            Some(k) => vec![k],
            None => {
                let valid: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                eprintln!(
                    "error: unknown kind {name:?}; valid kinds: {}",
                    valid.join(", ")
                );
                return ExitCode::from(2);
            }
        },
    };
    let loaded = match crate::cli::find_config(args.config.as_deref())
        .and_then(|path| crate::cli::load_config(&path))
    {
        Ok(l) => l,
        Err(code) => return code,
    };
    let opts = StoreOptions::from_config(&loaded.config.state, &loaded.base_dir);
    let path = opts.location();
    if opts.redis.is_none() && !opts.path.exists() {
        if args.purge {
            outln!("purged 0 records (no state database at {path})");
        } else {
            outln!("no records (no state database at {path} yet)");
        }
        return ExitCode::SUCCESS;
    }
    let mut backend = match opts.open_backend() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot open state database {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.purge {
        return purge(backend.as_mut(), &kinds, args.older_than, &path);
    }
    match backend.list() {
        Ok(all) => {
            let now = now_secs();
            let shown: Vec<RecordInfo> = all
                .into_iter()
                .filter(|r| kinds.contains(&r.key.kind))
                .collect();
            out!("{}", render(&shown, now, &path));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot read state database {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn purge(
    backend: &mut dyn Backend,
    kinds: &[Kind],
    older_than: Option<u32>,
    path: &str,
) -> ExitCode {
    let cutoff = match older_than {
        Some(days) => now_secs().saturating_sub(i64::from(days).saturating_mul(DAY_SECS)),
        None => i64::MAX,
    };
    let mut total = 0;
    let mut per_kind = Vec::new();
    for &kind in kinds {
        match backend.prune(kind, cutoff) {
            Ok(n) => {
                total += n;
                if n > 0 {
                    per_kind.push(format!("{} {n}", kind.name()));
                }
            }
            Err(e) => {
                eprintln!("error: cannot delete from {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let detail = if per_kind.is_empty() {
        String::new()
    } else {
        format!(" ({})", per_kind.join(", "))
    };
    let age = older_than
        .map(|d| format!(" written more than {d} day(s) ago"))
        .unwrap_or_default();
    outln!("purged {total} record(s){age}{detail} from {path}");
    if total > 0 {
        outln!(
            "a running proxy forgets them within {} s",
            RELOAD_INTERVAL.as_secs()
        );
    }
    ExitCode::SUCCESS
}

/// Counts, bytes and ages of a group of records.
#[derive(Debug, Default)]
struct Group {
    records: u64,
    bytes: u64,
    oldest: Option<i64>,
    newest: Option<i64>,
    scopes: BTreeSet<String>,
}

impl Group {
    fn add(&mut self, r: &RecordInfo) {
        self.records += 1;
        self.bytes = self.bytes.saturating_add(r.bytes);
        self.oldest = Some(self.oldest.map_or(r.written_at, |o| o.min(r.written_at)));
        self.newest = Some(self.newest.map_or(r.written_at, |n| n.max(r.written_at)));
        if !r.key.scope.is_empty() {
            self.scopes.insert(r.key.scope.clone());
        }
    }
}

/// The upstream host and model a record is about, read from its key: carriers
/// `"host\nmodel\nfingerprint"`, verdicts JSON `["host","model"]`; `-` for kinds whose keys
/// name neither. Control characters are shown as spaces.
fn host_model(kind: Kind, key: &str) -> (String, String) {
    let clean = |s: &str| s.replace(|c: char| c.is_control(), " ");
    let (host, model) = match kind {
        Kind::Carrier => {
            let mut parts = key.splitn(3, '\n');
            match (parts.next(), parts.next()) {
                (Some(h), Some(m)) => (h.to_owned(), m.to_owned()),
                _ => ("?".to_owned(), "?".to_owned()),
            }
        }
        Kind::Verdict => serde_json::from_str::<(String, String)>(key)
            .unwrap_or_else(|_| ("?".to_owned(), "?".to_owned())),
        Kind::Session
        | Kind::Usage
        | Kind::Watermark
        | Kind::RejectedSignature
        | Kind::Transcode
        | Kind::ResponseLink => ("-".to_owned(), "-".to_owned()),
    };
    (clean(&host), clean(&model))
}

/// An age in seconds as its largest whole unit: `45s`, `12m`, `5h`, `3d`.
pub(crate) fn age(secs: i64) -> String {
    let s = secs.max(0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < DAY_SECS {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / DAY_SECS)
    }
}

/// The listing: a summary line, one row per kind (records, bytes, distinct credential
/// scopes, oldest and newest age), then one row per (kind, host, model).
fn render(records: &[RecordInfo], now: i64, path: &str) -> String {
    if records.is_empty() {
        return format!("no records in {path}\n");
    }
    let mut kinds: BTreeMap<&'static str, Group> = BTreeMap::new();
    let mut by_model: BTreeMap<(&'static str, String, String), Group> = BTreeMap::new();
    let mut all = Group::default();
    for r in records {
        let name = r.key.kind.name();
        kinds.entry(name).or_default().add(r);
        let (host, model) = host_model(r.key.kind, &r.key.key);
        by_model.entry((name, host, model)).or_default().add(r);
        all.add(r);
    }
    let ages = |g: &Group| {
        (
            g.oldest.map(|t| age(now - t)).unwrap_or_default(),
            g.newest.map(|t| age(now - t)).unwrap_or_default(),
        )
    };
    let mut out = format!(
        "{path}: {} record(s), {} bytes, {} credential scope(s)\n\n",
        all.records,
        all.bytes,
        all.scopes.len()
    );
    let mut t = table(
        &["kind", "records", "bytes", "scopes", "oldest", "newest"],
        1,
    );
    for (name, g) in &kinds {
        let (oldest, newest) = ages(g);
        t.add_row(vec![
            (*name).to_owned(),
            g.records.to_string(),
            g.bytes.to_string(),
            g.scopes.len().to_string(),
            oldest,
            newest,
        ]);
    }
    push_table(&mut out, &t);
    out.push('\n');
    let mut t = table(
        &[
            "kind", "host", "model", "records", "bytes", "oldest", "newest",
        ],
        3,
    );
    for ((name, host, model), g) in &by_model {
        let (oldest, newest) = ages(g);
        t.add_row(vec![
            (*name).to_owned(),
            host.clone(),
            model.clone(),
            g.records.to_string(),
            g.bytes.to_string(),
            oldest,
            newest,
        ]);
    }
    push_table(&mut out, &t);
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
    use crate::state::RecordKey;

    fn info(kind: Kind, scope: &str, key: &str, bytes: u64, written_at: i64) -> RecordInfo {
        RecordInfo {
            key: RecordKey {
                kind,
                scope: scope.into(),
                key: key.into(),
            },
            bytes,
            written_at,
        }
    }

    #[test]
    fn listing_counts_and_ages_without_scopes_or_content() {
        let now = 1_800_000_000;
        let scope_a = "0123456789abcdef0123456789abcdef";
        let scope_b = "fedcba9876543210fedcba9876543210";
        let fp = "ab".repeat(32);
        let records = [
            info(
                Kind::Carrier,
                scope_a,
                &format!("api.deepseek.com\ndeepseek-chat\n{fp}"),
                500,
                now - 90,
            ),
            info(
                Kind::Carrier,
                scope_b,
                &format!("api.deepseek.com\ndeepseek-chat\n{fp}"),
                700,
                now - 3 * DAY_SECS,
            ),
            info(
                Kind::Carrier,
                scope_a,
                &format!("api.anthropic.com\nclaude-x\n{fp}"),
                300,
                now - 7200,
            ),
            info(
                Kind::Verdict,
                "",
                r#"["api.mistral.ai","Mistral-Large"]"#,
                200,
                now - 30,
            ),
        ];
        let text = render(&records, now, "/s/state.db");
        assert!(
            text.starts_with("/s/state.db: 4 record(s), 1700 bytes, 2 credential scope(s)\n"),
            "{text}"
        );
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .filter(|r: &Vec<&str>| !r.is_empty())
            .collect();
        assert!(
            rows.contains(&vec!["carrier", "3", "1500", "2", "3d", "1m"]),
            "{text}"
        );
        assert!(
            rows.contains(&vec!["verdict", "1", "200", "0", "30s", "30s"]),
            "{text}"
        );
        assert!(
            rows.contains(&vec![
                "carrier",
                "api.deepseek.com",
                "deepseek-chat",
                "2",
                "1200",
                "3d",
                "1m"
            ]),
            "{text}"
        );
        assert!(
            rows.contains(&vec![
                "carrier",
                "api.anthropic.com",
                "claude-x",
                "1",
                "300",
                "2h",
                "2h"
            ]),
            "{text}"
        );
        assert!(
            rows.contains(&vec![
                "verdict",
                "api.mistral.ai",
                "Mistral-Large",
                "1",
                "200",
                "30s",
                "30s"
            ]),
            "{text}"
        );
        for secret in [scope_a, &scope_a[..8], scope_b, &fp[..8]] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
        assert!(text.lines().all(|l| !l.ends_with(' ')), "{text:?}");
        assert!(text.ends_with("30s\n"), "{text:?}");
        assert_eq!(
            render(&[], now, "/s/state.db"),
            "no records in /s/state.db\n"
        );
    }

    #[test]
    fn keys_that_name_no_host_or_are_malformed() {
        assert_eq!(host_model(Kind::Session, "x"), ("-".into(), "-".into()));
        assert_eq!(
            host_model(Kind::Carrier, "no-newline"),
            ("?".into(), "?".into())
        );
        assert_eq!(
            host_model(Kind::Verdict, "not json"),
            ("?".into(), "?".into())
        );
        assert_eq!(
            host_model(Kind::Verdict, r#"["h","m\tx"]"#),
            ("h".into(), "m x".into())
        );
        assert_eq!(age(-5), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(3599), "59m");
        assert_eq!(age(86_399), "23h");
        assert_eq!(age(86_400 * 40), "40d");
    }
}
