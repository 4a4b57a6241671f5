//! A [`Backend`] in process memory: what the store falls back to when no file can be used,
//! and the reference every backend is tested against (`suite.rs`). Nothing survives a
//! restart; `max_bytes` eviction bounds it like any other backend.

use std::collections::BTreeMap;

use super::{Backend, Kind, Record, RecordKey, StateError};

/// Records in a map. Never fails.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    records: BTreeMap<RecordKey, Record>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Backend for MemoryBackend {
    fn is_durable(&self) -> bool {
        false
    }

    fn put(&mut self, rec: &Record) -> Result<(), StateError> {
        self.records.insert(rec.key.clone(), rec.clone());
        Ok(())
    }

    fn get(&mut self, key: &RecordKey) -> Result<Option<Record>, StateError> {
        Ok(self.records.get(key).cloned())
    }

    fn delete(&mut self, key: &RecordKey) -> Result<bool, StateError> {
        Ok(self.records.remove(key).is_some())
    }

    fn scan(&mut self, kind: Kind) -> Result<Vec<Record>, StateError> {
        Ok(self
            .records
            .values()
            .filter(|r| r.key.kind == kind)
            .cloned()
            .collect())
    }

    fn total_bytes(&mut self) -> Result<u64, StateError> {
        Ok(self.records.values().map(Record::size).sum())
    }

    fn oldest(
        &mut self,
        kinds: &[Kind],
        limit: usize,
    ) -> Result<Vec<(RecordKey, u64)>, StateError> {
        let mut all: Vec<&Record> = self
            .records
            .values()
            .filter(|r| kinds.contains(&r.key.kind))
            .collect();
        // The order SQLite gives: age, then kind name, scope, key.
        all.sort_by(|a, b| {
            (a.written_at, a.key.kind.name(), &a.key.scope, &a.key.key).cmp(&(
                b.written_at,
                b.key.kind.name(),
                &b.key.scope,
                &b.key.key,
            ))
        });
        Ok(all
            .into_iter()
            .take(limit)
            .map(|r| (r.key.clone(), r.size()))
            .collect())
    }

    fn prune(&mut self, kind: Kind, cutoff: i64) -> Result<usize, StateError> {
        let before = self.records.len();
        self.records
            .retain(|k, r| k.kind != kind || r.written_at >= cutoff);
        Ok(before - self.records.len())
    }

    fn changed_elsewhere(&mut self) -> Result<bool, StateError> {
        Ok(false)
    }
}
