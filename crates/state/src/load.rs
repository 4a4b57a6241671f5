//! The load phase (`docs/state.md#the-load-phase`): what one request
//! reads from the store, read before its passes with one bounded async wait, never on a
//! runtime worker's thread.
//!
//! The passes read through a [`Reads`]: the store's memory, then the request's [`Snapshot`]
//! (what its load phase read from the backend). A record in neither is, before the load,
//! noted as wanted ([`Want`]) and treated as unknown; the caller then runs
//! [`Store::load`](super::Store::load) over the wanted keys and runs the passes again on the
//! snapshot it returns, which reads memory only and wants nothing more. So the passes never
//! do I/O, and a request whose records are all in memory (the common case) runs them once.
//!
//! While the store does not answer (a write outage, or a load that timed out and no backend
//! call has succeeded since: a Redis that stopped answering), [`Store::load`] does not wait
//! at all: the request reads memory only. It says so once per outage in the log.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use super::{Record, RecordKey, Store};

/// One record a request's passes asked for and the store's memory did not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// The record's key.
    pub key: RecordKey,
    /// Read the backend even though memory may hold a copy: the record other instances may
    /// have replaced since this process cached it ([`Reads::latest`]).
    pub latest: bool,
    /// How long the reader is willing to wait for it (the load waits for the longest of its
    /// wants, once), ms.
    pub wait: Duration,
}

/// Most load rounds of one run of the passes: a record's key can depend on another record (a
/// `previous_response_id` names the session whose record is then read), so a second round may
/// read what the first one's answers named; after it, misses are misses.
pub const MAX_LOADS: usize = 2;

/// What one request's load phase read from the backend: per key asked, the record (`None`:
/// the backend does not have it). A key that is not here was not answered in time (or not
/// asked): memory only.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    records: HashMap<RecordKey, Option<Record>>,
    /// The load phase ran: a miss is a miss, never a want.
    loaded: bool,
}

impl Snapshot {
    /// Before the load phase: misses are wanted.
    pub fn before_load() -> Self {
        Self::default()
    }

    /// Memory only, with no load phase (the CLI's replay, tests): misses are misses.
    pub fn memory_only() -> Self {
        Self {
            records: HashMap::new(),
            loaded: true,
        }
    }

    /// This snapshot with what load round `round` (1, 2, ...) read added; after round
    /// [`MAX_LOADS`] misses are misses.
    pub fn after(mut self, read: Snapshot, round: usize) -> Self {
        self.records.extend(read.records);
        self.loaded = round >= MAX_LOADS;
        self
    }

    /// What the load read for `key`: `Some(Some(rec))` found, `Some(None)` the backend has
    /// no such record, `None` not asked or not answered.
    fn answer(&self, key: &RecordKey) -> Option<&Option<Record>> {
        self.records.get(key)
    }

    pub(super) fn insert(&mut self, key: RecordKey, rec: Option<Record>) {
        self.records.insert(key, rec);
    }
}

/// One run of the passes' view of the store: memory, then the snapshot; a miss before the
/// load is noted ([`Reads::wants`]). Never touches the backend, never waits.
pub struct Reads<'a> {
    store: &'a Store,
    snapshot: &'a Snapshot,
    wanted: RefCell<Vec<Want>>,
}

impl<'a> Reads<'a> {
    /// The view of `store` with what `snapshot` read.
    pub fn new(store: &'a Store, snapshot: &'a Snapshot) -> Self {
        Self {
            store,
            snapshot,
            wanted: RefCell::new(Vec::new()),
        }
    }

    /// The store the view reads.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The record at `key`: memory, else the snapshot; else, before the load, noted as wanted
    /// (read within `wait`) and `None` for now.
    pub fn get(&self, key: &RecordKey, wait: Duration) -> Option<Record> {
        if let Some(r) = self.store.get_cached(key) {
            return Some(r);
        }
        if let Some(answer) = self.snapshot.answer(key) {
            return answer.clone();
        }
        if !self.snapshot.loaded && !self.store.known_absent(key) {
            self.want(key, false, wait);
        }
        None
    }

    /// The record at `key` as the backend holds it now, for a record other instances may
    /// have replaced since this process cached it (a session's last turn, when the turns of
    /// one conversation alternate between instances): with a shared backend
    /// ([`Store::is_shared`]) the snapshot's answer, else (before the load) wanted, and memory
    /// for now or when the backend has no such record or did not answer in time. With any
    /// other backend: [`Reads::get`].
    pub fn latest(&self, key: &RecordKey, wait: Duration) -> Option<Record> {
        if !self.store.is_shared() {
            return self.get(key, wait);
        }
        match self.snapshot.answer(key) {
            Some(Some(rec)) => return Some(rec.clone()),
            Some(None) => {}
            None if !self.snapshot.loaded => self.want(key, true, wait),
            None => {}
        }
        self.store.get_cached(key)
    }

    /// Whether `key` is wanted by this run (asked for, not yet loaded).
    pub fn is_wanted(&self, key: &RecordKey) -> bool {
        self.wanted.borrow().iter().any(|w| &w.key == key)
    }

    /// Whether this run asked for anything the load phase should read.
    pub fn wanting(&self) -> bool {
        !self.wanted.borrow().is_empty()
    }

    /// What this run asked for, in the order asked (each key once).
    pub fn wants(&self) -> Vec<Want> {
        self.wanted.borrow().clone()
    }

    fn want(&self, key: &RecordKey, latest: bool, wait: Duration) {
        let mut w = self.wanted.borrow_mut();
        match w.iter_mut().find(|w| &w.key == key) {
            Some(have) => {
                have.latest |= latest;
                have.wait = have.wait.max(wait);
            }
            None => w.push(Want {
                key: key.clone(),
                latest,
                wait,
            }),
        }
    }
}

/// Tests: run `f` as the passes do: before the load phase and, while it wants records (at most
/// [`MAX_LOADS`] rounds), again on what [`Store::load`] read for it (on a runtime of its own).
#[cfg(any(test, feature = "testing"))]
#[allow(
    clippy::disallowed_methods,
    reason = "tests only (`testing`): a load phase outside a request"
)]
pub fn with_load<T>(store: &Store, f: impl Fn(&Reads<'_>) -> T) -> T {
    #[allow(clippy::expect_used)]
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a test runtime");
    let mut snapshot = Snapshot::before_load();
    let mut round = 0;
    loop {
        let reads = Reads::new(store, &snapshot);
        let out = f(&reads);
        if !reads.wanting() {
            return out;
        }
        round += 1;
        let read = rt.block_on(store.load(&reads.wants()));
        snapshot = snapshot.after(read, round);
    }
}
