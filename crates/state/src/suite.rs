//! The one test suite every [`Backend`] runs, directly and under a [`Store`]. A new backend
//! adds one `backend_suite!` line. Also [`Instrumented`], the one test backend for the tests of
//! what sits above a backend.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::time::Duration;

use super::*;

/// A backend under test and whatever must outlive it (a temporary folder, a Redis server).
pub(super) type Fixture = (Box<dyn Backend>, Option<Box<dyn std::any::Any>>);

const WAIT: Duration = Duration::from_secs(10);

/// A [`MemoryBackend`] for the tests of what sits above a backend (the store's read cache, the
/// outage handling): it counts its reads (`get`) and, while `broken` is set, fails every write
/// (`put`, `delete`) with [`StateError::Malformed`].
pub(super) struct Instrumented {
    pub(super) inner: MemoryBackend,
    pub(super) reads: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) broken: bool,
}

impl Instrumented {
    pub(super) fn new() -> Self {
        Self {
            inner: MemoryBackend::new(),
            reads: Arc::default(),
            broken: false,
        }
    }

    fn fail_if_broken(&self) -> Result<(), StateError> {
        if self.broken {
            return Err(StateError::Malformed("broken".into()));
        }
        Ok(())
    }
}

impl Backend for Instrumented {
    fn is_durable(&self) -> bool {
        true
    }
    fn put(&mut self, rec: &Record) -> Result<(), StateError> {
        self.fail_if_broken()?;
        self.inner.put(rec)
    }
    fn get(&mut self, key: &RecordKey) -> Result<Option<Record>, StateError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get(key)
    }
    fn delete(&mut self, key: &RecordKey) -> Result<bool, StateError> {
        self.fail_if_broken()?;
        self.inner.delete(key)
    }
    fn scan(&mut self, kind: Kind) -> Result<Vec<Record>, StateError> {
        self.inner.scan(kind)
    }
    fn total_bytes(&mut self) -> Result<u64, StateError> {
        self.inner.total_bytes()
    }
    fn oldest(
        &mut self,
        kinds: &[Kind],
        limit: usize,
    ) -> Result<Vec<(RecordKey, u64)>, StateError> {
        self.inner.oldest(kinds, limit)
    }
    fn prune(&mut self, kind: Kind, cutoff: i64) -> Result<usize, StateError> {
        self.inner.prune(kind, cutoff)
    }
    fn changed_elsewhere(&mut self) -> Result<bool, StateError> {
        Ok(false)
    }
}

fn rec(kind: Kind, scope: &str, key: &str, value: &[u8], written_at: i64) -> Record {
    Record {
        key: RecordKey {
            kind,
            scope: scope.into(),
            key: key.into(),
        },
        version: kind.version(),
        value: value.to_vec(),
        written_at,
    }
}

pub(super) fn records_round_trip(make: fn() -> Fixture) {
    let (mut b, _dir) = make();
    let c1 = rec(Kind::Carrier, "scope-a", "turn-1", b"{\"x\":1}", 100);
    let c2 = rec(Kind::Carrier, "scope-b", "turn-1", b"{\"x\":2}", 101);
    let u1 = rec(Kind::Usage, "scope-a", "turn-1", b"\x00\xffbinary", 102);
    for r in [&c1, &c2, &u1] {
        b.put(r).unwrap();
    }
    assert_eq!(b.get(&c1.key).unwrap(), Some(c1.clone()));
    assert_eq!(
        b.get(&u1.key).unwrap(),
        Some(u1.clone()),
        "same key text, other kind"
    );
    // Replace.
    let c1b = rec(Kind::Carrier, "scope-a", "turn-1", b"{\"x\":3}", 200);
    b.put(&c1b).unwrap();
    assert_eq!(b.get(&c1.key).unwrap(), Some(c1b.clone()));
    // Scan: one kind, sorted by key.
    assert_eq!(
        b.scan(Kind::Carrier).unwrap(),
        vec![c1b.clone(), c2.clone()]
    );
    assert_eq!(b.scan(Kind::Verdict).unwrap(), vec![]);
    // Delete.
    assert!(b.delete(&c1.key).unwrap());
    assert!(!b.delete(&c1.key).unwrap());
    assert_eq!(b.get(&c1.key).unwrap(), None);
    assert_eq!(b.scan(Kind::Carrier).unwrap(), vec![c2]);
    assert!(
        !b.changed_elsewhere().unwrap(),
        "our own writes are not a change elsewhere"
    );
}

