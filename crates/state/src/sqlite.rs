//! The embedded default [`Backend`]: one SQLite file (rusqlite, bundled) in WAL mode.
//!
//! - Versioned schema (`PRAGMA user_version`) with forward-only migrations ([`MIGRATIONS`]);
//!   v2 moved the v1 `verdicts` table into `records`, namespacing each field name.
//! - Changes by another process are seen through `PRAGMA data_version`.
//! - The file is capped at [`FILE_CAP_FACTOR`] × `max_bytes` (`PRAGMA max_page_count`): the
//!   store evicts by record size first, and this is the backstop for what records do not
//!   count (indexes, free pages). A full file fails the write; the store keeps the record in
//!   memory.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use super::verdicts::{Field, FieldSet, Verdict, VerdictKey};
use super::{Backend, Kind, Record, RecordKey, StateError};

/// The file may grow to this many times `max_bytes` (see the module doc).
pub(crate) const FILE_CAP_FACTOR: u64 = 2;

/// Fewest pages the file is allowed, whatever `max_bytes` says (16 pages of 4 KiB).
const MIN_PAGES: u64 = 16;

/// How long a write waits for another process's lock (the CLI), ms.
const BUSY_TIMEOUT_MS: u64 = 5000;

type Migration = fn(&Connection) -> rusqlite::Result<()>;

/// Schema migrations; index + 1 is the `user_version` after applying it.
pub(crate) const MIGRATIONS: &[Migration] = &[v1_verdicts, v2_records];

/// v1: unknown-field verdicts, one row per (host, model), fields as a flat JSON list.
fn v1_verdicts(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS verdicts (
            host TEXT NOT NULL,
            model TEXT NOT NULL,
            fields TEXT NOT NULL,
            wording TEXT NOT NULL,
            learned_at INTEGER NOT NULL,
            PRIMARY KEY (host, model)
        );",
    )
}

/// v2: one `records` table for every kind; each v1 verdict becomes a verdict record whose
/// flat field names are namespaced ([`Field::from_flat`]: a carrier name is a message field,
/// any other name a top-level parameter).
fn v2_records(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE records (
            kind TEXT NOT NULL,
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            version INTEGER NOT NULL,
            value BLOB NOT NULL,
            bytes INTEGER NOT NULL,
            written_at INTEGER NOT NULL,
            PRIMARY KEY (kind, scope, key)
        );
        CREATE INDEX records_by_age ON records (written_at, kind, scope, key);",
    )?;
    let old: Vec<(String, String, String, String, i64)> = {
        let mut stmt =
            conn.prepare("SELECT host, model, fields, wording, learned_at FROM verdicts")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (host, model, fields, wording, learned_at) in old {
        let flat: Vec<String> = serde_json::from_str(&fields).unwrap_or_default();
        let verdict = Verdict {
            fields: flat
                .iter()
                .map(|f| Field::from_flat(f))
                .collect::<FieldSet>(),
            wording,
            learned_at,
        };
        put_row(conn, &verdict.to_record(&VerdictKey::new(&host, &model)))?;
    }
    conn.execute_batch("DROP TABLE verdicts;")
}

fn put_row(conn: &Connection, rec: &Record) -> rusqlite::Result<()> {
    // Prepared once per connection (rusqlite's statement cache): parsing the SQL cost more
    // than the insert.
    conn.prepare_cached(
        "INSERT INTO records (kind, scope, key, version, value, bytes, written_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(kind, scope, key) DO UPDATE SET version = excluded.version,
            value = excluded.value, bytes = excluded.bytes, written_at = excluded.written_at",
    )?
    .execute(params![
        rec.key.kind.name(),
        rec.key.scope,
        rec.key.key,
        rec.version,
        rec.value,
        i64::try_from(rec.size()).unwrap_or(i64::MAX),
        rec.written_at
    ])?;
    Ok(())
}

