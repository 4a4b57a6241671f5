//! The durable state store: SQLite (rusqlite, bundled) in WAL mode.
//!
//! - One writer thread owns the connection and is fed through a channel, so no request ever
//!   waits on disk.
//! - Everything the hot path reads (the unknown-field verdicts) is kept in memory, loaded at
//!   start-up and updated on every write; a change made by another process (`cachekeeper
//!   verdicts --clear`) is noticed through `PRAGMA data_version` within
//!   [`RELOAD_INTERVAL`].
//! - Versioned schema (`PRAGMA user_version`) with forward-only migrations.
//! - Retention: rows older than `retention_days` are deleted at start-up and daily; the file
//!   is capped at `max_bytes` through `PRAGMA max_page_count`.
//! - Fail open: if the file cannot be opened or written, the store keeps working in memory
//!   and logs a warning; [`Store::is_durable`] says which.
//!
//! Verdicts are keyed by (upstream host, model) and hold field names and the provider's
//! wording, never user content or credentials.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OpenFlags};

/// How often the writer thread checks for changes made by other processes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// Schema migrations; index + 1 is the `user_version` after applying it.
const MIGRATIONS: &[&str] = &[
    // v1: unknown-field verdicts.
    "CREATE TABLE IF NOT EXISTS verdicts (
        host TEXT NOT NULL,
        model TEXT NOT NULL,
        fields TEXT NOT NULL,
        wording TEXT NOT NULL,
        learned_at INTEGER NOT NULL,
        PRIMARY KEY (host, model)
    );",
];

/// Key of a verdict: the upstream host (lowercase, no port) and the model (case kept).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VerdictKey {
    pub host: String,
    pub model: String,
}

/// What a provider told us it does not accept, for one (host, model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Field names to omit (e.g. `reasoning_content`, `reasoning_effort`).
    pub fields: BTreeSet<String>,
    /// The provider's wording that taught us (truncated to [`MAX_WORDING`] chars).
    pub wording: String,
    /// When it was learned, Unix seconds.
    pub learned_at: i64,
}

/// Longest provider wording kept with a verdict, chars.
pub const MAX_WORDING: usize = 500;

/// Settings of [`Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub path: PathBuf,
    pub retention_days: u32,
    pub max_bytes: u64,
}

enum Op {
    Upsert(VerdictKey, Verdict),
    Clear {
        host: String,
        model: Option<String>,
    },
    /// Flush marker: the sender is told once every earlier op is applied.
    Sync(mpsc::Sender<()>),
}

struct Inner {
    verdicts: RwLock<BTreeMap<VerdictKey, Verdict>>,
    durable: AtomicBool,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
    tx: Option<mpsc::Sender<Op>>,
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Open (creating and migrating) the database file. Errors are SQLite's.
pub fn open_connection(path: &Path, max_bytes: u64) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let page_size: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
    let pages = (max_bytes / u64::try_from(page_size.max(512)).unwrap_or(4096)).max(16);
    conn.pragma_update(
        None,
        "max_page_count",
        i64::try_from(pages).unwrap_or(i64::MAX),
    )?;
    migrate(&conn)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate() {
        let target = i64::try_from(i + 1).unwrap_or(i64::MAX);
        if version < target {
            conn.execute_batch(&format!(
                "BEGIN; {sql} PRAGMA user_version = {target}; COMMIT;"
            ))?;
        }
    }
    Ok(())
}

/// Read every verdict from an open connection.
pub fn load_verdicts(conn: &Connection) -> rusqlite::Result<BTreeMap<VerdictKey, Verdict>> {
    let mut stmt = conn.prepare("SELECT host, model, fields, wording, learned_at FROM verdicts")?;
    let rows = stmt.query_map([], |r| {
        let fields: String = r.get(2)?;
        Ok((
            VerdictKey {
                host: r.get(0)?,
                model: r.get(1)?,
            },
            Verdict {
                fields: serde_json::from_str(&fields).unwrap_or_default(),
                wording: r.get(3)?,
                learned_at: r.get(4)?,
            },
        ))
    })?;
    rows.collect()
}

