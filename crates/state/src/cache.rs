//! The store's in-memory read cache, bounded in bytes ([`Record::size`] summed).
//!
//! Records of resident kinds ([`Kind::is_resident`]: the verdicts) are never dropped: the
//! hot path must find every one of them without reading the backend. They count towards the
//! bound, and the other records are dropped least recently used first until the total is
//! within it. A record larger than the bound on its own is not kept.

use std::collections::{BTreeMap, HashMap};

use super::{Kind, Record, RecordKey};

struct Entry {
    rec: Record,
    /// Last use, for the LRU order; `None` for resident records.
    tick: Option<u64>,
}

pub(crate) struct Cache {
    cap: u64,
    bytes: u64,
    tick: u64,
    entries: BTreeMap<RecordKey, Entry>,
    /// Non-resident keys by last use, oldest first.
    lru: BTreeMap<u64, RecordKey>,
    /// Resident keys with a local write (put or delete) sent to the writer and not yet taken
    /// from its queue, with how many: what the cache holds for them is newer than anything
    /// the backend can say until then, so another instance's change does not replace it
    /// ([`Self::replace_kind`], the writer's change handling). Only resident kinds are
    /// counted: their writes are rare, and a change elsewhere replaces rather than forgets
    /// them.
    queued: HashMap<RecordKey, u32>,
}

impl Cache {
    /// An empty cache holding at most `cap` bytes (plus resident records beyond it).
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            cap,
            bytes: 0,
            tick: 0,
            entries: BTreeMap::new(),
            lru: BTreeMap::new(),
            queued: HashMap::new(),
        }
    }

    /// A local write of `key` was sent to the writer (counted for resident kinds only).
    pub(crate) fn note_queued(&mut self, key: &RecordKey) {
        if key.kind.is_resident() {
            *self.queued.entry(key.clone()).or_insert(0) += 1;
        }
    }

    /// The writer took a local write of `key` from its queue.
    pub(crate) fn note_dequeued(&mut self, key: &RecordKey) {
        if let Some(n) = self.queued.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.queued.remove(key);
            }
        }
    }

    /// A local write of `key` is still queued for the writer.
    pub(crate) fn is_queued(&self, key: &RecordKey) -> bool {
        self.queued.contains_key(key)
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Insert or replace, then drop least recently used records to stay within the bound.
    pub(crate) fn insert(&mut self, rec: Record) {
        self.remove(&rec.key);
        let tick = if rec.key.kind.is_resident() {
            None
        } else {
            let t = self.next_tick();
            self.lru.insert(t, rec.key.clone());
            Some(t)
        };
        self.bytes = self.bytes.saturating_add(rec.size());
        self.entries.insert(rec.key.clone(), Entry { rec, tick });
        self.shrink();
    }

    /// The record at `key`, marking it used.
    pub(crate) fn get(&mut self, key: &RecordKey) -> Option<Record> {
        let fresh = if key.kind.is_resident() {
            None
        } else {
            Some(self.next_tick())
        };
        let entry = self.entries.get_mut(key)?;
        if let (Some(old), Some(new)) = (entry.tick, fresh) {
            self.lru.remove(&old);
            self.lru.insert(new, key.clone());
            entry.tick = Some(new);
        }
        Some(entry.rec.clone())
    }

    pub(crate) fn remove(&mut self, key: &RecordKey) -> Option<Record> {
        let entry = self.entries.remove(key)?;
        if let Some(t) = entry.tick {
            self.lru.remove(&t);
        }
        self.bytes = self.bytes.saturating_sub(entry.rec.size());
        Some(entry.rec)
    }

    /// Every cached record of `kind`, sorted by key.
    pub(crate) fn scan(&self, kind: Kind) -> Vec<Record> {
        self.entries
            .values()
            .filter(|e| e.rec.key.kind == kind)
            .map(|e| e.rec.clone())
            .collect()
    }

    /// Replace every cached record of `kind` with `records`, except the keys with a local
    /// write still queued ([`Self::note_queued`]): they keep what they have (a record, or
    /// none), which the write will make true in the backend.
    pub(crate) fn replace_kind(&mut self, kind: Kind, records: Vec<Record>) {
        let old: Vec<RecordKey> = self
            .entries
            .keys()
            .filter(|k| k.kind == kind && !self.queued.contains_key(k))
            .cloned()
            .collect();
        for k in &old {
            self.remove(k);
        }
        for r in records {
            if !self.queued.contains_key(&r.key) {
                self.insert(r);
            }
        }
    }

    /// Drop every non-resident record.
    pub(crate) fn clear_non_resident(&mut self) {
        let keys: Vec<RecordKey> = self.lru.values().cloned().collect();
        for k in &keys {
            self.remove(k);
        }
    }

    /// Bytes held.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    fn shrink(&mut self) {
        while self.bytes > self.cap {
            let Some((_, key)) = self.lru.pop_first() else {
                return;
            };
            if let Some(entry) = self.entries.remove(&key) {
                self.bytes = self.bytes.saturating_sub(entry.rec.size());
            }
        }
    }
}

