//! cachekeeper's storage interface: what the proxy and the passes keep between requests. It
//! depends on no other crate of the workspace; the `cachekeeper` crate re-exports it as
//! `cachekeeper::state` (and its `[state]` section, [`StateConfig`], as
//! `cachekeeper::config::StateConfig`).
//!
//! Everything is a [`Record`]: a [`Kind`], a key (credential scope + key text), a payload
//! schema version, the payload bytes and the time it was written. A [`Backend`] keeps records
//! durably ([`SqliteBackend`], the embedded default; [`MemoryBackend`] when no file can be
//! used; a shared backend later); a [`Store`] is the handle everyone talks to:
//!
//! - Reads are served from a read cache bounded in bytes ([`StoreOptions::cache_bytes`]).
//!   Records of *resident* kinds (the verdicts) are always in it, so the hot path never reads
//!   the backend; other kinds are kept least-recently-used first out.
//! - Writes update the cache at once and are queued to one writer thread that owns the
//!   backend, so no request ever waits on disk.
//! - A change made by another process (`cachekeeper verdicts --clear`, `cachekeeper state
//!   --purge`, another instance on the same Redis) is noticed within [`RELOAD_INTERVAL`]
//!   ([`Backend::changed_elsewhere`]): the resident kinds are reloaded and every other cached
//!   record is forgotten. A backend that announces changes as they happen ([`Backend::watch`]:
//!   Redis pub/sub) has them applied at once, one record at a time ([`Change`]): a resident
//!   record is read again and replaced, any other forgotten; a local write of a resident
//!   record still queued is kept (it reaches the backend after the change, so it is the one
//!   the backend ends with: last writer wins).
//! - Retention per kind ([`Kind::retention_days`]): older records are deleted at start-up and
//!   daily.
//! - `[state] max_bytes`: when the records' total size ([`Record::size`]) passes it, the writer
//!   evicts the oldest records of the large kinds first, then of the other evictable kinds,
//!   down to [`EVICT_TO_PERCENT`](writer::EVICT_TO_PERCENT) % of it; verdicts are never evicted.
//! - Fail open: a backend that cannot be opened gives a [`MemoryBackend`] (and a warning); a
//!   write that fails leaves the record in memory, and the writer holds it for retry until the
//!   backend takes writes again ([`outage`]: one warning per outage, every failure counted,
//!   `state writes resumed` when a retry succeeds). [`Store::is_durable`] says which.
//!
//! `docs/state.md` describes the kinds, retention, eviction order and the verdicts' namespaces.
//!
//! Files: `record.rs` the interface (kinds, keys, records, the [`Backend`] trait, re-exported
//! here); this file the [`Store`] handle and its options; `writer.rs` the writer thread;
//! `cache.rs` the read cache and the absent-key set; `backlog.rs`, `outage.rs`, `settle.rs`
//! the writer's queue bounds, outages and write waits; `load.rs` a request's load phase; one
//! file per backend (`sqlite.rs`, `memory.rs`, `redis.rs`); `config.rs` `[state]`.
//!
//! Feature `testing`: test-only APIs (a load phase outside a request, a throwaway
//! `redis-server`, ...) for the tests of the crates above.
#![forbid(unsafe_code)]

mod backlog;
mod cache;
mod config;
pub mod load;
pub(crate) mod memory;
mod outage;
mod record;
pub mod redis;
pub mod rejected;
pub mod seal;
pub mod settle;
pub mod sqlite;
pub(crate) mod verdicts;
mod writer;

#[cfg(test)]
mod suite;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use self::redis::{RedisOptions, RedisUrl, UrlText};
pub use config::{StateBackend, StateConfig};
pub use memory::MemoryBackend;
pub use outage::Fault;
pub use sqlite::SqliteBackend;
pub use verdicts::{Field, FieldSet, Verdict, VerdictKey, VerdictLookup, Verdicts};

use cache::{Absent, Cache};
pub use record::*;
use writer::{change_sink, prune_all, writer_loop, Op, WriterLimits};