/// Delete verdicts for `host` (all models, or one). Returns the number removed.
pub fn clear_verdicts(
    conn: &Connection,
    host: &str,
    model: Option<&str>,
) -> rusqlite::Result<usize> {
    match model {
        Some(m) => conn.execute(
            "DELETE FROM verdicts WHERE host = ?1 AND model = ?2",
            params![host.to_ascii_lowercase(), m],
        ),
        None => conn.execute(
            "DELETE FROM verdicts WHERE host = ?1",
            params![host.to_ascii_lowercase()],
        ),
    }
}

fn upsert(conn: &Connection, key: &VerdictKey, v: &Verdict) -> rusqlite::Result<()> {
    let fields = serde_json::to_string(&v.fields).unwrap_or_else(|_| "[]".into());
    conn.execute(
        "INSERT INTO verdicts (host, model, fields, wording, learned_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(host, model) DO UPDATE SET fields = excluded.fields,
            wording = excluded.wording, learned_at = excluded.learned_at",
        params![key.host, key.model, fields, v.wording, v.learned_at],
    )?;
    Ok(())
}

fn prune(conn: &Connection, retention_days: u32) -> rusqlite::Result<usize> {
    let cutoff = now_secs() - i64::from(retention_days) * 86_400;
    conn.execute(
        "DELETE FROM verdicts WHERE learned_at < ?1",
        params![cutoff],
    )
}

impl Store {
    /// A store that lives in memory only (tests, or when the file is unusable).
    pub fn in_memory() -> Self {
        Self {
            inner: Arc::new(Inner {
                verdicts: RwLock::new(BTreeMap::new()),
                durable: AtomicBool::new(false),
            }),
            tx: None,
        }
    }

    /// Open the store at `opts.path`. Never fails: an unusable file gives an in-memory store
    /// and a warning.
    pub fn open(opts: &StoreOptions) -> Self {
        let conn = open_connection(&opts.path, opts.max_bytes).and_then(|c| {
            if let Err(e) = prune(&c, opts.retention_days) {
                tracing::warn!(target: "cachekeeper::state", error = %e, "could not prune old state");
            }
            let v = load_verdicts(&c)?;
            Ok((c, v))
        });
        match conn {
            Ok((conn, verdicts)) => Self::with_writer(conn, verdicts, opts.retention_days),
            Err(e) => {
                tracing::warn!(
                    target: "cachekeeper::state",
                    path = %opts.path.display(),
                    error = %e,
                    "cannot open the state store; running in memory (verdicts will not survive a restart)"
                );
                Self::in_memory()
            }
        }
    }

