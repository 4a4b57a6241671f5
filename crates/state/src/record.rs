//! The storage interface: what a record is ([`Kind`] with its [`Policy`], [`RecordKey`],
//! [`Record`]), what a backend does ([`Backend`]), its errors ([`StateError`]) and the changes
//! a watching backend announces ([`Change`]). The store (the crate root), its writer
//! ([`crate::writer`]) and every backend build on these.

use std::sync::Arc;

use crate::{sqlite, Fault};
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest provider wording kept with a record (a verdict's `wording`), chars. Detection
/// (`reasoning::detect`) truncates to the same limit.
pub(crate) const MAX_WORDING_CHARS: usize = 500;

/// Where a provider's wording starts to echo the rejected value back: pydantic's error list
/// as Python prints it (`'input': '…'`, what vLLM- and SGLang-style servers put in
/// `message`), its `ValidationError` text (`input_value='…'`), and the same as JSON. What
/// follows is the request's own content (a reasoning carrier, a message), never kept.
pub(crate) const ECHO_MARKERS: [&str; 4] =
    ["'input':", "\"input\":", "input_value=", "\"input_value\":"];

/// What stands in the excerpt where an echoed value was cut ([`wording_excerpt`]).
pub(crate) const ECHO_CUT: &str = "[rejected value not kept]";

/// `wording` as it is kept and logged of a provider's text: cut before the first echo of
/// the request's content ([`ECHO_MARKERS`]), then to [`MAX_WORDING_CHARS`] chars.
pub fn wording_excerpt(wording: &str) -> String {
    let echo = ECHO_MARKERS.iter().filter_map(|m| wording.find(m)).min();
    let kept = match echo {
        Some(at) => format!("{}{ECHO_CUT}", &wording[..at]),
        None => wording.to_owned(),
    };
    kept.chars().take(MAX_WORDING_CHARS).collect()
}

/// Bytes counted per record on top of its scope, key and value: the row's bookkeeping
/// (kind, version, time, index entries). An estimate; it keeps many tiny records from
/// looking free.
pub(crate) const RECORD_OVERHEAD_BYTES: u64 = 64;

/// Seconds in a day (retention is configured in days).
pub(crate) const DAY_SECS: i64 = 86_400;

/// What a record holds. Each kind's policy (name, payload version, size class, eviction,
/// residency, retention) is one row of [`POLICIES`]; a new kind adds a variant and a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// An unknown-field verdict for (upstream host, model): [`Verdict`](crate::Verdict).
    Verdict,
    /// Reasoning carriers captured from a response, per assistant turn, sealed under the
    /// credential's key (`reasoning::carriers`).
    Carrier,
    /// A conversation's prefix state: collapses, last seen turn (next issues).
    Session,
    /// Usage figures of one response (next issues).
    Usage,
    /// An image-eviction watermark of one conversation (next issues).
    Watermark,
    /// An Anthropic thinking signature the provider rejected, per credential scope:
    /// [`rejected`](crate::rejected).
    RejectedSignature,
    /// A transcoded (downscaled or repaired) image, sealed under the credential's key, for
    /// other instances on the same Redis (`[state] share_transcodes`,
    /// `images::cache`).
    Transcode,
    /// An OpenAI Responses response id and the session it was answered in, per credential
    /// scope, so a request chained by `previous_response_id` joins that session on any
    /// instance (`accounting::session`).
    ResponseLink,
}

/// Size class of a kind, deciding the `max_bytes` eviction order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Grows with traffic or holds content (carriers, usage): evicted first.
    Large,
    /// A few small records per conversation: evicted when no large record is left.
    Small,
    /// Never evicted for `max_bytes` (verdicts: small, one per host and model, and losing one
    /// costs a failed request). Retention still applies.
    Pinned,
}

/// One row of the kind table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// The row's kind: `POLICIES` is indexed by kind, and a test checks each row sits at its
    /// kind's index (so the field is read by that test only).
    #[cfg_attr(not(test), allow(dead_code))]
    pub kind: Kind,
    /// Stored name (the SQLite `kind` column).
    pub name: &'static str,
    /// Current payload schema version; a record with a newer version is ignored on read.
    pub version: u32,
    pub class: Class,
    /// Every record of the kind is kept in memory (the hot path reads it on every request).
    pub resident: bool,
    /// Days a record is kept after it was last written; `None` = `[state] retention_days`.
    pub retention_days: Option<u32>,
}