/// How often the writer checks for changes made by other processes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// Default bound of the in-memory read cache, bytes (sizes as [`Record::size`]).
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Settings of [`Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The SQLite file (`[state] backend = "sqlite"`).
    pub path: PathBuf,
    /// `[state] backend = "redis"`: the server and its settings; `path` is then unused.
    pub redis: Option<RedisOptions>,
    /// `[state] retention_days` (0 = keep forever).
    pub retention_days: u32,
    /// `[state] max_bytes`: bound on the records' total size, bytes.
    pub max_bytes: u64,
    /// Bound of the in-memory read cache, bytes.
    pub cache_bytes: u64,
}

impl StoreOptions {
    /// From `[state]`, with `path` relative to `base_dir` (the config file's folder).
    pub fn from_config(cfg: &StateConfig, base_dir: &Path) -> Self {
        Self {
            path: base_dir.join(&cfg.path),
            redis: cfg.redis_url().map(|url| RedisOptions {
                url: url.clone(),
                read_timeout: Duration::from_millis(cfg.read_timeout_ms()),
                retention_days: cfg.retention_days,
                ca_file: cfg.ca_path(base_dir),
            }),
            retention_days: cfg.retention_days,
            max_bytes: cfg.max_bytes,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    /// Where the records are, for messages: the SQLite file, or the Redis URL redacted.
    pub fn location(&self) -> String {
        match &self.redis {
            Some(r) => r.url.redacted().to_owned(),
            None => self.path.display().to_string(),
        }
    }

    /// A backend that only reads, for `cachekeeper report`: the SQLite file opened read-only
    /// (it must exist), or the Redis server (which must answer; the report only reads).
    pub fn open_reader(&self) -> Result<Box<dyn Backend>, StateError> {
        match &self.redis {
            Some(r) => Ok(Box::new(self::redis::RedisBackend::open(r)?)),
            None => Ok(Box::new(SqliteBackend::open_read_only(&self.path)?)),
        }
    }

    /// A backend over the configured store, for the CLI: the SQLite file (created if
    /// missing), or the Redis server (which must answer).
    pub fn open_backend(&self) -> Result<Box<dyn Backend>, StateError> {
        match &self.redis {
            Some(r) => Ok(Box::new(self::redis::RedisBackend::open(r)?)),
            None => Ok(Box::new(SqliteBackend::open(&self.path, self.max_bytes)?)),
        }
    }
}

struct Inner {
    cache: Mutex<Cache>,
    /// Keys the backend was asked for and did not have ([`Store::get`]), so a request that
    /// echoes many turns with nothing stored reads the backend once per turn, not on every
    /// request. Locked after `cache` when both are held.
    absent: Mutex<Absent>,
    durable: AtomicBool,
    /// [`Backend::is_durable`] of the backend the store opened with: a backend whose
    /// `durable` turning false is an outage (a memory backend never is durable).
    persistent: bool,
    /// A load phase timed out and no backend call has succeeded since ([`Store::load`]):
    /// loads read memory only. Cleared by the writer on its next successful backend call.
    stalled: AtomicBool,
    /// The load phase said once that it reads memory only during this write outage.
    outage_noted: AtomicBool,
    /// [`Backend::is_shared`] of the backend the store opened with.
    shared: bool,
    /// `cachekeeper_state_write_errors_total`: backend writes that failed ([`outage`]).
    write_errors: prometheus_client::metrics::counter::Counter,
    /// `cachekeeper_state_writes_dropped_total`: writes held in an outage and dropped for
    /// [`outage::MAX_PENDING_RECORDS`], and queued writes dropped for the queue's bounds
    /// ([`backlog`]).
    writes_dropped: prometheus_client::metrics::counter::Counter,
    /// The writer queue's size and bounds ([`backlog`]).
    backlog: backlog::Backlog,
    /// `[state] write_wait_ms` ([`Store::set_write_wait`]); 0: responses never wait.
    write_wait_ms: AtomicU64,
    /// `cachekeeper_state_write_waits_total{result}` ([`settle`]).
    write_waits: settle::WaitCounters,
    /// Bumped (under the cache lock) whenever records are forgotten or replaced because
    /// another process changed them: a read through the writer that started before does not
    /// put what it read into the cache (it may be older than the change).
    epoch: AtomicU64,
}

impl Inner {
    /// Another process changed the non-resident record at `key`: forget it (the next read goes
    /// to the backend, behind any local write of it).
    fn forget(&self, key: &RecordKey) {
        if let Ok(mut c) = self.cache.lock() {
            c.remove(key);
            if let Ok(mut a) = self.absent.lock() {
                a.remove(key);
            }
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
    /// The writer's queue. Shared so that a backend's change sink can hold it weakly: the
    /// writer stops when the last store handle is dropped.
    tx: Option<Arc<mpsc::Sender<Op>>>,
}

impl Store {
    /// Open the configured store (SQLite at `opts.path`, or Redis). Never fails: an unusable
    /// file gives an in-memory store and a warning; a Redis that cannot be reached gives a
    /// store serving from memory that connects in the background (one warning now, one info
    /// line when Redis answers: [`outage`]).
    pub fn open(opts: &StoreOptions) -> Self {
        let memory = |e: &StateError| {
            tracing::warn!(
                target: "cachekeeper::state",
                path = %opts.location(),
                error = %e,
                "cannot open the state store; running in memory (verdicts will not survive a restart)"
            );
            Self::with_backend(
                Box::new(MemoryBackend::new()),
                opts.retention_days,
                opts.max_bytes,
                opts.cache_bytes,
            )
        };
        let Some(r) = &opts.redis else {
            return match Self::open_strict(opts) {
                Ok(s) => s,
                Err(e) => memory(&e),
            };
        };
        let opened = Self::on_plain_thread(|| {
            let (backend, unreached) = self::redis::RedisBackend::open_lazy(r)?;
            if let Some(e) = &unreached {
                tracing::warn!(
                    target: "cachekeeper::state",
                    path = %opts.location(),
                    error = %e,
                    retry_ms = u64::try_from(outage::RETRY_INTERVAL.as_millis()).unwrap_or(u64::MAX),
                    "cannot reach Redis; serving from memory and connecting in the background"
                );
            }
            Ok(Self::start(
                Box::new(backend),
                WriterLimits {
                    retention_days: opts.retention_days,
                    max_bytes: opts.max_bytes,
                    unreached: unreached.is_some(),
                },
                opts.cache_bytes,
            ))
        });
        opened.unwrap_or_else(|e| memory(&e))
    }

    /// Run `f` on a plain thread and wait for it: the Redis backend blocks on a runtime of its
    /// own, which cannot be done from an async task.
    fn on_plain_thread(
        f: impl FnOnce() -> Result<Self, StateError> + Send,
    ) -> Result<Self, StateError> {
        std::thread::scope(|s| {
            s.spawn(f)
                .join()
                .unwrap_or_else(|_| Err(StateError::Redis("the opening thread panicked".into())))
        })
    }

    /// Open the configured store, or say why not (the CLI): a Redis that cannot be reached is
    /// an error here.
    ///
    /// The Redis backend is opened, and the store's start-up reads made, on a plain thread
    /// ([`Self::on_plain_thread`]).
    pub fn open_strict(opts: &StoreOptions) -> Result<Self, StateError> {
        let start = |backend: Box<dyn Backend>| {
            Self::with_backend(
                backend,
                opts.retention_days,
                opts.max_bytes,
                opts.cache_bytes,
            )
        };
        match &opts.redis {
            None => Ok(start(Box::new(SqliteBackend::open(
                &opts.path,
                opts.max_bytes,
            )?))),
            Some(r) => {
                Self::on_plain_thread(|| Ok(start(Box::new(self::redis::RedisBackend::open(r)?))))
            }
        }
    }

    /// A store over any backend: prunes by retention, loads the resident kinds and starts
    /// the writer thread. A backend that cannot be read at start gives an empty cache and a
    /// warning (fail open).
    pub fn with_backend(
        backend: Box<dyn Backend>,
        retention_days: u32,
        max_bytes: u64,
        cache_bytes: u64,
    ) -> Self {
        Self::start(
            backend,
            WriterLimits {
                retention_days,
                max_bytes,
                unreached: false,
            },
            cache_bytes,
        )
    }

    /// [`Self::with_backend`] with the writer's settings. A backend `limits.unreached` is
    /// neither pruned nor read now: the writer starts in an outage and reloads once the
    /// backend answers.
    fn start(mut backend: Box<dyn Backend>, limits: WriterLimits, cache_bytes: u64) -> Self {
        let inner = Arc::new(Inner {
            cache: Mutex::new(Cache::new(cache_bytes)),
            absent: Mutex::new(Absent::default()),
            durable: AtomicBool::new(backend.is_durable() && !limits.unreached),
            persistent: backend.is_durable(),
            stalled: AtomicBool::new(false),
            outage_noted: AtomicBool::new(false),
            shared: backend.is_shared(),
            write_errors: prometheus_client::metrics::counter::Counter::default(),
            writes_dropped: prometheus_client::metrics::counter::Counter::default(),
            backlog: backlog::Backlog::default(),
            write_wait_ms: AtomicU64::new(0),
            write_waits: settle::WaitCounters::default(),
            epoch: AtomicU64::new(0),
        });
        let (tx, rx) = mpsc::channel::<Op>();
        let tx = Arc::new(tx);
        // Before the first read, so no change made after it goes unheard.
        backend.watch(change_sink(&inner, &tx));
        if !limits.unreached {
            prune_all(backend.as_mut(), limits.retention_days);
            for kind in Kind::ALL.into_iter().filter(|k| k.is_resident()) {
                match backend.scan(kind) {
                    Ok(records) => {
                        if let Ok(mut c) = inner.cache.lock() {
                            c.replace_kind(kind, records);
                        }
                    }
                    Err(e) => {
                        inner.durable.store(false, Ordering::Relaxed);
                        tracing::warn!(target: "cachekeeper::state", kind = kind.name(), error = %e, "cannot read stored records; starting without them");
                    }
                }
            }
        }
        let thread_inner = Arc::clone(&inner);
        let spawned = std::thread::Builder::new()
            .name("cachekeeper-state".into())
            .spawn(move || writer_loop(backend, rx, thread_inner, limits));
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(target: "cachekeeper::state", error = %e, "cannot start the state writer; running in memory");
                inner.durable.store(false, Ordering::Relaxed);
                None
            }
        };
        Self { inner, tx }
    }

    /// True while writes reach a durable backend.
    pub fn is_durable(&self) -> bool {
        self.tx.is_some() && self.inner.durable.load(Ordering::Relaxed)
    }

    /// The counter of failed backend writes (`cachekeeper_state_write_errors_total`).
    pub fn write_errors(&self) -> prometheus_client::metrics::counter::Counter {
        self.inner.write_errors.clone()
    }

    /// The counter of writes held in an outage and dropped for the bound
    /// (`cachekeeper_state_writes_dropped_total`, [`outage::MAX_PENDING_RECORDS`]).
    pub fn writes_dropped(&self) -> prometheus_client::metrics::counter::Counter {
        self.inner.writes_dropped.clone()
    }

    /// `[state] write_wait_ms`: how long [`Store::settled`] lets a response's last chunk wait
    /// for the writes queued before it, ms (0: never). Only a shared backend waits.
    pub fn set_write_wait(&self, ms: u64) {
        self.inner.write_wait_ms.store(ms, Ordering::Relaxed);
    }

    /// The counters of [`Store::settled`]'s waits (`cachekeeper_state_write_waits_total`).
    pub fn write_waits(&self) -> settle::WaitCounters {
        self.inner.write_waits.clone()
    }

    /// A response's writes are waited for ([`Self::settled`]): the backend is shared
    /// ([`Backend::is_shared`]) and a write wait is set ([`Store::set_write_wait`]).
    pub fn holds_for_writes(&self) -> bool {
        self.inner.shared && self.inner.write_wait_ms.load(Ordering::Relaxed) > 0
    }

    /// With a shared backend ([`Backend::is_shared`]) and a write wait set
    /// ([`Store::set_write_wait`]): a wait that ends once every write sent so far has
    /// reached the backend, or the backend is found in an outage, or the wait's bound passed
    /// — whichever comes first — counted by how it ended ([`settle`]). `None` otherwise
    /// (nothing to wait for: this process's memory already holds its writes). The wait
    /// never delays the writes themselves or any other request.
    pub fn settled(&self) -> Option<settle::Wait> {
        if !self.holds_for_writes() {
            return None;
        }
        let ms = self.inner.write_wait_ms.load(Ordering::Relaxed);
        if !self.answers() {
            // An outage, or a store that stopped answering: the writes are held or late
            // whatever the wait, so the response does not wait for them.
            self.inner
                .write_waits
                .get_or_create(&[("result", settle::WaitResult::Held.as_str())])
                .inc();
            return None;
        }
        let tx = self.tx.as_ref()?;
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        // A writer that is gone drops the sender: the wait ends at once, counted `held`.
        let _ = tx.send(Op::Settled(done_tx));
        Some(settle::settled(
            done_rx,
            Duration::from_millis(ms),
            self.inner.write_waits.clone(),
        ))
    }

    /// Test hook (the fault tests): apply `fault` to the writer's own backend connection,
    /// after every write sent so far; returns the setting's value as read back, `None` when
    /// the backend refuses or does not answer within 10 s. Not a setting: nothing in the
    /// config or the CLI reaches it.
    #[doc(hidden)]
    #[allow(
        clippy::disallowed_methods,
        reason = "the store's synchronous API waits for its own writer thread: for the CLI and tests; a request reads through the async load phase"
    )]
    pub fn inject_fault(&self, fault: Fault) -> Option<i64> {
        let tx = self.tx.as_ref()?;
        let (reply_tx, reply_rx) = mpsc::channel();
        tx.send(Op::Fault(fault, reply_tx)).ok()?;
        reply_rx.recv_timeout(Duration::from_secs(10)).ok()?
    }

    fn cache(&self) -> Option<MutexGuard<'_, Cache>> {
        self.inner.cache.lock().ok()
    }

    fn send(&self, op: Op) {
        if let Some(tx) = &self.tx {
            if let Op::Put(rec) = &op {
                self.inner.backlog.queued(rec);
            }
            // The writer only stops when the store is dropped.
            let _ = tx.send(op);
        }
    }

    /// The record at `key` if it is in memory. Never touches the backend: the hot path's read.
    pub fn get_cached(&self, key: &RecordKey) -> Option<Record> {
        self.cache()?.get(key)
    }

    /// The record at `key`: from memory, else from the backend, waiting at most `timeout`
    /// (not for the hot path of a request that can do without it). A record read from the
    /// backend enters the cache.
    ///
    /// A key the backend answered it does not have is remembered as absent (up to
    /// [`MAX_ABSENT_KEYS`](cache::MAX_ABSENT_KEYS)) until a write of it or a change by another process: the next
    /// `get` of it answers `None` at once. A timeout or a failed read is not remembered.
    ///
    /// A blocking wait, for tests: a request reads through a [`load::Reads`] and its load
    /// phase ([`Store::load`]).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn get(&self, key: &RecordKey, timeout: Duration) -> Option<Record> {
        self.read_through(key, timeout, true)
    }

    /// [`Store::get`] without keeping a record read from the backend in the read cache: for
    /// records that have a cache of their own (shared transcodes, held by the
    /// `images::cache::TranscodeCache`). Absent keys are remembered as by `get`.
    pub fn read(&self, key: &RecordKey, timeout: Duration) -> Option<Record> {
        self.read_through(key, timeout, false)
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "the store's synchronous API waits for its own writer thread: for the CLI and tests; a request reads through the async load phase"
    )]
    fn read_through(&self, key: &RecordKey, timeout: Duration, keep: bool) -> Option<Record> {
        if let Some(r) = self.get_cached(key) {
            return Some(r);
        }
        if self.known_absent(key) {
            return None;
        }
        let tx = self.tx.as_ref()?;
        let epoch = self.inner.epoch.load(Ordering::SeqCst);
        let (reply_tx, reply_rx) = mpsc::channel();
        tx.send(Op::Get(key.clone(), reply_tx)).ok()?;
        let answer = reply_rx.recv_timeout(timeout).ok()??;
        self.take_answer(key, answer, epoch, keep, false)
    }

    /// Whether the backend is known not to have `key` (it said so, and nothing wrote or
    /// changed the key since): no read is needed.
    pub(crate) fn known_absent(&self, key: &RecordKey) -> bool {
        self.inner.absent.lock().is_ok_and(|a| a.keys.contains(key))
    }

    /// What a read of `key` through the writer answered (`answer`; the read began at
    /// `epoch`): a record newer than this build reads as `None`; a record is kept in the
    /// read cache when `keep`, unless another process changed records since the read began
    /// (what it read may be older than that change). A key the backend does not have gives
    /// this process's own copy (a write queued after the read, a memory-only record), else
    /// `None`, remembered as absent unless `latest` (another instance may write it any time).
    fn take_answer(
        &self,
        key: &RecordKey,
        answer: Option<Record>,
        epoch: u64,
        keep: bool,
        latest: bool,
    ) -> Option<Record> {
        let mut cache = self.cache()?;
        let fresh = self.inner.epoch.load(Ordering::SeqCst) == epoch;
        let Some(rec) = answer else {
            if let Some(r) = cache.get(key) {
                return Some(r);
            }
            if fresh && !latest {
                if let Ok(mut a) = self.inner.absent.lock() {
                    a.insert(key.clone());
                }
            }
            return None;
        };
        if rec.version > rec.key.kind.version() {
            return None;
        }
        if keep && fresh {
            if let Ok(mut a) = self.inner.absent.lock() {
                a.remove(&rec.key);
            }
            cache.insert(rec.clone());
        }
        Some(rec)
    }

    /// Whether a request may wait for the backend now: there is a writer, the backend is not
    /// in a write outage, and no load timed out since the writer's last successful backend
    /// call ([`load`](self::load)).
    pub fn answers(&self) -> bool {
        self.tx.is_some() && !self.in_outage() && !self.inner.stalled.load(Ordering::Relaxed)
    }

    /// A durable backend that stopped taking writes ([`outage`]), or was never reached.
    fn in_outage(&self) -> bool {
        self.inner.persistent && !self.inner.durable.load(Ordering::Relaxed)
    }

    /// The load phase of one request ([`load`](self::load)): read `wants` from the backend,
    /// all in one op of the writer, waiting at most the longest of their waits: an async
    /// wait (a timer over a oneshot), never a blocking one. Returns what was answered in
    /// time, as a [`load::Snapshot`] that reads memory only for the rest.
    ///
    /// Does not wait at all while the store does not answer ([`Store::answers`]): in a write
    /// outage (said once per outage), or after a load that timed out (said once), until the
    /// writer's next successful backend call (said too). What is read enters the read cache
    /// as [`Store::get`]'s reads do (a `latest` want's record replaces the cached copy).
    pub async fn load(&self, wants: &[load::Want]) -> load::Snapshot {
        let mut snapshot = load::Snapshot::memory_only();
        let Some(tx) = self.tx.as_ref().filter(|_| !wants.is_empty()) else {
            return snapshot;
        };
        if self.in_outage() {
            if !self.inner.outage_noted.swap(true, Ordering::Relaxed) {
                tracing::warn!(target: "cachekeeper::state", "state store in an outage: requests read what this process holds in memory, without waiting for the store, until it takes writes again");
            }
            return snapshot;
        }
        self.inner.outage_noted.store(false, Ordering::Relaxed);
        if self.inner.stalled.load(Ordering::Relaxed) {
            return snapshot;
        }
        let wait = wants.iter().map(|w| w.wait).max().unwrap_or_default();
        let epoch = self.inner.epoch.load(Ordering::SeqCst);
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        let keys = wants.iter().map(|w| w.key.clone()).collect();
        if tx.send(Op::Load(keys, reply_tx)).is_err() {
            return snapshot;
        }
        let answers = match tokio::time::timeout(wait, reply_rx).await {
            Ok(Ok(answers)) => answers,
            // The writer is gone: memory only.
            Ok(Err(_)) => return snapshot,
            Err(_) => {
                if !self.inner.stalled.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        target: "cachekeeper::state",
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "the state store did not answer a request's reads in time: requests read what this process holds in memory, without waiting, until the store answers again"
                    );
                }
                return snapshot;
            }
        };
        for (want, answer) in wants.iter().zip(answers) {
            // `None`: the read failed; memory only for that key.
            if let Some(answer) = answer {
                let rec = self.take_answer(&want.key, answer, epoch, true, want.latest);
                snapshot.insert(want.key.clone(), rec);
            }
        }
        snapshot
    }

    /// True when other processes write the same records ([`Backend::is_shared`]).
    pub fn is_shared(&self) -> bool {
        self.inner.shared
    }

    /// Put `rec` in the read cache, and forget that its key was absent.
    fn cache_insert(&self, rec: Record) {
        if let Some(mut c) = self.cache() {
            if let Ok(mut a) = self.inner.absent.lock() {
                a.remove(&rec.key);
            }
            c.insert(rec);
        }
    }

    /// Store `rec`: in memory at once, in the backend by the writer thread.
    pub fn put(&self, rec: Record) {
        if let Some(mut c) = self.cache() {
            if let Ok(mut a) = self.inner.absent.lock() {
                a.remove(&rec.key);
            }
            c.insert(rec.clone());
            if self.tx.is_some() {
                c.note_queued(&rec.key);
            }
        }
        self.send(Op::Put(rec));
    }

    /// Store `rec` in the backend only, by the writer thread, without keeping it in the read
    /// cache: for records the hot path never reads back (each turn's usage record, read by
    /// the report and the dashboard through [`Store::scan`]), whose cache insert and LRU
    /// eviction cost more than the write itself. A cached copy of the key is dropped, so a
    /// later [`Store::get`] reads the backend (behind this write in the queue). Without a
    /// writer thread the record is kept in memory, as [`Store::put`] would.
    pub fn write(&self, rec: Record) {
        if self.tx.is_none() {
            self.cache_insert(rec);
            return;
        }
        if let Some(mut c) = self.cache() {
            if let Ok(mut a) = self.inner.absent.lock() {
                a.remove(&rec.key);
            }
            c.remove(&rec.key);
            c.note_queued(&rec.key);
        }
        self.send(Op::Put(rec));
    }

    /// Hold `rec` in memory only: never written to the backend, gone on restart, evicted like
    /// any cached record when the cache is full (`[state]` cache bound). For user content
    /// that may not reach the disk (the captured carriers of a request without a credential:
    /// no key to seal them with). A store whose cache lock is poisoned drops it (fail open).
    pub fn remember(&self, rec: Record) {
        self.cache_insert(rec);
    }

    /// Read, change and write one record atomically with respect to other updates of the
    /// store's memory: `f` gets the cached record (resident kinds: the stored one) and returns
    /// the record to write, or `None` to leave it. Returns what was written.
    pub(crate) fn update(
        &self,
        key: &RecordKey,
        f: impl FnOnce(Option<&Record>) -> Option<Record>,
    ) -> Option<Record> {
        let mut cache = self.cache()?;
        let current = cache.get(key);
        let next = f(current.as_ref())?;
        if let Ok(mut a) = self.inner.absent.lock() {
            a.remove(&next.key);
        }
        cache.insert(next.clone());
        if self.tx.is_some() {
            cache.note_queued(&next.key);
        }
        drop(cache);
        self.send(Op::Put(next.clone()));
        Some(next)
    }

    /// Delete the record at `key`.
    pub fn delete(&self, key: &RecordKey) {
        if let Some(mut c) = self.cache() {
            c.remove(key);
            if self.tx.is_some() {
                c.note_queued(key);
            }
        }
        self.send(Op::Delete(key.clone()));
    }

    /// Every cached record of `kind`, sorted by key (complete for resident kinds).
    pub fn scan_cached(&self, kind: Kind) -> Vec<Record> {
        self.cache().map(|c| c.scan(kind)).unwrap_or_default()
    }

    /// Every stored record of `kind`, sorted by key, after every write sent so far (read
    /// through the writer thread); waits at most `timeout`. `None` when the backend cannot
    /// say in time. For the report and the dashboard, never the request path.
    #[allow(
        clippy::disallowed_methods,
        reason = "the store's synchronous API waits for its own writer thread: for the CLI and tests; a request reads through the async load phase"
    )]
    pub fn scan(&self, kind: Kind, timeout: Duration) -> Option<Vec<Record>> {
        let tx = self.tx.as_ref()?;
        let (reply_tx, reply_rx) = mpsc::channel();
        tx.send(Op::Scan(kind, reply_tx)).ok()?;
        reply_rx.recv_timeout(timeout).ok()?
    }

    #[cfg_attr(not(test), allow(dead_code))] // the record API: see `Record::new`
    /// Bytes held by the read cache ([`Record::size`] summed).
    pub fn cached_bytes(&self) -> u64 {
        self.cache().map(|c| c.bytes()).unwrap_or(0)
    }

    #[cfg_attr(not(test), allow(dead_code))] // the record API: see `Record::new`
    /// The records' total size in the backend ([`Record::size`] summed), bytes, after every
    /// write sent so far; waits at most `timeout`. `None` when the backend cannot say.
    #[allow(
        clippy::disallowed_methods,
        reason = "the store's synchronous API waits for its own writer thread: for the CLI and tests; a request reads through the async load phase"
    )]
    pub(crate) fn stored_bytes(&self, timeout: Duration) -> Option<u64> {
        let tx = self.tx.as_ref()?;
        let (reply_tx, reply_rx) = mpsc::channel();
        tx.send(Op::TotalBytes(reply_tx)).ok()?;
        reply_rx.recv_timeout(timeout).ok()?
    }

    /// The verdicts view.
    pub fn verdicts(&self) -> Verdicts<'_> {
        Verdicts::new(self)
    }

    /// Wait until every write sent so far has been applied (tests, shutdown, the CLI).
    #[allow(
        clippy::disallowed_methods,
        reason = "the store's synchronous API waits for its own writer thread: for the CLI and tests; a request reads through the async load phase"
    )]
    pub fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (done_tx, done_rx) = mpsc::channel();
            if tx.send(Op::Sync(done_tx)).is_ok() {
                let _ = done_rx.recv_timeout(Duration::from_secs(10));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::cache::MAX_ABSENT_KEYS;
    use crate::writer::{put_batch, reload};

    #[test]
    #[allow(clippy::unwrap_used)]
    fn queued_puts_go_as_one_batch_the_last_put_of_a_key_winning() {
        let (tx, rx) = mpsc::channel();
        let rec = |k: &str, v: &[u8]| Record::new(Kind::Session, "s", k, v.to_vec());
        tx.send(Op::Put(rec("b", b"1"))).unwrap();
        tx.send(Op::Put(rec("a", b"2"))).unwrap();
        tx.send(Op::Delete(rec("a", b"").key)).unwrap();
        tx.send(Op::Put(rec("c", b"3"))).unwrap();
        let mut next = None;
        let batch = put_batch(rec("a", b"0"), &rx, &mut next, Duration::ZERO, &|_| true);
        let got: Vec<(&str, &[u8])> = batch
            .iter()
            .map(|r| (r.key.key.as_str(), r.value.as_slice()))
            .collect();
        assert_eq!(got, vec![("b", &b"1"[..]), ("a", &b"2"[..])]);
        // The delete waits for the batch, and the put after it for the delete.
        assert!(matches!(next, Some(Op::Delete(ref k)) if k.key == "a"));
        assert!(matches!(rx.try_recv(), Ok(Op::Put(ref r)) if r.key.key == "c"));
    }

    /// A provider wording that echoes the rejected value (the failing inputs: a vLLM-style
    /// 400 carrying pydantic's error list, and pydantic's ValidationError text) keeps the
    /// complaint and drops the value; one without an echo is kept as it is.
    #[test]
    fn a_wording_keeps_the_complaint_and_never_the_echoed_value() {
        let repr = "[{'type': 'extra_forbidden', 'loc': ('body', 'messages', 1, 'reasoning_content'), 'msg': 'Extra inputs are not permitted', 'input': 'MY PRIVATE CHAIN OF THOUGHT 43'}]";
        let got = wording_excerpt(repr);
        assert!(!got.contains("PRIVATE"), "{got}");
        assert!(
            got.contains("'msg': 'Extra inputs are not permitted'"),
            "{got}"
        );
        let text = "1 validation error for ChatCompletionRequest\nmessages.1.reasoning_content\n  Extra inputs are not permitted [type=extra_forbidden, input_value='MY PRIVATE CHAIN OF THOUGHT 45', input_type=str]";
        let got = wording_excerpt(text);
        assert!(!got.contains("PRIVATE"), "{got}");
        assert!(
            got.contains("reasoning_content\n  Extra inputs are not permitted"),
            "{got}"
        );
        assert!(got.ends_with(ECHO_CUT), "{got}");
        let json = r#"{"detail":[{"loc":["body","store"],"msg":"Extra inputs are not permitted","input":"secret"}]}"#;
        assert!(!wording_excerpt(json).contains("secret"));
        let plain = "Unrecognized request argument supplied: reasoning_content";
        assert_eq!(wording_excerpt(plain), plain);
        assert_eq!(
            wording_excerpt(&"w".repeat(600)).chars().count(),
            MAX_WORDING_CHARS
        );
    }

    /// Group commit: a put that arrives while the writer gathers joins the batch, and the
    /// first other op (here a flush marker) ends the window at once, whatever its length.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn puts_arriving_within_the_gather_window_join_the_batch_until_another_op() {
        let (tx, rx) = mpsc::channel();
        let rec = |k: &str| Record::new(Kind::Session, "s", k, b"v".to_vec());
        let late = tx.clone();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            late.send(Op::Put(rec("b"))).unwrap();
            let (sync_tx, _sync_rx) = mpsc::channel();
            late.send(Op::Sync(sync_tx)).unwrap();
            late.send(Op::Put(rec("c"))).unwrap();
        });
        let mut next = None;
        // An hour's window: only the flush marker can end it.
        let batch = put_batch(rec("a"), &rx, &mut next, Duration::from_secs(3600), &|_| {
            true
        });
        sender.join().unwrap();
        let keys: Vec<&str> = batch.iter().map(|r| r.key.key.as_str()).collect();
        assert_eq!(keys, vec!["a", "b"]);
        assert!(matches!(next, Some(Op::Sync(_))));
        assert!(matches!(rx.try_recv(), Ok(Op::Put(ref r)) if r.key.key == "c"));
        drop(tx);
    }

    /// `write` reaches the backend without filling the read cache; a cached copy of the key
    /// is dropped (a read then comes from the backend), and an absent mark is forgotten.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn write_goes_to_the_backend_only() {
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20);
        let rec = |v: &[u8]| Record::new(Kind::Usage, "", "s\n00000001", v.to_vec());
        let t = Duration::from_secs(5);
        assert_eq!(store.get(&rec(b"").key, t), None); // remembered as absent
        store.write(rec(b"1"));
        assert_eq!(store.cached_bytes(), 0);
        store.flush();
        assert_eq!(store.scan(Kind::Usage, t).unwrap(), vec![rec(b"1")]);
        assert_eq!(store.get(&rec(b"").key, t).unwrap().value, b"1");
        // The get put it in the cache; a second write drops that copy.
        assert!(store.get_cached(&rec(b"").key).is_some());
        store.write(rec(b"2"));
        assert!(store.get_cached(&rec(b"").key).is_none());
        assert_eq!(store.get(&rec(b"").key, t).unwrap().value, b"2");
    }

    #[test]
    fn kind_table_rows_match_their_kinds() {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(POLICIES[i].kind, kind);
            assert_eq!(kind.policy().kind, kind);
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Kind::Verdict.class(), Class::Pinned);
        assert!(Kind::Verdict.is_resident());
        assert_eq!(Kind::Carrier.retention_days(30), 30);
    }

    /// The failing input: a request echoing many assistant turns with no stored carriers read
    /// the backend once per turn on every request (each read queued behind the writer).
    #[test]
    fn a_key_the_backend_lacks_is_read_once_until_it_is_written() {
        let backend = suite::Instrumented::new();
        let reads = Arc::clone(&backend.reads);
        let store = Store::with_backend(Box::new(backend), 30, 1 << 20, 1 << 20);
        let key = RecordKey {
            kind: Kind::Carrier,
            scope: "s".into(),
            key: "k".into(),
        };
        let wait = Duration::from_secs(5);
        assert_eq!(store.get(&key, wait), None);
        assert_eq!(store.get(&key, wait), None);
        assert_eq!(reads.load(Ordering::SeqCst), 1, "the second miss is known");
        store.put(Record::new(Kind::Carrier, "s", "k", b"v".to_vec()));
        assert_eq!(store.get(&key, wait).map(|r| r.value), Some(b"v".to_vec()));
        // Forgotten from memory (another process changed the store): read again, found.
        reload(
            &mut MemoryBackend::new(),
            &store.inner,
            &outage::Writes::new(String::new(), Default::default(), Default::default()),
        );
        store.flush();
        assert_eq!(store.get(&key, wait).map(|r| r.value), Some(b"v".to_vec()));
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        let mut a = Absent::default();
        for i in 0..MAX_ABSENT_KEYS + 10 {
            a.insert(RecordKey {
                kind: Kind::Carrier,
                scope: String::new(),
                key: i.to_string(),
            });
        }
        assert_eq!(a.keys.len(), MAX_ABSENT_KEYS);
    }
}
