//! The writer's answer to a backend that stops taking writes (the file turned read-only, the
//! disk or the file's page cap is full, ...): the proxy goes on serving, the first failure of
//! an outage logs one warning (the backend's location and the error, never a record), every
//! failed write is counted (`cachekeeper_state_write_errors_total`), the records that did not
//! reach the backend are held for retry ([`MAX_PENDING_RECORDS`] at most, the oldest dropped
//! past it and counted in `cachekeeper_state_writes_dropped_total`) and retried every
//! [`RETRY_INTERVAL`]; the first retry that succeeds ends the outage with one info line,
//! `state writes resumed`. With no held write to retry, a backend that can say whether it
//! answers without writing ([`Backend::probe`]: Redis) is asked instead.
//!
//! A backend that could not be reached when the store opened (Redis down at start) starts
//! in an outage ([`Writes::start_unreached`]; the store logged its one warning): the same
//! holding and retrying, and the first success logs `state store reachable; using it from
//! now on` instead.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::{Backend, Kind, Record, RecordKey, StateError};

/// Most keys whose last write is held for retry during an outage; past it the oldest held
/// write is dropped (the record stays in the read cache while the cache keeps it, and is gone
/// on restart). A session record and a usage record per turn: about two thousand turns.
pub(crate) const MAX_PENDING_RECORDS: usize = 4096;

/// How often the writer retries the held writes while the backend refuses them. One failing
/// transaction a second costs nothing noticeable and bounds how long a recovered file goes
/// unused.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// Injected faults (the fault tests' hook, [`super::Store::inject_fault`]): SQLite settings of
/// the writer's own connection, which no other connection can change.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `PRAGMA query_only`: every write fails as on a read-only file (`SQLITE_READONLY`).
    ReadOnly(bool),
    /// `PRAGMA max_page_count`: the file may not grow past this many pages (SQLite keeps it at
    /// least the current size), so a write that needs a page fails with `SQLITE_FULL`.
    MaxPageCount(u64),
    /// The writer thread stops answering for this many ms (it sleeps, as a writer blocked on
    /// a backend that stopped answering: a Redis under `kill -STOP`), after replying with the
    /// value. Any backend.
    StallMs(u64),
}

/// The last write of each key that did not reach the backend: a record to put, or `None` to
/// delete it. Bounded by [`MAX_PENDING_RECORDS`] keys, the oldest dropped first.
#[derive(Default)]
struct Pending {
    /// Per key: the write's sequence number and the write.
    ops: BTreeMap<RecordKey, (u64, Option<Record>)>,
    /// Keys in the order written (entries whose sequence number is no longer the key's are
    /// stale, dropped when they come up).
    order: VecDeque<(u64, RecordKey)>,
    seq: u64,
    /// Writes dropped for the bound this outage.
    dropped: usize,
}

impl Pending {
    /// Hold `op` as the last write of `key`; returns how many held writes were dropped for
    /// the bound (0 or 1).
    fn hold(&mut self, key: RecordKey, op: Option<Record>) -> u64 {
        let before = self.dropped;
        self.seq += 1;
        self.ops.insert(key.clone(), (self.seq, op));
        self.order.push_back((self.seq, key));
        while self.ops.len() > MAX_PENDING_RECORDS {
            let Some((seq, key)) = self.order.pop_front() else {
                break;
            };
            if self.ops.get(&key).is_some_and(|(s, _)| *s == seq) {
                self.ops.remove(&key);
                self.dropped += 1;
            }
        }
        if self.order.len() > 2 * MAX_PENDING_RECORDS {
            let ops = &self.ops;
            self.order
                .retain(|(seq, key)| ops.get(key).is_some_and(|(s, _)| s == seq));
        }
        u64::try_from(self.dropped - before).unwrap_or(u64::MAX)
    }

    fn len(&self) -> usize {
        self.ops.len()
    }
}

/// The outage in progress.
struct Outage {
    since: Instant,
    last_try: Instant,
    pending: Pending,
    /// Began when the store opened (the backend was never reached).
    at_start: bool,
}

/// Whether the backend takes writes, and what it refused meanwhile.
pub(crate) struct Writes {
    /// Where the backend writes ([`Backend::location`]), for the log lines.
    location: String,
    /// `cachekeeper_state_write_errors_total`.
    errors: Counter,
    /// `cachekeeper_state_writes_dropped_total`: held writes dropped for the bound.
    dropped: Counter,
    outage: Option<Outage>,
}

impl Writes {
    pub(crate) fn new(location: String, errors: Counter, dropped: Counter) -> Self {
        Self {
            location,
            errors,
            dropped,
            outage: None,
        }
    }