pub(super) fn sizes_age_order_and_prune(make: fn() -> Fixture) {
    let (mut b, _dir) = make();
    let recs = [
        rec(Kind::Usage, "s", "u-old", &[1; 10], 50),
        rec(Kind::Carrier, "s", "c-new", &[1; 20], 300),
        rec(Kind::Carrier, "s", "c-mid", &[1; 30], 100),
        rec(Kind::Carrier, "s", "c-tie", &[1; 40], 100),
        rec(Kind::Verdict, "", "v", &[1; 50], 1),
        rec(Kind::Session, "s", "sess", &[1; 60], 2),
    ];
    for r in &recs {
        b.put(r).unwrap();
    }
    let total: u64 = recs.iter().map(Record::size).sum();
    assert_eq!(b.total_bytes().unwrap(), total);
    // Replacing a record counts its new size only.
    b.put(&rec(Kind::Session, "s", "sess", &[1; 5], 2)).unwrap();
    assert_eq!(b.total_bytes().unwrap(), total - 55);
    // Oldest first among the kinds asked for; ties by kind name, scope, key.
    let oldest = b.oldest(&[Kind::Carrier, Kind::Usage], 10).unwrap();
    let names: Vec<&str> = oldest.iter().map(|(k, _)| k.key.as_str()).collect();
    assert_eq!(names, ["u-old", "c-mid", "c-tie", "c-new"]);
    assert_eq!(oldest[0].1, recs[0].size());
    assert_eq!(b.oldest(&[Kind::Carrier, Kind::Usage], 2).unwrap().len(), 2);
    assert!(b.oldest(&[], 10).unwrap().is_empty());
    // Prune touches one kind only.
    assert_eq!(b.prune(Kind::Carrier, 200).unwrap(), 2);
    assert_eq!(b.scan(Kind::Carrier).unwrap().len(), 1);
    assert_eq!(b.scan(Kind::Usage).unwrap().len(), 1);
    assert_eq!(b.prune(Kind::Verdict, 0).unwrap(), 0);
}

pub(super) fn store_learns_and_clears_verdicts(make: fn() -> Fixture) {
    let (b, _dir) = make();
    let s = Store::with_backend(b, 30, u64::MAX, DEFAULT_CACHE_BYTES);
    let rc = FieldSet::from([Field::message("reasoning_content")]);
    let new = s
        .verdicts()
        .learn("API.Mistral.ai", "Mistral-Large", &rc, "first");
    assert_eq!(new, rc);
    assert!(s
        .verdicts()
        .learn("api.mistral.ai", "Mistral-Large", &rc, "again")
        .is_empty());
    // A top-level parameter of the same name is another field.
    let both = FieldSet::from([Field::message("reasoning"), Field::param("reasoning")]);
    let new = s
        .verdicts()
        .learn("api.mistral.ai", "Mistral-Large", &both, "second");
    assert_eq!(new, both);
    let v = s.verdicts().get("api.mistral.ai", "Mistral-Large").unwrap();
    assert_eq!(
        v.fields.joined(),
        "param:reasoning,message:reasoning,message:reasoning_content"
    );
    assert_eq!(v.wording, "second");
    assert_eq!(s.omit("api.mistral.ai", "Mistral-Large"), v.fields);
    assert!(
        s.verdicts()
            .get("api.mistral.ai", "mistral-large")
            .is_none(),
        "model case kept"
    );
    // The wording is cut to the record limit.
    let long = "w".repeat(MAX_WORDING_CHARS + 10);
    s.verdicts()
        .learn("h", "m", &FieldSet::from([Field::NoImageInput]), &long);
    assert_eq!(
        s.verdicts().get("h", "m").unwrap().wording.chars().count(),
        MAX_WORDING_CHARS
    );
    s.verdicts().learn("h", "m2", &rc, "w");
    assert_eq!(s.verdicts().all().len(), 3);
    assert_eq!(s.verdicts().clear("H", Some("m")), 1);
    assert_eq!(s.verdicts().clear("h", None), 1);
    assert_eq!(s.verdicts().all().len(), 1);
    s.flush();
    // Cleared in the backend too: a read-through finds nothing.
    let key = VerdictKey::new("h", "m2").record_key();
    assert_eq!(s.get(&key, WAIT), None);
}

pub(super) fn max_bytes_evicts_oldest_large_first_and_never_verdicts(make: fn() -> Fixture) {
    let (b, _dir) = make();
    let max = 40_000;
    let s = Store::with_backend(b, 0, max, DEFAULT_CACHE_BYTES);
    for i in 0..5 {
        s.verdicts().learn(
            "api.example.com",
            &format!("model-{i}"),
            &FieldSet::from([Field::param("store")]),
            "Unknown parameter: 'store'.",
        );
    }
    let session = rec(Kind::Session, "s", "conversation", &[7; 500], 1);
    s.put(session.clone());
    // 100 large records of ~1 KiB, oldest first, alternating kinds: ~2.7 times the cap.
    let large: Vec<Record> = (0..100)
        .map(|i| {
            let kind = if i % 2 == 0 {
                Kind::Carrier
            } else {
                Kind::Usage
            };
            rec(kind, "s", &format!("r{i:03}"), &[1; 1000], 10 + i)
        })
        .collect();
    for r in &large {
        s.put(r.clone());
    }
    s.flush();
    let total = s.stored_bytes(WAIT).unwrap();
    assert!(total <= max, "{total} > {max}");
    // Verdicts all survive, and so does the (small) session: large kinds go first.
    assert_eq!(s.verdicts().all().len(), 5);
    assert_eq!(s.get(&session.key, WAIT), Some(session.clone()));
    // The oldest large records went, the newest stayed.
    let kept: Vec<bool> = large
        .iter()
        .map(|r| s.get(&r.key, WAIT).is_some())
        .collect();
    let first_kept = kept.iter().position(|k| *k).unwrap();
    assert!(first_kept > 50, "{first_kept}");
    assert!(kept[first_kept..].iter().all(|k| *k), "{kept:?}");
    assert!(kept[..first_kept].iter().all(|k| !*k));

    // With no large record left, small records go; verdicts stay even over the cap.
    let s2_max = 600;
    drop(s);
    let (b, _dir2) = make();
    let s = Store::with_backend(b, 0, s2_max, DEFAULT_CACHE_BYTES);
    for i in 0..10 {
        s.verdicts().learn(
            "h",
            &format!("m{i}"),
            &FieldSet::from([Field::message("reasoning")]),
            "Extra inputs are not permitted",
        );
    }
    s.put(rec(Kind::Watermark, "s", "w", &[1; 10], 5));
    s.flush();
    assert_eq!(
        s.get(&rec(Kind::Watermark, "s", "w", &[], 0).key, WAIT),
        None
    );
    assert_eq!(s.verdicts().all().len(), 10);
    assert!(s.stored_bytes(WAIT).unwrap() > s2_max);
}

