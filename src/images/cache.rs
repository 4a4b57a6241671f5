//! The transcode cache: process memory, bounded by `[images] transcode_cache_bytes`, least
//! recently used evicted first.
//!
//! Keyed by XXH3 digests ([`key`]) over (credential scope, [`Target`], the base64 text as sent), so one
//! tenant's images never answer another's requests, and a warm request hashes each base64
//! string once and never decodes it again. Transcodes are pure, so the output never depends on
//! whether the cache hit: it only saves time. Failures (corrupt, bomb) are cached too.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::images::codec::{Mode, Target, TranscodeError, Transcoded};

/// A cache key: XXH3 digests of scope, target and input (see [`key`]).
pub(crate) type Key = [u8; 32];

/// What is cached for one key.
pub(crate) type Entry = Result<Transcoded, TranscodeError>;

/// Bytes charged per entry on top of its base64 (map and bookkeeping, an estimate).
pub(crate) const ENTRY_OVERHEAD: u64 = 128;

/// Counters for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

struct Slot {
    entry: Arc<Entry>,
    tick: u64,
    cost: u64,
}

#[derive(Default)]
struct Lru {
    map: HashMap<Key, Slot>,
    /// tick → key, oldest first.
    order: BTreeMap<u64, Key>,
    bytes: u64,
    tick: u64,
    hits: u64,
    misses: u64,
}

/// A bounded, thread-safe LRU of transcodes (one per process, shared by all requests).
pub struct TranscodeCache {
    capacity: u64,
    inner: Mutex<Lru>,
}

impl std::fmt::Debug for TranscodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TranscodeCache")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

impl TranscodeCache {
    /// An empty cache holding at most `capacity_bytes` (base64 plus [`ENTRY_OVERHEAD`] per
    /// entry). 0 disables caching.
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            capacity: capacity_bytes,
            inner: Mutex::new(Lru::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // A panic while holding the lock cannot leave the map inconsistent in a way that
        // matters (worst case a stale byte count); keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached entry for `key`, marking it recently used.
    pub fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.lookup(key, true)
    }

    /// A hit refreshes the entry and counts; a miss counts when `count_miss`.
    fn lookup(&self, key: &Key, count_miss: bool) -> Option<Arc<Entry>> {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let Some(slot) = lru.map.get_mut(key) else {
            if count_miss {
                lru.misses += 1;
            }
            return None;
        };
        let old = std::mem::replace(&mut slot.tick, tick);
        let entry = Arc::clone(&slot.entry);
        lru.order.remove(&old);
        lru.order.insert(tick, *key);
        lru.hits += 1;
        Some(entry)
    }

    /// [`Self::get`] without counting a miss: what a run that defers image work looks up
    /// (`Settings::defer_image_work`); the run that then transcodes counts it.
    pub(crate) fn peek(&self, key: &Key) -> Option<Arc<Entry>> {
        self.lookup(key, false)
    }

    /// Store `entry` under `key`, evicting least recently used entries to stay in capacity.
    /// An entry larger than the whole capacity is not stored.
    pub(crate) fn insert(&self, key: Key, entry: Arc<Entry>) {
        let cost = ENTRY_OVERHEAD
            + match entry.as_ref() {
                Ok(t) => t.b64.len() as u64,
                Err(_) => 0,
            };
        if cost > self.capacity {
            return;
        }
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        if let Some(old) = lru.map.remove(&key) {
            lru.order.remove(&old.tick);
            lru.bytes = lru.bytes.saturating_sub(old.cost);
        }
        while lru.bytes + cost > self.capacity {
            let Some((_, victim)) = lru.order.pop_first() else {
                break;
            };
            if let Some(v) = lru.map.remove(&victim) {
                lru.bytes = lru.bytes.saturating_sub(v.cost);
            }
        }
        lru.map.insert(key, Slot { entry, tick, cost });
        lru.order.insert(tick, key);
        lru.bytes += cost;
    }

    /// The cached entry, or `compute()` stored and returned. `compute` runs outside the lock.
    pub fn get_or_compute(&self, key: Key, compute: impl FnOnce() -> Entry) -> Arc<Entry> {
        if let Some(e) = self.get(&key) {
            return e;
        }
        let entry = Arc::new(compute());
        self.insert(key, Arc::clone(&entry));
        entry
    }