/// The kind table, one row per [`Kind`] in declaration order. Within a class, the oldest
/// record goes first whatever its kind.
pub(crate) const POLICIES: [Policy; 8] = [
    Policy {
        kind: Kind::Verdict,
        name: "verdict",
        version: 1,
        class: Class::Pinned,
        resident: true,
        retention_days: None,
    },
    Policy {
        kind: Kind::Carrier,
        name: "carrier",
        version: 1,
        class: Class::Large,
        resident: false,
        retention_days: None,
    },
    Policy {
        kind: Kind::Session,
        name: "session",
        version: 1,
        class: Class::Small,
        resident: false,
        retention_days: None,
    },
    Policy {
        kind: Kind::Usage,
        name: "usage",
        version: 1,
        class: Class::Large,
        resident: false,
        retention_days: None,
    },
    Policy {
        kind: Kind::Watermark,
        name: "watermark",
        version: 1,
        class: Class::Small,
        resident: false,
        retention_days: None,
    },
    Policy {
        kind: Kind::RejectedSignature,
        name: "rejected_signature",
        version: 1,
        class: Class::Small,
        // Read on every Anthropic request that echoes a signed block.
        resident: true,
        retention_days: None,
    },
    Policy {
        kind: Kind::Transcode,
        name: "transcode",
        version: 1,
        // Hundreds of KiB each, and recomputable: evicted first.
        class: Class::Large,
        resident: false,
        retention_days: None,
    },
    Policy {
        kind: Kind::ResponseLink,
        name: "response_link",
        version: 1,
        // One small record per Responses turn; losing one only starts a new session.
        class: Class::Small,
        resident: false,
        retention_days: None,
    },
];

impl Kind {
    /// Every kind, in [`POLICIES`] order.
    pub const ALL: [Kind; 8] = [
        Kind::Verdict,
        Kind::Carrier,
        Kind::Session,
        Kind::Usage,
        Kind::Watermark,
        Kind::RejectedSignature,
        Kind::Transcode,
        Kind::ResponseLink,
    ];

    /// This kind's row of [`POLICIES`].
    pub(crate) fn policy(self) -> &'static Policy {
        match self {
            Kind::Verdict => &POLICIES[0],
            Kind::Carrier => &POLICIES[1],
            Kind::Session => &POLICIES[2],
            Kind::Usage => &POLICIES[3],
            Kind::Watermark => &POLICIES[4],
            Kind::RejectedSignature => &POLICIES[5],
            Kind::Transcode => &POLICIES[6],
            Kind::ResponseLink => &POLICIES[7],
        }
    }

    /// Stored name (`verdict`, `carrier`, ...).
    pub fn name(self) -> &'static str {
        self.policy().name
    }

    /// The kind stored under `name`.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Current payload schema version.
    pub fn version(self) -> u32 {
        self.policy().version
    }

    /// Size class (eviction order).
    pub(crate) fn class(self) -> Class {
        self.policy().class
    }

    /// Always kept in memory.
    pub(crate) fn is_resident(self) -> bool {
        self.policy().resident
    }

    /// Retention in days given `[state] retention_days`; 0 = keep forever.
    pub(crate) fn retention_days(self, configured: u32) -> u32 {
        self.policy().retention_days.unwrap_or(configured)
    }
}

/// Where a record lives: its kind, the credential scope it belongs to
/// (`credential::identify`; `""` for records that hold no user content, such as
/// verdicts) and its key within the kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub kind: Kind,
    pub scope: String,
    pub key: String,
}

/// One stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: RecordKey,
    /// Payload schema version ([`Kind::version`] when written).
    pub version: u32,
    /// The payload (JSON for the kinds defined so far).
    pub value: Vec<u8>,
    /// When it was written, Unix seconds (retention and eviction age).
    pub written_at: i64,
}

impl Record {
    /// A record of the kind's current version, written now.
    pub fn new(kind: Kind, scope: &str, key: &str, value: Vec<u8>) -> Self {
        Self {
            key: RecordKey {
                kind,
                scope: scope.to_owned(),
                key: key.to_owned(),
            },
            version: kind.version(),
            value,
            written_at: now_secs(),
        }
    }

    /// Size counted against `max_bytes` and the cache bound, bytes: scope + key + value +
    /// [`RECORD_OVERHEAD_BYTES`].
    pub(crate) fn size(&self) -> u64 {
        let len = self.key.scope.len() + self.key.key.len() + self.value.len();
        RECORD_OVERHEAD_BYTES + u64::try_from(len).unwrap_or(u64::MAX)
    }
}

/// Why a backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// SQLite refused (cannot open, disk full, read-only, corrupt, ...).
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored row that cannot be read back (unknown kind name, ...).
    #[error("malformed stored record: {0}")]
    Malformed(String),
    /// The file is not a cachekeeper state file (another program's database, or none the
    /// proxy has migrated yet); it is left unchanged.
    #[error("{0}")]
    Foreign(String),
    /// Redis refused or did not answer (unreachable, timeout, out of memory, ...). The text
    /// never holds the URL's password.
    #[error("redis: {0}")]
    Redis(String),
}