pub(super) fn cache_is_bounded_and_reads_through(make: fn() -> Fixture) {
    let (b, _dir) = make();
    let one = rec(Kind::Carrier, "s", "c000", &[1; 1000], 1).size();
    let s = Store::with_backend(b, 0, u64::MAX, one * 10);
    s.verdicts().learn(
        "h",
        "m",
        &FieldSet::from([Field::param("store")]),
        "Unknown parameter: 'store'.",
    );
    let records: Vec<Record> = (0..50)
        .map(|i| rec(Kind::Carrier, "s", &format!("c{i:03}"), &[1; 1000], i))
        .collect();
    for r in &records {
        s.put(r.clone());
        assert!(s.cached_bytes() <= one * 10);
    }
    s.flush();
    // The verdict is resident; the first carriers left memory but not the backend.
    assert!(s.verdicts().get("h", "m").is_some());
    assert_eq!(s.get_cached(&records[0].key), None);
    assert_eq!(s.get(&records[0].key, WAIT), Some(records[0].clone()));
    // A read-through enters the cache.
    assert_eq!(s.get_cached(&records[0].key), Some(records[0].clone()));
    assert!(s.cached_bytes() <= one * 10);
}

macro_rules! backend_suite {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn records_round_trip() {
                super::records_round_trip($make);
            }

            #[test]
            fn sizes_age_order_and_prune() {
                super::sizes_age_order_and_prune($make);
            }

            #[test]
            fn store_learns_and_clears_verdicts() {
                super::store_learns_and_clears_verdicts($make);
            }

            #[test]
            fn cache_is_bounded_and_reads_through() {
                super::cache_is_bounded_and_reads_through($make);
            }

            #[test]
            fn max_bytes_evicts_oldest_large_first_and_never_verdicts() {
                super::max_bytes_evicts_oldest_large_first_and_never_verdicts($make);
            }
        }
    };
}

fn memory() -> Fixture {
    (Box::new(MemoryBackend::new()), None)
}

fn sqlite_file() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let b = SqliteBackend::open(&dir.path().join("state.db"), 1 << 30).unwrap();
    (Box::new(b), Some(Box::new(dir)))
}

fn sqlite_in_memory() -> Fixture {
    (Box::new(SqliteBackend::open_in_memory().unwrap()), None)
}

/// A Redis backend on a `redis-server` of its own (killed with the fixture), database 3 (any
/// database works: the layout is the same).
fn redis_server() -> Fixture {
    let server = super::redis::test_server::RedisServer::start();
    let b = super::redis::RedisBackend::open(&RedisOptions {
        url: server.url(3),
        // Generous: the suite checks behaviour, not speed, on a loaded machine.
        read_timeout: Duration::from_secs(10),
        retention_days: 0,
        ca_file: None,
    })
    .unwrap();
    (Box::new(b), Some(Box::new(server)))
}

/// The Redis backend over `rediss://` on a TLS-only `redis-server` whose certificate a CA
/// made for the test signed, trusted through `ca_file`.
fn redis_tls_server() -> Fixture {
    let ca = super::redis::test_server::TestCa::generate();
    let server = super::redis::test_server::RedisServer::start_tls(&ca);
    let url = server.url(2);
    assert!(url.is_tls());
    let b = super::redis::RedisBackend::open(&RedisOptions {
        url,
        read_timeout: Duration::from_secs(10),
        retention_days: 0,
        ca_file: Some(ca.ca()),
    })
    .unwrap();
    (Box::new(b), Some(Box::new((server, ca))))
}

backend_suite!(memory_backend, memory);
backend_suite!(redis_tls_backend, redis_tls_server);
backend_suite!(redis_backend, redis_server);
backend_suite!(sqlite_file_backend, sqlite_file);
backend_suite!(sqlite_in_memory_backend, sqlite_in_memory);
