//! `cachekeeper report`: the per-session table, one session's turns, `--since`, `--json`, and
//! what it says before anything is recorded. The turns are written into a real state file as
//! the proxy stores them (`Kind::Usage` records holding [`TurnRecord`] JSON).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cachekeeper::accounting::record::{TurnRecord, UsageRecord};
use cachekeeper::accounting::{Cause, Collapse};
use cachekeeper::config::Config;
use cachekeeper::state::{Store, StoreOptions};

const MIN_MS: i64 = 60_000;

fn now_ms() -> i64 {
    cachekeeper::accounting::summary::now_ms()
}

struct Env {
    _dir: tempfile::TempDir,
    cfg: PathBuf,
    db: PathBuf,
}

fn env() -> Env {
    env_with("")
}

/// A config whose state file is in a fresh directory, plus `extra` TOML.
fn env_with(extra: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let cfg = dir.path().join("proxy.toml");
    std::fs::write(
        &cfg,
        format!(
            "[state]\npath = {:?}\n\n[[routes]]\nname = \"anthropic\"\nprefix = \"/anthropic\"\nupstream = \"http://127.0.0.1:9\"\n{extra}",
            db.display().to_string()
        ),
    )
    .unwrap();
    Env { _dir: dir, cfg, db }
}

/// Store `turns` in the state file as the proxy does: `Kind::Usage`, scope `""`, key
/// `"{session}\n{turn:08}"`, the record's JSON as the value (schema of `migrations`: the store
/// creates the file, the rows go in with SQLite).
fn write_turns(env: &Env, turns: &[TurnRecord]) {
    let loaded = Config::load(&env.cfg).unwrap();
    let opts = StoreOptions::from_config(&loaded.config.state, &loaded.base_dir);
    let store = Store::open_strict(&opts).unwrap();
    store.flush();
    drop(store);
    let conn = rusqlite::Connection::open(&env.db).unwrap();
    for t in turns {
        let value = serde_json::to_vec(t).unwrap();
        let key = t.key();
        conn.execute(
            "INSERT OR REPLACE INTO records (kind, scope, key, version, value, bytes, written_at)
             VALUES ('usage', '', ?1, 1, ?2, ?3, ?4)",
            rusqlite::params![
                key,
                value,
                i64::try_from(64 + key.len() + value.len()).unwrap(),
                t.ts_ms / 1000
            ],
        )
        .unwrap();
    }
}

fn report(cfg: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
        .arg("report")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn usage(uncached: u64, read: u64, write: u64, output: u64) -> UsageRecord {
    UsageRecord {
        uncached_input_tokens: Some(uncached),
        cache_read_tokens: Some(read),
        cache_write_tokens: Some(write),
        cache_write_5m_tokens: Some(write),
        cache_write_1h_tokens: None,
        output_tokens: Some(output),
    }
}

fn turn(session: &str, n: u32, ts_ms: i64, u: UsageRecord) -> TurnRecord {
    TurnRecord {
        session: session.into(),
        turn: n,
        ts_ms,
        route: "anthropic".into(),
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        streamed: true,
        status: 200,
        usage: u,
        passes: BTreeMap::new(),
        collapse: None,
        idle_ms: None,
    }
}

/// Session `aaaa…`: a cold start, a warm read, an eviction that rewrote message 12 (10 min
/// ago). Session `bbbb…`: a provider that reports no cache figures, 3 hours ago.
fn fixture() -> Vec<TurnRecord> {
    let now = now_ms();
    let a = "aaaaaaaaaaaaaaaa";
    let mut t3 = turn(a, 3, now - 10 * MIN_MS, usage(12, 2_000, 127_720, 310));
    t3.collapse = Some(Collapse {
        at: "messages[12]".into(),
        cause: Cause::Eviction,
        write_tokens: Some(127_720),
    });
    t3.passes = BTreeMap::from([("images_retired".to_owned(), 8)]);
    let b_usage = UsageRecord {
        uncached_input_tokens: Some(900),
        output_tokens: Some(40),
        ..UsageRecord::default()
    };
    let mut b: Vec<TurnRecord> = (1..=2)
        .map(|n| {
            turn(
                "bbbbbbbbbbbbbbbb",
                n,
                now - 181 * MIN_MS + i64::from(n),
                b_usage,
            )
        })
        .collect();
    for t in &mut b {
        t.route = "local".into();
        t.provider = "no-such-provider".into();
        t.model = "llama-local".into();
    }
    let mut all = vec![
        turn(a, 1, now - 12 * MIN_MS, usage(3, 0, 130_000, 200)),
        turn(a, 2, now - 11 * MIN_MS, usage(5, 130_000, 1_500, 250)),
        t3,
    ];
    all.extend(b);
    all
}

fn line_of<'a>(text: &'a str, start: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no line starting with {start:?}:\n{text}"));
    line.split_whitespace().collect()
}

