//! The bound of the writer's queue: how many records, and how many bytes of them
//! ([`super::Record::size`]), may wait for a backend that is slower than the proxy's writes
//! (a slow disk, a distant or overloaded Redis: slow, not failing; a failing one is an
//! outage, [`super::outage`]). Past either bound the writer drops the oldest queued puts as it
//! takes them, without writing them, and counts them in
//! `cachekeeper_state_writes_dropped_total`, as an outage drops its oldest held writes. A
//! dropped record stays in the read cache while the cache keeps it, and is gone on restart.
//! One line says when dropping starts, one how many were dropped when the queue is back
//! under its bounds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;

use super::Record;

/// Most puts queued for the writer; past it the oldest are dropped. A session record and a
/// usage record per turn: about 32,000 turns behind.
pub(crate) const MAX_QUEUED_RECORDS: u64 = 65_536;

/// Most bytes of queued puts ([`Record::size`] summed), bytes; past it the oldest are
/// dropped. The read cache's default bound ([`super::DEFAULT_CACHE_BYTES`]): the queue never
/// holds more than the cache it feeds.
pub(crate) const MAX_QUEUED_BYTES: u64 = super::DEFAULT_CACHE_BYTES;

/// The writer queue's size, kept by the senders ([`Backlog::queued`]) and the writer
/// ([`Backlog::take`]).
#[derive(Debug)]
pub(crate) struct Backlog {
    records: AtomicU64,
    bytes: AtomicU64,
    max_records: u64,
    max_bytes: u64,
    /// Dropping has started (and was said).
    dropping: AtomicBool,
    /// Puts dropped since dropping started.
    dropped_now: AtomicU64,
}

impl Default for Backlog {
    fn default() -> Self {
        Self::with_bounds(MAX_QUEUED_RECORDS, MAX_QUEUED_BYTES)
    }
}

impl Backlog {
    /// A backlog bounded at `max_records` puts and `max_bytes` bytes.
    pub(crate) fn with_bounds(max_records: u64, max_bytes: u64) -> Self {
        Self {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            max_records,
            max_bytes,
            dropping: AtomicBool::new(false),
            dropped_now: AtomicU64::new(0),
        }
    }

    /// A sender queued `rec`.
    pub(crate) fn queued(&self, rec: &Record) {
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(rec.size(), Ordering::Relaxed);
    }

    /// The writer took `rec`, the oldest queued put: true when it is to be dropped, not
    /// written, because the queue (counting it) is past a bound; counted in `dropped`.
    pub(crate) fn take(&self, rec: &Record, dropped: &Counter) -> bool {
        let size = rec.size();
        let records = self.records.fetch_sub(1, Ordering::Relaxed);
        let bytes = self.bytes.fetch_sub(size, Ordering::Relaxed);
        let over = records > self.max_records || bytes > self.max_bytes;
        if over {
            dropped.inc();
            self.dropped_now.fetch_add(1, Ordering::Relaxed);
            if !self.dropping.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    target: "cachekeeper::state",
                    max_records = self.max_records,
                    max_bytes = self.max_bytes,
                    "the state store is slower than the proxy's writes: the oldest queued writes are dropped (cachekeeper_state_writes_dropped_total) until the queue is back under its bounds"
                );
            }
        } else if self.dropping.swap(false, Ordering::Relaxed) {
            let n = self.dropped_now.swap(0, Ordering::Relaxed);
            tracing::info!(target: "cachekeeper::state", dropped = n, "the state writer's queue is back under its bounds");
        }
        over
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use crate::Kind;

    fn rec(i: u32, bytes: usize) -> Record {
        Record::new(Kind::Usage, "s", &format!("k{i}"), vec![0; bytes])
    }

    #[test]
    fn the_oldest_puts_past_a_bound_are_dropped_and_counted() {
        let dropped = Counter::default();
        // Three records at most.
        let b = Backlog::with_bounds(3, u64::MAX);
        let recs: Vec<Record> = (0..5).map(|i| rec(i, 10)).collect();
        for r in &recs {
            b.queued(r);
        }
        // Five queued: the two oldest go, the three newest are written.
        let kept: Vec<bool> = recs.iter().map(|r| !b.take(r, &dropped)).collect();
        assert_eq!(kept, [false, false, true, true, true]);
        assert_eq!(dropped.get(), 2);
        // Back under the bound: nothing more is dropped.
        b.queued(&recs[0]);
        assert!(!b.take(&recs[0], &dropped));
        assert_eq!(dropped.get(), 2);
    }

    #[test]
    fn the_byte_bound_drops_as_the_record_bound_does() {
        let dropped = Counter::default();
        let r = rec(0, 1000);
        let b = Backlog::with_bounds(u64::MAX, 2 * r.size());
        for _ in 0..4 {
            b.queued(&r);
        }
        let kept: Vec<bool> = (0..4).map(|_| !b.take(&r, &dropped)).collect();
        assert_eq!(kept, [false, false, true, true]);
        assert_eq!(dropped.get(), 2);
    }
}