/// A change another process made, as a watching backend hears of it ([`Backend::watch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The record at this key was written or deleted.
    Key(RecordKey),
    /// Anything may have changed: a prune, or announcements may have been missed (the
    /// backend's subscription was just (re)established).
    All,
}

/// Where a watching backend hands the changes it hears of ([`Backend::watch`]); called on a
/// thread of the backend's, never while the backend is inside a call.
pub type ChangeSink = Arc<dyn Fn(Change) + Send + Sync>;

/// Durable storage of records. Only the store's writer thread (and the CLI) calls it, so it
/// may block; it never runs on the request path.
pub trait Backend: Send {
    /// Records survive a restart.
    fn is_durable(&self) -> bool;
    /// Other processes write the same records while this one runs (one Redis shared by
    /// several instances): a record this process cached may have been replaced since, so what
    /// the next turn builds on is read from the backend ([`load::Reads::latest`](crate::load::Reads::latest)). Default
    /// false (a SQLite file is one instance's; the CLI's changes are caught by the reload).
    fn is_shared(&self) -> bool {
        false
    }
    /// Insert or replace the record at `rec.key`.
    fn put(&mut self, rec: &Record) -> Result<(), StateError>;
    /// [`Self::put`] each of `recs`, in order. The SQLite backend writes them in one
    /// transaction (all or none), so a burst of turns costs one commit.
    fn put_all(&mut self, recs: &[Record]) -> Result<(), StateError> {
        recs.iter().try_for_each(|r| self.put(r))
    }
    /// The record at `key`.
    fn get(&mut self, key: &RecordKey) -> Result<Option<Record>, StateError>;
    /// Delete the record at `key`; true if there was one.
    fn delete(&mut self, key: &RecordKey) -> Result<bool, StateError>;
    /// Every record of `kind`, sorted by key.
    fn scan(&mut self, kind: Kind) -> Result<Vec<Record>, StateError>;
    /// Sum of [`Record::size`] over every record, bytes.
    fn total_bytes(&mut self) -> Result<u64, StateError>;
    /// Up to `limit` records of `kinds` with their sizes, oldest `written_at` first (ties by
    /// kind name, then scope, then key).
    fn oldest(&mut self, kinds: &[Kind], limit: usize)
        -> Result<Vec<(RecordKey, u64)>, StateError>;
    /// Delete the records of `kind` written before `cutoff` (Unix seconds); the count.
    fn prune(&mut self, kind: Kind, cutoff: i64) -> Result<usize, StateError>;
    /// True when another process changed the stored records since the last call (and was not
    /// announced to a [`Self::watch`] sink that is still listening).
    fn changed_elsewhere(&mut self) -> Result<bool, StateError>;
    /// Hand every change another process makes to `sink` as it is made, from now until the
    /// backend is dropped; false when the backend cannot (the store then relies on
    /// [`Self::changed_elsewhere`] alone). Called once, before the writer thread starts.
    fn watch(&mut self, _sink: ChangeSink) -> bool {
        false
    }
    /// Whether the backend answers now, without writing anything: `None` when it cannot tell
    /// without a write (SQLite: a read-only file still reads), so an outage with no held
    /// write waits for the next write.
    fn probe(&mut self) -> Option<Result<(), StateError>> {
        None
    }
    /// Where the records are written, for log lines (the SQLite file's path).
    fn location(&self) -> String {
        "memory".to_owned()
    }
    /// Apply an injected fault ([`Store::inject_fault`](crate::Store::inject_fault), the fault tests' hook); returns the
    /// setting's value as the backend reads it back. Backends without such settings refuse.
    fn inject_fault(&mut self, _fault: Fault) -> Result<i64, StateError> {
        Err(StateError::Malformed(
            "this backend takes no injected faults".to_owned(),
        ))
    }
    /// Every record's key, size and age without its value, sorted by kind name, scope and
    /// key (`cachekeeper state`).
    fn list(&mut self) -> Result<Vec<sqlite::RecordInfo>, StateError> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            out.extend(self.scan(kind)?.into_iter().map(|r| sqlite::RecordInfo {
                bytes: r.size(),
                written_at: r.written_at,
                key: r.key,
            }));
        }
        out.sort_by(|a, b| {
            (a.key.kind.name(), &a.key.scope, &a.key.key).cmp(&(
                b.key.kind.name(),
                &b.key.scope,
                &b.key.key,
            ))
        });
        Ok(out)
    }
}

/// Now, Unix seconds.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