    /// Current counters.
    pub fn stats(&self) -> CacheStats {
        let lru = self.lock();
        CacheStats {
            entries: lru.map.len(),
            bytes: lru.bytes,
            hits: lru.hits,
            misses: lru.misses,
        }
    }
}

/// The cache key of transcoding `raw_b64` (the base64 text as sent) to `target` for the
/// credential `scope`: two XXH3-128 digests (different seeds) over the settings and the text.
///
/// A warm request hashes every agent image to find its transcode, so the hash is on the hot
/// path: XXH3 runs at memory speed where SHA-256 cost about 1 ms per MB (20 screenshots:
/// ~25 ms of a ~30 ms pass). Keys are never exposed and a cache is scoped per credential, so
/// a deliberate collision could only confuse the colliding tenant's own images; an accidental
/// one is a 2^-128-class event.
pub fn key(scope: &str, target: &Target, raw_b64: &str) -> Key {
    let mut header = Vec::with_capacity(64 + scope.len());
    header.extend_from_slice(b"cachekeeper-transcode-v2\0");
    header.extend_from_slice(&(scope.len() as u64).to_le_bytes());
    header.extend_from_slice(scope.as_bytes());
    header.extend_from_slice(&target.max_side.to_le_bytes());
    header.extend_from_slice(&target.max_len.to_le_bytes());
    header.push(u8::from(target.data_url));
    header.push(match target.mode {
        Mode::Downscale => 0,
        Mode::Repair => 1,
    });
    let digest = |seed: u64| {
        let mut h = xxhash_rust::xxh3::Xxh3::with_seed(seed);
        h.update(&header);
        h.update(raw_b64.as_bytes());
        h.digest128().to_le_bytes()
    };
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(&digest(0x6361_6368_656b_6565));
    key[16..].copy_from_slice(&digest(0x7065_725f_7472_616e));
    key
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::images::format::Format;

    fn entry(len: usize) -> Arc<Entry> {
        Arc::new(Ok(Transcoded {
            format: Format::Jpeg,
            b64: "A".repeat(len),
            from: (1, 1),
            to: (1, 1),
        }))
    }

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let c = TranscodeCache::new(3 * (ENTRY_OVERHEAD + 100));
        c.insert([1; 32], entry(100));
        c.insert([2; 32], entry(100));
        c.insert([3; 32], entry(100));
        assert!(c.get(&[1; 32]).is_some()); // 1 is now the newest
        c.insert([4; 32], entry(100)); // evicts 2
        assert!(c.get(&[2; 32]).is_none());
        assert!(c.get(&[1; 32]).is_some());
        assert!(c.get(&[3; 32]).is_some());
        assert!(c.get(&[4; 32]).is_some());
        let s = c.stats();
        assert_eq!((s.entries, s.bytes), (3, 3 * (ENTRY_OVERHEAD + 100)));
        // Too large for the whole cache: not stored; 0 capacity stores nothing.
        c.insert([5; 32], entry(10_000));
        assert!(c.get(&[5; 32]).is_none());
        let none = TranscodeCache::new(0);
        none.insert([1; 32], entry(1));
        assert_eq!(none.stats().entries, 0);
    }

    #[test]
    fn keys_separate_scopes_and_targets() {
        let t = Target {
            max_side: 1568,
            max_len: 262_144,
            data_url: false,
            mode: Mode::Downscale,
        };
        let k = key("a", &t, "AAAA");
        assert_eq!(k, key("a", &t, "AAAA"));
        assert_ne!(k, key("b", &t, "AAAA"));
        assert_ne!(
            k,
            key(
                "a",
                &Target {
                    max_side: 1000,
                    ..t
                },
                "AAAA"
            )
        );
        assert_ne!(
            k,
            key(
                "a",
                &Target {
                    data_url: true,
                    ..t
                },
                "AAAA"
            )
        );
        assert_ne!(k, key("a", &t, "AAAB"));
        assert_ne!(key("ab", &t, "c"), key("a", &t, "bc"));
    }
}
