//! Captured reasoning carriers between the response that produced them and the request that
//! echoes their turn: where the observer saves them ([`save`]) and the lookup the restore pass
//! reads ([`TurnLookup`], [`StoreLookup`]).
//!
//! A captured turn ([`CapturedTurn`]) is one [`Kind::Carrier`] record per (credential scope,
//! upstream host, model as the request named it, turn fingerprint): scope = the credential's
//! ([`crate::credential::identify`]), key = [`carrier_key`]. With a credential its JSON is
//! sealed ([`crate::state::seal`], under the credential's own key) and stored (memory and
//! disk); without one it stays in memory only. See `docs/state.md#carrier-records`.

use std::time::Duration;

use crate::dialect::fingerprint::Fingerprint;
use crate::dialect::turn::CapturedTurn;
use crate::state::load::Reads;
use crate::state::seal::{self, SealKey};
use crate::state::{Kind, Record, RecordKey, Store};

/// Longest the load phase of a request waits for its captured turns, ms (all of them, read in
/// one op of the writer: [`crate::state::Store::load`]); after it they are looked up in memory
/// only (a long conversation echoing many unknown turns must not stall its request). A SQLite
/// point read by primary key takes well under a millisecond, a Redis GET one round trip.
pub(crate) const BACKEND_BUDGET_MS: u64 = 200;

/// Where the restore pass finds captured turns: one request's view (its credential scope
/// and upstream host are fixed by whoever builds it).
pub trait TurnLookup {
    /// The turn captured with fingerprint `fp` from a response of `model` (as the request
    /// named it), if this request's credential may see it. `None` when unknown.
    fn find(&self, model: &str, fp: &Fingerprint) -> Option<CapturedTurn>;

    /// False when no turn of `model` was ever captured for this view, so no
    /// [`TurnLookup::find`] can succeed (the restore pass then skips the fingerprints). True
    /// when unknown.
    fn may_know(&self, _model: &str) -> bool {
        true
    }
}

/// Knows no turn (restore off).
impl TurnLookup for () {
    fn find(&self, _model: &str, _fp: &Fingerprint) -> Option<CapturedTurn> {
        None
    }

    fn may_know(&self, _model: &str) -> bool {
        false
    }
}

/// Tests: a fixed set of turns, whatever the model.
#[cfg(test)]
impl TurnLookup for std::collections::HashMap<Fingerprint, CapturedTurn> {
    fn find(&self, _model: &str, fp: &Fingerprint) -> Option<CapturedTurn> {
        self.get(fp).cloned()
    }
}

/// The record key of a captured turn within its credential scope: upstream host, model and
/// the turn's fingerprint (64 hex digits), one per line: `"host\nmodel\nfingerprint"`.
pub fn carrier_key(host: &str, model: &str, fp: &Fingerprint) -> String {
    format!("{host}\n{model}\n{fp}")
}

/// How old the index record ([`index_key`]) may get before a save writes it again, seconds.
const INDEX_REFRESH_SECS: i64 = 86_400;

/// The key of the index record that says turns of `model` through `host` were captured for
/// the scope: `"host\nmodel\n*"` (no content; an empty value).
fn index_key(scope: &str, host: &str, model: &str) -> RecordKey {
    RecordKey {
        kind: Kind::Carrier,
        scope: scope.to_owned(),
        key: format!("{host}\n{model}\n*"),
    }
}

fn record_key(scope: &str, host: &str, model: &str, fp: &Fingerprint) -> RecordKey {
    RecordKey {
        kind: Kind::Carrier,
        scope: scope.to_owned(),
        key: carrier_key(host, model, fp),
    }
}