    /// An outage is in progress: new writes are held, not tried, until the next retry.
    pub(crate) fn failing(&self) -> bool {
        self.outage.is_some()
    }

    /// A write failed: count it; the first failure of an outage starts it, with one warning.
    pub(crate) fn failed(&mut self, e: &StateError, durable: &AtomicBool) {
        self.errors.inc();
        durable.store(false, Ordering::Relaxed);
        if self.outage.is_none() {
            tracing::warn!(
                target: "cachekeeper::state",
                path = %self.location,
                error = %e,
                retry_ms = u64::try_from(RETRY_INTERVAL.as_millis()).unwrap_or(u64::MAX),
                "state writes failing; serving on, keeping records in memory and retrying"
            );
            let now = Instant::now();
            self.outage = Some(Outage {
                since: now,
                last_try: now,
                pending: Pending::default(),
                at_start: false,
            });
        }
    }

    /// The backend could not be reached when the store opened (already logged): start in an
    /// outage, so writes are held and retried from the first one, with no second warning.
    pub(crate) fn start_unreached(&mut self) {
        let now = Instant::now();
        self.outage = Some(Outage {
            since: now,
            last_try: now,
            pending: Pending::default(),
            at_start: true,
        });
    }

    /// Hold these puts for the retry (call after [`Self::failed`] or while [`Self::failing`]).
    pub(crate) fn hold_puts(&mut self, recs: Vec<Record>) {
        if let Some(o) = &mut self.outage {
            for rec in recs {
                self.dropped
                    .inc_by(o.pending.hold(rec.key.clone(), Some(rec)));
            }
        }
    }

    /// Hold this delete for the retry.
    pub(crate) fn hold_delete(&mut self, key: RecordKey) {
        if let Some(o) = &mut self.outage {
            self.dropped.inc_by(o.pending.hold(key, None));
        }
    }

    /// The held write of `key`, if any: `Some(Some(rec))` a put, `Some(None)` a delete.
    pub(crate) fn held(&self, key: &RecordKey) -> Option<Option<Record>> {
        let o = self.outage.as_ref()?;
        o.pending.ops.get(key).map(|(_, op)| op.clone())
    }

    /// `stored` (a backend scan of `kind`, sorted by key) with the held writes of `kind`
    /// applied.
    pub(crate) fn overlay(&self, kind: Kind, stored: Vec<Record>) -> Vec<Record> {
        let Some(o) = &self.outage else {
            return stored;
        };
        let mut by_key: BTreeMap<RecordKey, Record> =
            stored.into_iter().map(|r| (r.key.clone(), r)).collect();
        for (key, (_, op)) in o.pending.ops.iter().filter(|(k, _)| k.kind == kind) {
            match op {
                Some(rec) => by_key.insert(key.clone(), rec.clone()),
                None => by_key.remove(key),
            };
        }
        by_key.into_values().collect()
    }

    /// How long the writer may wait for the next op: `idle`, or less when a retry is due
    /// sooner.
    pub(crate) fn wait(&self, idle: Duration) -> Duration {
        match &self.outage {
            Some(o) => RETRY_INTERVAL
                .saturating_sub(o.last_try.elapsed())
                .min(idle),
            None => idle,
        }
    }

    /// Retry the held writes when [`RETRY_INTERVAL`] has passed since the last try (`now`:
    /// at once, as for a flush). The puts go as one transaction, then the deletes; the first
    /// success ends the outage (`state writes resumed`, durable again). With nothing held, a
    /// successful [`Backend::probe`] ends it. Returns true when it wrote something.
    pub(crate) fn retry(
        &mut self,
        backend: &mut dyn Backend,
        durable: &AtomicBool,
        now: bool,
    ) -> bool {
        let Some(o) = &mut self.outage else {
            return false;
        };
        if !now && o.last_try.elapsed() < RETRY_INTERVAL {
            return false;
        }
        if o.pending.len() == 0 {
            // Nothing to prove the backend works again with: ask it, if it can say without a
            // write; otherwise the next write will.
            let Some(answer) = backend.probe() else {
                return false;
            };
            o.last_try = Instant::now();
            if answer.is_ok() {
                let is_durable = backend.is_durable();
                self.end(0, durable, is_durable);
            }
            return false;
        }
        o.last_try = Instant::now();
        let puts: Vec<Record> = o
            .pending
            .ops
            .values()
            .filter_map(|(_, op)| op.clone())
            .collect();
        let written = puts.len();
        let done = backend.put_all(&puts).and_then(|()| {
            // Written: forget the puts, then delete one by one (a failure keeps the rest).
            o.pending.ops.retain(|_, (_, op)| op.is_none());
            let deletes: Vec<RecordKey> = o.pending.ops.keys().cloned().collect();
            for key in deletes {
                backend.delete(&key)?;
                o.pending.ops.remove(&key);
            }
            Ok(())
        });
        match done {
            Ok(()) => {
                self.end(written, durable, backend.is_durable());
                true
            }
            Err(_) => {
                // Same outage: counted, not logged again.
                self.errors.inc();
                false
            }
        }
    }
}