/// The tables of another program's database, comma-separated: a file at `user_version` 0
/// (no cachekeeper migration ran) that holds tables and none of cachekeeper's (`records`, or
/// the v1 `verdicts`). `None` for a new or empty file and for a cachekeeper file. The failing
/// input of a fresh-user pass: `cachekeeper state` on another app's SQLite file (one table,
/// `foo`) added cachekeeper's tables and switched it to WAL.
fn foreign_tables(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version != 0 {
        return Ok(None);
    }
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    let ours = names.iter().any(|n| n == "records" || n == "verdicts");
    Ok((!names.is_empty() && !ours).then(|| names.join(", ")))
}

/// Apply every migration past the file's `user_version`, each in its own transaction.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, step) in MIGRATIONS.iter().enumerate() {
        let target = i64::try_from(i + 1).unwrap_or(i64::MAX);
        if version < target {
            conn.execute_batch("BEGIN")?;
            let done = step(conn).and_then(|()| {
                conn.pragma_update(None, "user_version", target)?;
                conn.execute_batch("COMMIT")
            });
            if let Err(e) = done {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A stored record without its value ([`SqliteBackend::list`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordInfo {
    pub key: RecordKey,
    /// [`Record::size`], bytes.
    pub bytes: u64,
    /// When it was written, Unix seconds.
    pub written_at: i64,
}

/// Records in a SQLite file.
pub struct SqliteBackend {
    conn: Connection,
    data_version: i64,
}

impl SqliteBackend {
    /// Open (creating and migrating) the file at `path`, capped at [`FILE_CAP_FACTOR`] ×
    /// `max_bytes`. Errors are SQLite's, and [`StateError::Foreign`] for another program's
    /// database ([`foreign_tables`]), which is left exactly as it was.
    pub fn open(path: &Path, max_bytes: u64) -> Result<Self, StateError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
        // Before anything writes (WAL mode rewrites the header, the migrations add tables).
        if let Some(tables) = foreign_tables(&conn)? {
            return Err(StateError::Foreign(format!(
                "not a cachekeeper state file: it holds other tables ({tables}) and no \
                 cachekeeper schema; left unchanged (point [state] path at a file of its own)"
            )));
        }
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let page_size: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
        let page_size = u64::try_from(page_size.max(512)).unwrap_or(4096);
        let pages = (max_bytes.saturating_mul(FILE_CAP_FACTOR) / page_size).max(MIN_PAGES);
        conn.pragma_update(
            None,
            "max_page_count",
            i64::try_from(pages).unwrap_or(i64::MAX),
        )?;
        migrate(&conn)?;
        Self::over(conn)
    }

    /// A private in-memory SQLite database (tests: the same SQL without a file).
    #[cfg(test)]
    pub(crate) fn open_in_memory() -> Result<Self, StateError> {
        let conn = Connection::open_in_memory()?;
        migrate(&conn)?;
        Self::over(conn)
    }

    /// Open an existing, migrated file read-only (`cachekeeper report`, which must change
    /// nothing; tests: a store whose writes fail). Errors: the file cannot be opened, or it
    /// holds no `records` table (not a cachekeeper state file, or one from before v2 that the
    /// proxy migrates when it next opens it).
    pub(crate) fn open_read_only(path: &Path) -> Result<Self, StateError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let tables: i64 = conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'records'",
            [],
            |r| r.get(0),
        )?;
        if tables == 0 {
            return Err(StateError::Foreign(
                "no records table: not a cachekeeper state file (or one the proxy has not \
                 migrated yet: start the proxy once)"
                    .to_owned(),
            ));
        }
        Self::over(conn)
    }

    /// Every record's key, size ([`Record::size`], bytes) and `written_at` (Unix seconds),
    /// without its value, sorted by kind name, scope and key (`cachekeeper state`). Rows of
    /// a kind this build does not know are skipped.
    pub(crate) fn list(&self) -> Result<Vec<RecordInfo>, StateError> {
        let mut stmt = self.conn.prepare(
            "SELECT kind, scope, key, bytes, written_at FROM records ORDER BY kind, scope, key",
        )?;
        let rows = stmt.query_map([], |r| {
            let name: String = r.get(0)?;
            let bytes: i64 = r.get(3)?;
            Ok((
                name,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                u64::try_from(bytes).unwrap_or(0),
                r.get::<_, i64>(4)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, scope, key, bytes, written_at) = row?;
            if let Some(kind) = Kind::from_name(&name) {
                out.push(RecordInfo {
                    key: RecordKey { kind, scope, key },
                    bytes,
                    written_at,
                });
            }
        }
        Ok(out)
    }

    fn over(conn: Connection) -> Result<Self, StateError> {
        let data_version = conn.pragma_query_value(None, "data_version", |r| r.get(0))?;
        Ok(Self { conn, data_version })
    }
}

/// A record's `value` column as bytes: a BLOB as written, or TEXT (a row another program wrote
/// as a string; the failing input: one such row made `cachekeeper report` fail outright).
fn value_bytes(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Vec<u8>> {
    use rusqlite::types::ValueRef;
    match r.get_ref(idx)? {
        ValueRef::Blob(b) => Ok(b.to_vec()),
        ValueRef::Text(t) => Ok(t.to_vec()),
        other => Err(rusqlite::Error::InvalidColumnType(
            idx,
            "value".to_owned(),
            other.data_type(),
        )),
    }
}

fn kind_of(name: &str) -> rusqlite::Result<Kind> {
    Kind::from_name(name).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            Box::new(StateError::Malformed(format!("unknown kind {name:?}"))),
        )
    })
}

impl Backend for SqliteBackend {
    fn is_durable(&self) -> bool {
        true
    }

    fn put(&mut self, rec: &Record) -> Result<(), StateError> {
        Ok(put_row(&self.conn, rec)?)
    }

    fn put_all(&mut self, recs: &[Record]) -> Result<(), StateError> {
        if let [one] = recs {
            return self.put(one);
        }
        let tx = self.conn.unchecked_transaction()?;
        for rec in recs {
            put_row(&tx, rec)?;
        }
        Ok(tx.commit()?)
    }

    fn get(&mut self, key: &RecordKey) -> Result<Option<Record>, StateError> {
        let row = self
            .conn
            .query_row(
                "SELECT version, value, written_at FROM records
                 WHERE kind = ?1 AND scope = ?2 AND key = ?3",
                params![key.kind.name(), key.scope, key.key],
                |r| {
                    Ok(Record {
                        key: key.clone(),
                        version: r.get(0)?,
                        value: value_bytes(r, 1)?,
                        written_at: r.get(2)?,
                    })
                },
            )
            .optional()?;
        Ok(row)
    }

    fn delete(&mut self, key: &RecordKey) -> Result<bool, StateError> {
        let n = self.conn.execute(
            "DELETE FROM records WHERE kind = ?1 AND scope = ?2 AND key = ?3",
            params![key.kind.name(), key.scope, key.key],
        )?;
        Ok(n > 0)
    }

    fn scan(&mut self, kind: Kind) -> Result<Vec<Record>, StateError> {
        let mut stmt = self.conn.prepare(
            "SELECT scope, key, version, value, written_at FROM records
             WHERE kind = ?1 ORDER BY scope, key",
        )?;
        let rows = stmt.query_map(params![kind.name()], |r| {
            Ok(Record {
                key: RecordKey {
                    kind,
                    scope: r.get(0)?,
                    key: r.get(1)?,
                },
                version: r.get(2)?,
                value: value_bytes(r, 3)?,
                written_at: r.get(4)?,
            })
        })?;
        // A row another program wrote with a wrong type (a NULL value, a string version) is
        // skipped, not the reason every other record is unreadable.
        let mut out = Vec::new();
        let mut skipped = 0usize;
        for row in rows {
            match row {
                Ok(rec) => out.push(rec),
                Err(_) => skipped += 1,
            }
        }
        if skipped > 0 {
            tracing::warn!(target: "cachekeeper::state", kind = kind.name(), skipped, "state: skipped rows of the wrong type");
        }
        Ok(out)
    }

    fn total_bytes(&mut self) -> Result<u64, StateError> {
        let n: i64 =
            self.conn
                .query_row("SELECT COALESCE(SUM(bytes), 0) FROM records", [], |r| {
                    r.get(0)
                })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn oldest(
        &mut self,
        kinds: &[Kind],
        limit: usize,
    ) -> Result<Vec<(RecordKey, u64)>, StateError> {
        if kinds.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; kinds.len()].join(",");
        let sql = format!(
            "SELECT kind, scope, key, bytes FROM records WHERE kind IN ({marks})
             ORDER BY written_at, kind, scope, key LIMIT {limit}"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(kinds.iter().map(|k| k.name())), |r| {
            let name: String = r.get(0)?;
            let bytes: i64 = r.get(3)?;
            Ok((
                RecordKey {
                    kind: kind_of(&name)?,
                    scope: r.get(1)?,
                    key: r.get(2)?,
                },
                u64::try_from(bytes).unwrap_or(0),
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn prune(&mut self, kind: Kind, cutoff: i64) -> Result<usize, StateError> {
        Ok(self.conn.execute(
            "DELETE FROM records WHERE kind = ?1 AND written_at < ?2",
            params![kind.name(), cutoff],
        )?)
    }

    fn location(&self) -> String {
        self.conn.path().unwrap_or(":memory:").to_owned()
    }

    fn inject_fault(&mut self, fault: super::Fault) -> Result<i64, StateError> {
        let (name, value) = match fault {
            super::Fault::ReadOnly(on) => ("query_only", i64::from(on)),
            super::Fault::MaxPageCount(pages) => {
                ("max_page_count", i64::try_from(pages).unwrap_or(i64::MAX))
            }
            // The writer's own (`writer_loop`).
            super::Fault::StallMs(_) => {
                return Err(StateError::Malformed("a stall is the writer's".to_owned()))
            }
        };
        self.conn.pragma_update(None, name, value)?;
        Ok(self.conn.pragma_query_value(None, name, |r| r.get(0))?)
    }

    fn list(&mut self) -> Result<Vec<RecordInfo>, StateError> {
        // The inherent query: no values read.
        SqliteBackend::list(self)
    }

    fn changed_elsewhere(&mut self) -> Result<bool, StateError> {
        let v: i64 = self
            .conn
            .pragma_query_value(None, "data_version", |r| r.get(0))?;
        let changed = v != self.data_version;
        self.data_version = v;
        Ok(changed)
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::super::{now_secs, Store, StoreOptions, DEFAULT_CACHE_BYTES, RELOAD_INTERVAL};
    use super::*;

    fn opts(dir: &Path) -> StoreOptions {
        StoreOptions {
            path: dir.join("state.db"),
            redis: None,
            retention_days: 30,
            max_bytes: 1 << 30,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    fn rc() -> FieldSet {
        FieldSet::from([Field::message("reasoning_content")])
    }

    #[test]
    fn a_text_typed_or_null_value_row_does_not_hide_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let mut b = SqliteBackend::open(&o.path, 1 << 30).unwrap();
        let rec = |key: &str| Record::new(Kind::Usage, "", key, br#"{"turn":1}"#.to_vec());
        b.put(&rec("a")).unwrap();
        b.put(&rec("b")).unwrap();
        // Another program wrote one value as TEXT and one as NULL (the failing input: a single
        // such row made `cachekeeper report` fail).
        b.conn
            .execute(
                "UPDATE records SET value = CAST(value AS TEXT) WHERE key = 'a'",
                [],
            )
            .unwrap();
        b.put(&rec("c")).unwrap();
        b.conn
            .execute("UPDATE records SET value = NULL WHERE key = 'c'", [])
            .unwrap_or(0);
        let got = b.scan(Kind::Usage).unwrap();
        let keys: Vec<&str> = got.iter().map(|r| r.key.key.as_str()).collect();
        assert!(keys.contains(&"a") && keys.contains(&"b"), "{keys:?}");
        assert_eq!(got[0].value, br#"{"turn":1}"#.to_vec());
        let a = b
            .get(&RecordKey {
                kind: Kind::Usage,
                scope: String::new(),
                key: "a".into(),
            })
            .unwrap()
            .unwrap();
        assert_eq!(a.value, br#"{"turn":1}"#.to_vec());
    }

    #[test]
    fn verdicts_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&opts(dir.path()));
        assert!(s.is_durable());
        let new = s.verdicts().learn(
            "API.Mistral.ai",
            "Mistral-Large",
            &rc(),
            "Extra inputs are not permitted",
        );
        assert_eq!(new, rc());
        s.flush();
        drop(s);
        let s = Store::open(&opts(dir.path()));
        let v = s.verdicts().get("api.mistral.ai", "Mistral-Large").unwrap();
        assert_eq!(v.fields, rc());
        assert_eq!(v.wording, "Extra inputs are not permitted");
        assert!(s
            .verdicts()
            .get("api.mistral.ai", "mistral-large")
            .is_none());
    }

    #[test]
    fn clear_from_another_process_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let s = Store::open(&o);
        s.verdicts().learn(
            "api.groq.com",
            "m",
            &FieldSet::from([Field::message("reasoning")]),
            "w",
        );
        s.flush();
        // The CLI opens its own store on the same file.
        let cli = Store::open_strict(&o).unwrap();
        assert_eq!(cli.verdicts().clear("api.groq.com", None), 1);
        cli.flush();
        let deadline = std::time::Instant::now() + RELOAD_INTERVAL * 3;
        while s.verdicts().get("api.groq.com", "m").is_some() {
            assert!(std::time::Instant::now() < deadline, "change not noticed");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[test]
    fn another_programs_database_is_refused_and_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("CREATE TABLE foo (x INTEGER); INSERT INTO foo VALUES (1);")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = SqliteBackend::open(&path, 1 << 30)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not a cachekeeper state file"), "{err}");
        assert!(err.contains("(foo)"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "not a byte changed");
        assert!(!dir.path().join("other.db-wal").exists());
        // The proxy runs in memory instead (fail open); the strict open the CLI uses errs.
        let o = StoreOptions {
            path: path.clone(),
            ..opts(dir.path())
        };
        assert!(!Store::open(&o).is_durable());
        assert!(Store::open_strict(&o).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), before);
        // A new file, an empty one and a cachekeeper file open as before.
        let fresh = dir.path().join("new.db");
        SqliteBackend::open(&fresh, 1 << 30).unwrap();
        SqliteBackend::open(&fresh, 1 << 30).unwrap();
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        SqliteBackend::open(&empty, 1 << 30).unwrap();
    }

    #[test]
    fn unusable_path_runs_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // A directory cannot be opened as a database file.
        let s = Store::open(&StoreOptions {
            path: dir.path().to_owned(),
            ..opts(dir.path())
        });
        assert!(!s.is_durable());
        s.verdicts().learn("h", "m", &rc(), "w");
        assert!(s.verdicts().get("h", "m").is_some());
        assert!(Store::open_strict(&StoreOptions {
            path: dir.path().to_owned(),
            ..opts(dir.path())
        })
        .is_err());
    }

    #[test]
    fn failing_writes_keep_working_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        drop(SqliteBackend::open(&o.path, o.max_bytes).unwrap());
        let b = SqliteBackend::open_read_only(&o.path).unwrap();
        let s = Store::with_backend(Box::new(b), 30, o.max_bytes, o.cache_bytes);
        assert!(s.is_durable());
        s.verdicts().learn("h", "m", &rc(), "w");
        s.flush();
        assert!(!s.is_durable());
        assert!(s.verdicts().get("h", "m").is_some());
    }

    #[test]
    fn full_file_keeps_working_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&StoreOptions {
            max_bytes: 1, // clamped to 16 pages: fills up with verdicts, which are never evicted
            ..opts(dir.path())
        });
        let big = "w".repeat(super::super::MAX_WORDING_CHARS);
        let model = |i: usize| format!("model-{i}-{}", "x".repeat(200));
        for i in 0..2000 {
            s.verdicts().learn("h", &model(i), &rc(), &big);
        }
        s.flush();
        assert!(!s.is_durable());
        assert!(s.verdicts().get("h", &model(1999)).is_some());
    }

    /// The v1 schema exactly as the first release created it.
    const V1_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS verdicts (
        host TEXT NOT NULL,
        model TEXT NOT NULL,
        fields TEXT NOT NULL,
        wording TEXT NOT NULL,
        learned_at INTEGER NOT NULL,
        PRIMARY KEY (host, model)
    );
    PRAGMA user_version = 1;";

    #[test]
    fn v1_file_migrates_flat_names_into_namespaced_verdicts() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let learned = now_secs() - 3600;
        {
            let conn = Connection::open(&o.path).unwrap();
            conn.execute_batch(V1_SCHEMA).unwrap();
            for (host, model, fields, wording) in [
                (
                    "api.mistral.ai",
                    "Mistral-Large",
                    r#"["reasoning","reasoning_content","reasoning_details"]"#,
                    "body.messages.1.assistant.reasoning_content: Extra inputs are not permitted",
                ),
                (
                    "api.openai.com",
                    "gpt-4.1",
                    r#"["reasoning_effort","store"]"#,
                    "Unrecognized request argument supplied: reasoning_effort",
                ),
                (
                    "api.z.ai",
                    "glm-4.6",
                    r#"["thinking.clear_thinking","extra_content","reasoning_opaque"]"#,
                    "Extra inputs are not permitted",
                ),
                (
                    "127.0.0.1",
                    "text-only",
                    r#"["image_input"]"#,
                    "does not support images",
                ),
            ] {
                conn.execute(
                    "INSERT INTO verdicts VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![host, model, fields, wording, learned],
                )
                .unwrap();
            }
        }
        let s = Store::open(&o);
        assert!(s.is_durable());
        let got: Vec<(String, String, String, i64)> = s
            .verdicts()
            .all()
            .into_iter()
            .map(|(k, v)| (k.host, k.model, v.fields.joined(), v.learned_at))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "127.0.0.1".into(),
                    "text-only".into(),
                    "model:image_input".into(),
                    learned
                ),
                (
                    "api.mistral.ai".into(),
                    "Mistral-Large".into(),
                    "message:reasoning,message:reasoning_content,message:reasoning_details".into(),
                    learned
                ),
                (
                    "api.openai.com".into(),
                    "gpt-4.1".into(),
                    "param:reasoning_effort,param:store".into(),
                    learned
                ),
                (
                    "api.z.ai".into(),
                    "glm-4.6".into(),
                    "param:thinking.clear_thinking,message:extra_content,message:reasoning_opaque"
                        .into(),
                    learned
                ),
            ]
        );
        let v = s.verdicts().get("api.mistral.ai", "Mistral-Large").unwrap();
        assert_eq!(
            v.wording,
            "body.messages.1.assistant.reasoning_content: Extra inputs are not permitted"
        );
        drop(s);
        let conn = Connection::open(&o.path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, 2);
        let old: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'verdicts'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(old, 0, "the v1 table is gone");
        // Opening again does not migrate twice.
        drop(conn);
        let s = Store::open(&o);
        assert_eq!(s.verdicts().all().len(), 4);
    }
}