/// Keep `turn`, captured from a response of `model` (as the request named it) through
/// upstream `host` for credential `scope`: with a `sealing` key, its JSON sealed with the
/// record's key as associated data and [`Store::put`] (memory at once, disk by the writer);
/// without, its JSON in memory only ([`Store::remember`]), never on disk. Returns false when
/// it could not be kept (serializing or sealing failed; nothing is written).
pub fn save(
    store: &Store,
    scope: &str,
    sealing: Option<&SealKey>,
    host: &str,
    model: &str,
    fp: &Fingerprint,
    turn: &CapturedTurn,
) -> bool {
    let Ok(json) = serde_json::to_vec(turn) else {
        return false;
    };
    let key = record_key(scope, host, model, fp);
    match sealing {
        Some(k) => {
            let Some(sealed) = seal::seal(k, &seal::record_aad(&key), &json) else {
                return false;
            };
            store.put(Record::new(Kind::Carrier, &key.scope, &key.key, sealed));
        }
        None => store.remember(Record::new(Kind::Carrier, &key.scope, &key.key, json)),
    }
    // Written again once a day, so retention (which goes by age) never removes the index
    // before the turns it stands for.
    let index = index_key(scope, host, model);
    let stale = |r: &Record| crate::state::now_secs() - r.written_at > INDEX_REFRESH_SECS;
    if store.get_cached(&index).is_none_or(|r| stale(&r)) {
        let rec = Record::new(Kind::Carrier, &index.scope, &index.key, Vec::new());
        match sealing {
            Some(_) => store.put(rec),
            None => store.remember(rec),
        }
    }
    true
}

/// One request's view of the captured turns: its credential (scope and sealing key) and its
/// upstream host. Reads memory, then (with a credential) what the request's load phase read
/// from the backend ([`Reads`]); a turn in neither is wanted by the load phase, which reads
/// them all within [`BACKEND_BUDGET_MS`]. Never waits.
///
/// Fail open: a record that does not open (another key, altered bytes) or does not parse
/// is unknown (`None`).
pub struct StoreLookup<'a> {
    reads: &'a Reads<'a>,
    scope: &'a str,
    sealing: Option<&'a SealKey>,
    host: &'a str,
}

impl<'a> StoreLookup<'a> {
    /// The view of credential `scope` (with its `sealing` key; `None` without a credential)
    /// through upstream `host` (`route.provider.host`), reading through `reads`.
    pub fn new(
        reads: &'a Reads<'a>,
        scope: &'a str,
        sealing: Option<&'a SealKey>,
        host: &'a str,
    ) -> Self {
        Self {
            reads,
            scope,
            sealing,
            host,
        }
    }
}

impl StoreLookup<'_> {
    /// The record at `key`: memory, then (with a credential: without one nothing was
    /// written to the backend) the load phase's.
    fn read(&self, key: &RecordKey) -> Option<Record> {
        if self.sealing.is_none() {
            return self.reads.store().get_cached(key);
        }
        self.reads
            .get(key, Duration::from_millis(BACKEND_BUDGET_MS))
    }
}