    /// Open read-only: used by tests to simulate a store whose writes fail.
    pub fn open_read_only(path: &Path) -> Self {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| load_verdicts(&c).map(|v| (c, v)));
        match conn {
            Ok((conn, verdicts)) => Self::with_writer(conn, verdicts, 0),
            Err(_) => Self::in_memory(),
        }
    }

    /// A durable store over an open connection, with its writer thread.
    fn with_writer(
        conn: Connection,
        verdicts: BTreeMap<VerdictKey, Verdict>,
        retention_days: u32,
    ) -> Self {
        let store = Self {
            inner: Arc::new(Inner {
                verdicts: RwLock::new(verdicts),
                durable: AtomicBool::new(true),
            }),
            tx: None,
        };
        store.start_writer(conn, retention_days)
    }

    fn start_writer(mut self, conn: Connection, retention_days: u32) -> Self {
        let (tx, rx) = mpsc::channel::<Op>();
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new()
            .name("cachekeeper-state".into())
            .spawn(move || writer_loop(conn, rx, inner, retention_days));
        match spawned {
            Ok(_) => self.tx = Some(tx),
            Err(e) => {
                tracing::warn!(target: "cachekeeper::state", error = %e, "cannot start the state writer; running in memory");
                self.inner.durable.store(false, Ordering::Relaxed);
            }
        }
        self
    }

    /// True while writes reach the file.
    pub fn is_durable(&self) -> bool {
        self.tx.is_some() && self.inner.durable.load(Ordering::Relaxed)
    }

    /// The verdict for (host, model), if any. Memory only; never touches disk.
    pub fn verdict(&self, host: &str, model: &str) -> Option<Verdict> {
        let key = VerdictKey {
            host: host.to_ascii_lowercase(),
            model: model.to_owned(),
        };
        self.inner
            .verdicts
            .read()
            .ok()
            .and_then(|m| m.get(&key).cloned())
    }

    /// Every verdict, sorted by key.
    pub fn verdicts(&self) -> Vec<(VerdictKey, Verdict)> {
        self.inner
            .verdicts
            .read()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Add `fields` to the verdict for (host, model). Returns the fields that were new (empty:
    /// nothing learned). Memory is updated at once; the file by the writer thread.
    pub fn learn(
        &self,
        host: &str,
        model: &str,
        fields: &BTreeSet<String>,
        wording: &str,
    ) -> BTreeSet<String> {
        let key = VerdictKey {
            host: host.to_ascii_lowercase(),
            model: model.to_owned(),
        };
        let Ok(mut map) = self.inner.verdicts.write() else {
            return BTreeSet::new();
        };
        let entry = map.entry(key.clone()).or_insert_with(|| Verdict {
            fields: BTreeSet::new(),
            wording: String::new(),
            learned_at: now_secs(),
        });
        let new: BTreeSet<String> = fields.difference(&entry.fields).cloned().collect();
        if new.is_empty() {
            return new;
        }
        entry.fields.extend(new.iter().cloned());
        entry.wording = wording.chars().take(MAX_WORDING).collect();
        entry.learned_at = now_secs();
        let snapshot = entry.clone();
        drop(map);
        if let Some(tx) = &self.tx {
            let _ = tx.send(Op::Upsert(key, snapshot));
        }
        new
    }

    /// Remove verdicts for `host` (one model, or all).
    pub fn clear(&self, host: &str, model: Option<&str>) {
        let host_l = host.to_ascii_lowercase();
        if let Ok(mut map) = self.inner.verdicts.write() {
            map.retain(|k, _| !(k.host == host_l && model.is_none_or(|m| k.model == m)));
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(Op::Clear {
                host: host_l,
                model: model.map(str::to_owned),
            });
        }
    }

    /// Wait until every write sent so far has been applied (tests, shutdown).
    pub fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (done_tx, done_rx) = mpsc::channel();
            if tx.send(Op::Sync(done_tx)).is_ok() {
                let _ = done_rx.recv_timeout(Duration::from_secs(10));
            }
        }
    }
}

impl crate::rewrite::VerdictLookup for Store {
    fn omit(&self, host: &str, model: &str) -> BTreeSet<String> {
        self.verdict(host, model)
            .map(|v| v.fields)
            .unwrap_or_default()
    }
}