/// Most keys [`Inner::absent`] remembers; the oldest is forgotten first. At ~200 bytes a key,
/// about 13 MiB.
pub(crate) const MAX_ABSENT_KEYS: usize = 65_536;

/// A bounded set of keys known to be absent from the backend, oldest forgotten first.
#[derive(Default)]
pub(crate) struct Absent {
    pub(crate) keys: std::collections::HashSet<RecordKey>,
    pub(crate) order: std::collections::VecDeque<RecordKey>,
}

impl Absent {
    pub(crate) fn insert(&mut self, key: RecordKey) {
        if self.keys.insert(key.clone()) {
            self.order.push_back(key);
        }
        while self.keys.len() > MAX_ABSENT_KEYS {
            match self.order.pop_front() {
                Some(old) => {
                    self.keys.remove(&old);
                }
                None => break,
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &RecordKey) {
        // `order` keeps the stale entry; it is dropped when it comes up (removing a key that
        // is not in `keys` is a no-op).
        self.keys.remove(key);
        if self.order.len() > 2 * MAX_ABSENT_KEYS {
            let keys = &self.keys;
            self.order.retain(|k| keys.contains(k));
        }
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

    fn rec(kind: Kind, key: &str, len: usize) -> Record {
        Record::new(kind, "scope", key, vec![b'x'; len])
    }

    fn key(kind: Kind, key: &str) -> RecordKey {
        RecordKey {
            kind,
            scope: "scope".into(),
            key: key.into(),
        }
    }

    #[test]
    fn bounded_in_bytes_least_recently_used_out_and_resident_kept() {
        // Each record: 64 overhead + 5 scope + 2 key + 1000 value = 1071 bytes.
        let one = rec(Kind::Carrier, "c0", 1000).size();
        assert_eq!(one, 1071);
        let mut c = Cache::new(one * 4);
        c.insert(rec(Kind::Verdict, "v0", 1000));
        for i in 0..3 {
            c.insert(rec(Kind::Carrier, &format!("c{i}"), 1000));
        }
        assert_eq!(c.bytes(), one * 4);
        // Using c0 makes c1 the least recently used.
        assert!(c.get(&key(Kind::Carrier, "c0")).is_some());
        c.insert(rec(Kind::Carrier, "c3", 1000));
        assert_eq!(c.bytes(), one * 4);
        assert!(c.get(&key(Kind::Carrier, "c1")).is_none());
        for k in ["c0", "c2", "c3"] {
            assert!(c.get(&key(Kind::Carrier, k)).is_some(), "{k}");
        }
        // Many more large records: the bound holds and the verdict stays.
        for i in 10..100 {
            c.insert(rec(Kind::Usage, &format!("u{i}"), 1000));
            assert!(c.bytes() <= one * 4);
        }
        assert!(c.get(&key(Kind::Verdict, "v0")).is_some());
        assert!(c.get(&key(Kind::Usage, "u99")).is_some());
        assert!(c.get(&key(Kind::Usage, "u10")).is_none());
        // Resident records are kept even beyond the bound.
        for i in 1..10 {
            c.insert(rec(Kind::Verdict, &format!("v{i}"), 1000));
        }
        assert_eq!(c.scan(Kind::Verdict).len(), 10);
        assert_eq!(c.bytes(), one * 10);
        // A record larger than the bound on its own is not kept.
        c.insert(rec(Kind::Carrier, "huge", 10_000));
        assert!(c.get(&key(Kind::Carrier, "huge")).is_none());
        // Replacing a record does not count it twice.
        c.insert(rec(Kind::Verdict, "v0", 1000));
        assert_eq!(c.bytes(), one * 10);
    }
}