impl Writes {
    /// The outage is over (`written` held puts reached the backend): one info line, and the
    /// store is `is_durable` again as the backend is.
    fn end(&mut self, written: usize, durable: &AtomicBool, is_durable: bool) {
        if let Some(o) = self.outage.take() {
            let outage_ms = u64::try_from(o.since.elapsed().as_millis()).unwrap_or(u64::MAX);
            if o.at_start {
                tracing::info!(
                    target: "cachekeeper::state",
                    path = %self.location,
                    records = written,
                    dropped = o.pending.dropped,
                    outage_ms,
                    "state store reachable; using it from now on"
                );
            } else {
                tracing::info!(
                    target: "cachekeeper::state",
                    path = %self.location,
                    records = written,
                    dropped = o.pending.dropped,
                    outage_ms,
                    "state writes resumed"
                );
            }
        }
        durable.store(is_durable, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Backend;

    fn rec(key: &str, v: &[u8]) -> Record {
        Record::new(Kind::Session, "s", key, v.to_vec())
    }

    #[test]
    fn held_writes_are_bounded_the_last_of_a_key_winning_and_written_on_recovery() {
        let mut b = crate::suite::Instrumented::new();
        b.broken = true;
        b.inner.put(&rec("gone", b"old")).unwrap();
        let durable = AtomicBool::new(true);
        let errors = Counter::default();
        let dropped = Counter::default();
        let mut w = Writes::new("test".into(), errors.clone(), dropped.clone());
        let e = b.put(&rec("a", b"1")).unwrap_err();
        w.failed(&e, &durable);
        assert!(w.failing() && !durable.load(Ordering::Relaxed));
        w.hold_puts(vec![rec("a", b"1"), rec("b", b"1")]);
        w.hold_puts(vec![rec("a", b"2")]);
        w.hold_delete(rec("gone", b"").key);
        assert_eq!(w.held(&rec("a", b"").key), Some(Some(rec("a", b"2"))));
        let scan = w.overlay(Kind::Session, b.scan(Kind::Session).unwrap());
        let keys: Vec<&str> = scan.iter().map(|r| r.key.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        // Still broken: counted, the outage goes on.
        assert!(!w.retry(&mut b, &durable, true));
        assert_eq!(errors.get(), 2);
        assert!(w.failing());
        b.broken = false;
        assert!(w.retry(&mut b, &durable, true));
        assert!(!w.failing() && durable.load(Ordering::Relaxed));
        assert_eq!(errors.get(), 2);
        let stored: Vec<(String, Vec<u8>)> = b
            .scan(Kind::Session)
            .unwrap()
            .into_iter()
            .map(|r| (r.key.key, r.value))
            .collect();
        assert_eq!(
            stored,
            [("a".into(), b"2".to_vec()), ("b".into(), b"1".to_vec())]
        );
        assert_eq!(dropped.get(), 0);
        // The bound: the oldest held keys go first.
        let mut p = Pending::default();
        for i in 0..MAX_PENDING_RECORDS + 3 {
            p.hold(rec(&i.to_string(), b"").key, None);
            p.hold(rec("hot", b"").key, None);
        }
        assert_eq!(p.len(), MAX_PENDING_RECORDS);
        assert!(p.order.len() <= 2 * MAX_PENDING_RECORDS + 1);
        assert!(p.ops.contains_key(&rec("hot", b"").key));
        assert!(!p.ops.contains_key(&rec("0", b"").key));
        assert_eq!(p.dropped, 4);
        // Every drop is counted in cachekeeper_state_writes_dropped_total.
        w.failed(&e, &durable);
        let keys = MAX_PENDING_RECORDS + 10;
        w.hold_puts((0..keys).map(|i| rec(&i.to_string(), b"v")).collect());
        assert_eq!(dropped.get(), 10);
        w.hold_delete(rec("one more", b"").key);
        assert_eq!(dropped.get(), 11);
        // The newest are kept and written on recovery.
        assert!(w.retry(&mut b, &durable, true));
        let stored = b.scan(Kind::Session).unwrap();
        assert!(stored.iter().any(|r| r.key.key == (keys - 1).to_string()));
        assert!(!stored.iter().any(|r| r.key.key == "0"));
    }
}