impl TurnLookup for StoreLookup<'_> {
    fn may_know(&self, model: &str) -> bool {
        let index = index_key(self.scope, self.host, model);
        // Not known before the load phase: the turns are wanted with it.
        self.read(&index).is_some() || self.reads.is_wanted(&index)
    }

    fn find(&self, model: &str, fp: &Fingerprint) -> Option<CapturedTurn> {
        let key = record_key(self.scope, self.host, model, fp);
        let rec = self.read(&key)?;
        let json = match self.sealing {
            Some(k) => seal::open(k, &seal::record_aad(&key), &rec.value)?,
            // Without a credential nothing was written to disk: memory only.
            None => rec.value,
        };
        serde_json::from_slice(&json).ok()
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
    use super::*;
    use crate::dialect::turn::{Call, Carrier};
    use crate::state::load::with_load;
    use crate::state::{StoreOptions, DEFAULT_CACHE_BYTES, RELOAD_INTERVAL};
    use std::path::Path;
    use std::time::Instant;

    /// Reasoning text with non-ASCII, escapes and U+2028.
    const THOUGHT: &str = "The user wants Paris weather; call get_weather. \u{e9}t\u{e9} \"q\" \\n \u{2028} end-of-thought-7f3a";

    fn turn() -> CapturedTurn {
        CapturedTurn {
            text: String::new(),
            calls: vec![Call {
                id: Some("call_0".into()),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            }],
            carriers: vec![
                Carrier::ReasoningContent(THOUGHT.into()),
                Carrier::AnthropicThinking {
                    position: 0,
                    thinking: THOUGHT.into(),
                    signature: Some("EqQBCkYIARgCIkA=".into()),
                },
            ],
            item_ids: Vec::new(),
        }
    }

    /// A request's lookup, with its load phase ([`crate::state::load::with_load`]).
    struct Lk<'a> {
        s: &'a Store,
        scope: &'a str,
        sealing: Option<&'a SealKey>,
        host: &'a str,
    }

    fn lk<'a>(s: &'a Store, scope: &'a str, sealing: Option<&'a SealKey>, host: &'a str) -> Lk<'a> {
        Lk {
            s,
            scope,
            sealing,
            host,
        }
    }

    impl Lk<'_> {
        fn find(&self, model: &str, fp: &Fingerprint) -> Option<CapturedTurn> {
            with_load(self.s, |r| {
                StoreLookup::new(r, self.scope, self.sealing, self.host).find(model, fp)
            })
        }

        fn may_know(&self, model: &str) -> bool {
            with_load(self.s, |r| {
                StoreLookup::new(r, self.scope, self.sealing, self.host).may_know(model)
            })
        }
    }

    fn key(b: u8) -> SealKey {
        SealKey::from_bytes([b; seal::KEY_BYTES])
    }

    fn fp(b: u8) -> Fingerprint {
        Fingerprint([b; 32])
    }

    fn opts(dir: &Path) -> StoreOptions {
        StoreOptions {
            path: dir.join("state.db"),
            redis: None,
            retention_days: 30,
            max_bytes: 1 << 30,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    fn memory_store() -> Store {
        Store::with_backend(
            Box::new(crate::state::MemoryBackend::new()),
            0,
            u64::MAX,
            1 << 20,
        )
    }

    fn rows(path: &Path) -> i64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row(
            "SELECT COUNT(*) FROM records WHERE kind = 'carrier'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn save_then_lookup_with_the_same_credential_and_no_other() {
        let s = memory_store();
        let k = key(1);
        assert!(save(
            &s,
            "scope-a",
            Some(&k),
            "api.deepseek.com",
            "deepseek-chat",
            &fp(1),
            &turn()
        ));
        let same = lk(&s, "scope-a", Some(&k), "api.deepseek.com");
        assert_eq!(same.find("deepseek-chat", &fp(1)), Some(turn()));
        assert_eq!(same.find("deepseek-chat", &fp(2)), None, "another turn");
        assert_eq!(
            same.find("deepseek-reasoner", &fp(1)),
            None,
            "another model"
        );
        // The index says which models have captured turns at all (restore skips the rest).
        assert!(same.may_know("deepseek-chat"));
        assert!(!same.may_know("deepseek-reasoner"));
        let other_host = lk(&s, "scope-a", Some(&k), "api.moonshot.ai");
        assert_eq!(other_host.find("deepseek-chat", &fp(1)), None);
        assert!(!other_host.may_know("deepseek-chat"));
        assert!(!lk(&s, "scope-b", Some(&key(2)), "api.deepseek.com").may_know("deepseek-chat"));
        // Another credential: another scope, another key.
        let k2 = key(2);
        let other = lk(&s, "scope-b", Some(&k2), "api.deepseek.com");
        assert_eq!(other.find("deepseek-chat", &fp(1)), None);
        // Even one that claims the scope but has another key (a forged scope) opens nothing.
        let forged = lk(&s, "scope-a", Some(&k2), "api.deepseek.com");
        assert_eq!(forged.find("deepseek-chat", &fp(1)), None);
        // No credential sees nothing of a credential's records.
        let anon = lk(&s, "scope-a", None, "api.deepseek.com");
        assert_eq!(anon.find("deepseek-chat", &fp(1)), None);
        // The stored value is sealed, not the JSON.
        let rec = s
            .get_cached(&record_key(
                "scope-a",
                "api.deepseek.com",
                "deepseek-chat",
                &fp(1),
            ))
            .unwrap();
        assert_eq!(rec.value[0], seal::FORMAT_V1);
        assert!(serde_json::from_slice::<serde_json::Value>(&rec.value).is_err());
    }

    #[test]
    fn without_a_credential_memory_only() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let s = Store::open(&o);
        assert!(s.is_durable());
        assert!(save(
            &s,
            "",
            None,
            "127.0.0.1:8080",
            "qwen3",
            &fp(3),
            &turn()
        ));
        let l = lk(&s, "", None, "127.0.0.1:8080");
        assert_eq!(l.find("qwen3", &fp(3)), Some(turn()));
        s.flush();
        assert_eq!(rows(&o.path), 0, "never reaches the backend");
        drop(s);
        let s = Store::open(&o);
        let l = lk(&s, "", None, "127.0.0.1:8080");
        assert_eq!(l.find("qwen3", &fp(3)), None, "gone on restart");
    }

    /// Every file SQLite writes (the database, its WAL, its shared-memory index).
    fn file_bytes(path: &Path) -> Vec<u8> {
        let mut all = Vec::new();
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            if let Ok(b) = std::fs::read(&p) {
                all.extend_from_slice(&b);
            }
        }
        all
    }

    #[test]
    fn the_state_file_holds_no_reasoning_and_a_restart_finds_the_carrier() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let s = Store::open(&o);
        let k = key(9);
        for i in 0..20 {
            assert!(save(
                &s,
                "scope-a",
                Some(&k),
                "api.deepseek.com",
                "deepseek-chat",
                &fp(i),
                &turn()
            ));
        }
        s.flush();
        assert_eq!(
            rows(&o.path),
            21,
            "stored: 20 turns and the model's index record"
        );
        let bytes = file_bytes(&o.path);
        for needle in [
            THOUGHT.as_bytes(),
            b"end-of-thought-7f3a",
            b"get_weather",
            b"EqQBCkYIARgCIkA=",
            b"reasoning",
        ] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{:?} found in the state file",
                String::from_utf8_lossy(needle)
            );
        }
        drop(s);
        // A restarted proxy (same file, same credential) finds it; another key does not.
        let s = Store::open(&o);
        let l = lk(&s, "scope-a", Some(&k), "api.deepseek.com");
        assert_eq!(l.find("deepseek-chat", &fp(7)), Some(turn()));
        let k2 = key(8);
        let other = lk(&s, "scope-a", Some(&k2), "api.deepseek.com");
        assert_eq!(other.find("deepseek-chat", &fp(8)), None);
    }

    #[test]
    fn unreadable_records_are_unknown_not_a_panic() {
        let s = memory_store();
        let k = key(4);
        let rk = record_key("scope-a", "h", "m", &fp(1));
        // Plain JSON where a sealed value belongs, garbage, a truncated seal, and a sealed
        // value that is not a turn.
        let bad_turn = seal::seal(&k, &seal::record_aad(&rk), b"{\"text\":1}").unwrap();
        for value in [
            serde_json::to_vec(&turn()).unwrap(),
            b"\xff\xfe garbage".to_vec(),
            vec![seal::FORMAT_V1; 10],
            bad_turn,
        ] {
            s.put(Record::new(Kind::Carrier, &rk.scope, &rk.key, value));
            let l = lk(&s, "scope-a", Some(&k), "h");
            assert_eq!(l.find("m", &fp(1)), None);
        }
        // A sealed value moved to another record's key does not open there.
        assert!(save(&s, "scope-a", Some(&k), "h", "m", &fp(2), &turn()));
        let moved = s
            .get_cached(&record_key("scope-a", "h", "m", &fp(2)))
            .unwrap()
            .value;
        s.put(Record::new(Kind::Carrier, &rk.scope, &rk.key, moved));
        assert_eq!(lk(&s, "scope-a", Some(&k), "h").find("m", &fp(1)), None);
        assert_eq!(
            lk(&s, "scope-a", Some(&k), "h").find("m", &fp(2)),
            Some(turn())
        );
        // Without a credential, a record that is not JSON is unknown.
        s.remember(Record::new(
            Kind::Carrier,
            "",
            &rk.key,
            b"not json".to_vec(),
        ));
        assert_eq!(lk(&s, "", None, "h").find("m", &fp(1)), None);
    }

    #[test]
    fn a_purge_by_another_process_is_noticed_by_a_running_store() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let proxy = Store::open(&o);
        let k = key(5);
        assert!(save(&proxy, "scope-a", Some(&k), "h", "m", &fp(1), &turn()));
        proxy.flush();
        let l = lk(&proxy, "scope-a", Some(&k), "h");
        assert_eq!(l.find("m", &fp(1)), Some(turn()), "cached");
        // The CLI deletes every carrier from the file.
        {
            let mut cli = crate::state::SqliteBackend::open(&o.path, o.max_bytes).unwrap();
            assert_eq!(
                crate::state::Backend::prune(&mut cli, Kind::Carrier, i64::MAX).unwrap(),
                2,
                "the turn and the model's index record"
            );
        }
        let deadline = Instant::now() + RELOAD_INTERVAL * 3;
        loop {
            let l = lk(&proxy, "scope-a", Some(&k), "h");
            if l.find("m", &fp(1)).is_none() {
                break;
            }
            assert!(Instant::now() < deadline, "purge not noticed");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