#[test]
fn nothing_recorded_yet() {
    let env = env();
    let out = ok(&report(&env.cfg, &[]));
    assert_eq!(
        out,
        format!(
            "no sessions recorded yet (no state database at {})\n",
            env.db.display()
        )
    );
    assert_eq!(ok(&report(&env.cfg, &["--json"])).trim(), "[]");
    assert!(!env.db.exists(), "report must not create the database");
    let out = report(&env.cfg, &["--session", "x"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn the_report_changes_nothing_and_skips_unreadable_rows() {
    // The failing inputs of a fresh-user pass: a 0-byte file got the store's table (the
    // report opened it read-write), and one row whose value was TEXT failed the whole report.
    let env = env();
    std::fs::write(&env.db, b"").unwrap();
    let out = report(&env.cfg, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a cachekeeper state file"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::metadata(&env.db).unwrap().len(),
        0,
        "left as it was"
    );
    std::fs::remove_file(&env.db).unwrap();
    write_turns(&env, &fixture());
    let conn = rusqlite::Connection::open(&env.db).unwrap();
    conn.execute(
        "INSERT INTO records (kind, scope, key, version, value, bytes, written_at)
         VALUES ('usage', '', 'zz\n00000001', 1, 'not json', 64, 0)",
        [],
    )
    .unwrap();
    let before = std::fs::read(&env.db).unwrap();
    let text = ok(&report(&env.cfg, &[]));
    assert!(text.contains("session"), "{text}");
    assert_eq!(
        std::fs::read(&env.db).unwrap(),
        before,
        "the file is not written"
    );
}

#[test]
fn table_of_sessions_and_collapses_by_cause() {
    let env = env();
    let turns = fixture();
    write_turns(&env, &turns);
    let out = ok(&report(&env.cfg, &[]));
    assert!(
        out.starts_with(&format!(
            "2 session(s), 5 turn(s) in {}\n",
            env.db.display()
        )),
        "{out}"
    );
    // Newest activity first.
    let a_at = out.find("aaaaaaaaaaaaaaaa").unwrap();
    let b_at = out.find("bbbbbbbbbbbbbbbb").unwrap();
    assert!(a_at < b_at, "{out}");

    let a = line_of(&out, "aaaaaaaaaaaaaaaa");
    let want = vec![
        "aaaaaaaaaaaaaaaa",
        "anthropic",
        "claude-sonnet-4-5",
        "10m",
        "ago",
        "3",
        "20",
        "132,000",
        "259,220",
        "760",
        // 132,000 / (20 + 132,000 + 259,220)
        "33.7%",
        "1",
        "(127,720",
        "written)",
        // Anthropic's 0.1x read, 1.25x write: (3 + 162,500) + (5 + 13,000 + 1,875) +
        // (12 + 200 + 159,650) billed-input equivalents, against 391,240 without a cache.
        "337,245",
        "53,995",
    ];
    assert_eq!(a, want, "{out}");

    let b = line_of(&out, "bbbbbbbbbbbbbbbb");
    assert_eq!(
        b,
        [
            "bbbbbbbbbbbbbbbb",
            "local",
            "llama-local",
            "3h",
            "ago",
            "2",
            "1,800",
            "not",
            "reported",
            "not",
            "reported",
            "80",
            "n/a",
            "0",
            "not",
            "priced",
            "not",
            "priced"
        ],
        "{out}"
    );
    // Collapses by cause.
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        lines.contains(&vec!["aaaaaaaaaaaaaaaa", "eviction", "1", "127,720"]),
        "{out}"
    );
    assert!(out.contains("input-token equivalents"), "{out}");
    assert!(out.lines().all(|l| !l.ends_with(' ')), "{out:?}");
}

#[test]
fn one_session_since_and_json() {
    let env = env();
    let turns = fixture();
    write_turns(&env, &turns);

    let out = ok(&report(&env.cfg, &["--session", "aaaaaaaaaaaaaaaa"]));
    assert!(
        out.starts_with("session aaaaaaaaaaaaaaaa: 3 turn(s), "),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let turn_row = |n: &str| {
        rows.iter()
            .find(|r| r.first() == Some(&n) && r.get(2) == Some(&"claude-sonnet-4-5"))
            .unwrap_or_else(|| panic!("no turn {n}:\n{out}"))
            .clone()
    };
    let t1 = turn_row("1");
    assert_eq!(
        t1[3..],
        ["3", "0", "130,000", "200", "-", "-", "-"],
        "{out}"
    );
    let t3 = turn_row("3");
    assert_eq!(
        t3[3..],
        [
            "12",
            "2,000",
            "127,720",
            "310",
            "messages[12]",
            "eviction",
            "127,720"
        ],
        "{out}"
    );

    // --since 1h: only the recent session.
    let out = ok(&report(&env.cfg, &["--since", "1h"]));
    assert!(
        out.starts_with("1 session(s), 3 turn(s) in the last 1h in "),
        "{out}"
    );
    assert!(!out.contains("bbbbbbbbbbbbbbbb"), "{out}");
    let out = ok(&report(&env.cfg, &["--since", "1m"]));
    assert!(
        out.starts_with("no sessions recorded in the last 1m in "),
        "{out}"
    );

    // JSON: the same numbers, "not reported" as null.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&report(&env.cfg, &["--json"]))).unwrap();
    let list = json.as_array().unwrap();
    assert_eq!(list.len(), 2);
    let a = &list[0];
    assert_eq!(a["session"], "aaaaaaaaaaaaaaaa");
    assert_eq!(a["turns"], 3);
    assert_eq!(a["uncached_input_tokens"], 20);
    assert_eq!(a["cache_read_tokens"], 132_000);
    assert_eq!(a["cache_write_tokens"], 259_220);
    assert_eq!(a["output_tokens"], 760);
    let share = a["cache_read_share"].as_f64().unwrap();
    assert!((share - 132_000.0 / 391_240.0).abs() < 1e-9, "{share}");
    assert_eq!(a["collapses"], 1);
    assert_eq!(a["collapse_write_tokens"], 127_720);
    assert_eq!(a["by_cause"][0]["cause"], "eviction");
    let b = &list[1];
    assert_eq!(b["cache_read_tokens"], serde_json::Value::Null);
    assert_eq!(b["cache_read_share"], serde_json::Value::Null);
    assert_eq!(b["billed_equiv"], serde_json::Value::Null);

    let d: serde_json::Value = serde_json::from_str(&ok(&report(
        &env.cfg,
        &["--session", "aaaaaaaaaaaaaaaa", "--json"],
    )))
    .unwrap();
    assert_eq!(d["summary"]["turns"], 3);
    assert_eq!(d["turns"][2]["collapse"]["at"], "messages[12]");
    assert_eq!(d["turns"][2]["passes"]["images_retired"], 8);
    assert_eq!(d["turns"][0]["cache_write_tokens"], 130_000);

    // Errors: an unknown session (1), a bad duration (2).
    let out = report(&env.cfg, &["--session", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no turns of session \"nope\""));
    let out = report(&env.cfg, &["--since", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("examples: 30m, 2h, 7d"));
}

#[test]
fn money_where_pricing_covers_the_model() {
    // $3 / $15 / $0.30 / $3.75 per million: input, output, cache read, 5-minute write.
    let env = env_with(
        "\n[[pricing]]\nmodel = \"claude-sonnet-*\"\ninput_per_mtok = 3.0\noutput_per_mtok = 15.0\ncache_read_per_mtok = 0.3\ncache_write_5m_per_mtok = 3.75\n",
    );
    write_turns(&env, &fixture());
    let out = ok(&report(&env.cfg, &[]));
    let a = line_of(&out, "aaaaaaaaaaaaaaaa");
    // 337,245 x $3/M + 760 output x $15/M = $1.02; saving 53,995 x $3/M = $0.16.
    assert_eq!(
        a[a.len() - 6..],
        ["337,245", "(1.02", "USD)", "53,995", "(0.16", "USD)"],
        "{out}"
    );
    // The other session's model has no entry: no money.
    let b = line_of(&out, "bbbbbbbbbbbbbbbb");
    assert_eq!(
        b[b.len() - 4..],
        ["not", "priced", "not", "priced"],
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&report(&env.cfg, &["--json"]))).unwrap();
    let m = &json[0]["money"][0];
    assert_eq!(m["currency"], "USD");
    assert!(
        (m["amount"].as_f64().unwrap() - 1.023_135).abs() < 1e-9,
        "{m}"
    );
    assert!(
        (m["saving"].as_f64().unwrap() - 0.161_985).abs() < 1e-9,
        "{m}"
    );
    assert_eq!(json[1]["money"], serde_json::json!([]));
}