fn writer_loop(conn: Connection, rx: mpsc::Receiver<Op>, inner: Arc<Inner>, retention_days: u32) {
    let mut data_version: i64 = conn
        .pragma_query_value(None, "data_version", |r| r.get(0))
        .unwrap_or(0);
    let mut last_prune = std::time::Instant::now();
    loop {
        match rx.recv_timeout(RELOAD_INTERVAL) {
            Ok(op) => {
                let res = match &op {
                    Op::Upsert(k, v) => upsert(&conn, k, v),
                    Op::Clear { host, model } => {
                        clear_verdicts(&conn, host, model.as_deref()).map(|_| ())
                    }
                    Op::Sync(done) => {
                        let _ = done.send(());
                        Ok(())
                    }
                };
                if let Err(e) = res {
                    if inner.durable.swap(false, Ordering::Relaxed) {
                        tracing::warn!(target: "cachekeeper::state", error = %e, "state store write failed; continuing in memory");
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Another process (the CLI) may have changed the file.
                let v: i64 = conn
                    .pragma_query_value(None, "data_version", |r| r.get(0))
                    .unwrap_or(data_version);
                if v != data_version {
                    data_version = v;
                    if let (Ok(fresh), Ok(mut map)) = (load_verdicts(&conn), inner.verdicts.write())
                    {
                        *map = fresh;
                    }
                }
                if retention_days > 0 && last_prune.elapsed() > Duration::from_secs(86_400) {
                    last_prune = std::time::Instant::now();
                    let _ = prune(&conn, retention_days);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(f: &[&str]) -> BTreeSet<String> {
        f.iter().map(|s| (*s).to_owned()).collect()
    }

    fn opts(dir: &Path) -> StoreOptions {
        StoreOptions {
            path: dir.join("state.db"),
            retention_days: 30,
            max_bytes: 1 << 30,
        }
    }

    #[test]
    fn verdicts_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&opts(dir.path()));
        assert!(s.is_durable());
        let new = s.learn(
            "API.Mistral.ai",
            "Mistral-Large",
            &fields(&["reasoning_content"]),
            "Extra inputs are not permitted",
        );
        assert_eq!(new, fields(&["reasoning_content"]));
        // Learning the same again teaches nothing.
        assert!(s
            .learn(
                "api.mistral.ai",
                "Mistral-Large",
                &fields(&["reasoning_content"]),
                "x"
            )
            .is_empty());
        s.flush();
        drop(s);
        let s = Store::open(&opts(dir.path()));
        let v = s.verdict("api.mistral.ai", "Mistral-Large").unwrap();
        assert_eq!(v.fields, fields(&["reasoning_content"]));
        assert_eq!(v.wording, "Extra inputs are not permitted");
        // Model case is kept.
        assert!(s.verdict("api.mistral.ai", "mistral-large").is_none());
    }

    #[test]
    fn clear_from_another_connection_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let s = Store::open(&o);
        s.learn("api.groq.com", "m", &fields(&["reasoning"]), "w");
        s.flush();
        let other = open_connection(&o.path, o.max_bytes).unwrap();
        assert_eq!(clear_verdicts(&other, "api.groq.com", None).unwrap(), 1);
        let deadline = std::time::Instant::now() + RELOAD_INTERVAL * 3;
        while s.verdict("api.groq.com", "m").is_some() {
            assert!(std::time::Instant::now() < deadline, "change not noticed");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[test]
    fn unusable_path_runs_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // A directory cannot be opened as a database file.
        let s = Store::open(&StoreOptions {
            path: dir.path().to_owned(),
            retention_days: 30,
            max_bytes: 1 << 30,
        });
        assert!(!s.is_durable());
        s.learn("h", "m", &fields(&["x"]), "w");
        assert!(s.verdict("h", "m").is_some());
    }

    #[test]
    fn failing_writes_keep_working_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        drop(open_connection(&o.path, o.max_bytes).unwrap());
        let s = Store::open_read_only(&o.path);
        s.learn("h", "m", &fields(&["x"]), "w");
        s.flush();
        assert!(!s.is_durable());
        assert!(s.verdict("h", "m").is_some());
    }

    #[test]
    fn full_disk_keeps_working_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let s = Store::open(&StoreOptions {
            max_bytes: 1, // clamped to 16 pages: fills up quickly
            ..o
        });
        let big = "w".repeat(MAX_WORDING);
        for i in 0..2000 {
            s.learn(
                "h",
                &format!("model-{i}-{}", "x".repeat(200)),
                &fields(&["f"]),
                &big,
            );
        }
        s.flush();
        assert!(!s.is_durable());
        assert!(s
            .verdict("h", &format!("model-1999-{}", "x".repeat(200)))
            .is_some());
    }
}
