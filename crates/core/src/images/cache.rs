//! The transcode cache: process memory, bounded by `[images] transcode_cache_bytes`, least
//! recently used evicted first.
//!
//! Keyed by XXH3 digests ([`key`]) over (credential scope, [`Target`], the base64 text as sent), so one
//! tenant's images never answer another's requests, and a warm request hashes each base64
//! string once and never decodes it again. Transcodes are pure, so the output never depends on
//! whether the cache hit: it only saves time. Failures (corrupt, bomb) are cached too.
//!
//! **Shared across instances** (`[state] share_transcodes = true`, with the Redis backend:
//! [`TranscodeCache::shared`]): a transcode computed here is also written to the state store
//! as a [`Kind::Transcode`] record (scope: the credential scope; key: the cache key in hex),
//! its value sealed under the request credential's key like a carrier record
//! ([`crate::state::seal`]: XChaCha20-Poly1305, the key from HKDF-SHA256 of the credential,
//! the record's kind, scope and key as associated data), with the store's retention as its
//! TTL. A miss here reads the store before decoding ([`SHARED_READ_WAIT_MS`]), so another
//! instance serves the same bytes without decoding. A request without a credential shares
//! nothing (no key to seal with), and failures (corrupt, bomb) stay in this process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::images::codec::{Mode, Target, TranscodeError, Transcoded};
use crate::images::format::Format;
use crate::state::seal::{self, SealKey};
use crate::state::{Kind, Record, RecordKey, Store};

/// How long a miss waits for the shared store's answer before decoding itself, ms: the
/// store's bound for reading one carrier turn (`docs/state.md#carrier-records`), and less
/// than decoding a screenshot takes (tens of ms).
pub(crate) const SHARED_READ_WAIT_MS: u64 = 50;

/// `cachekeeper_shared_transcodes_total` (`docs/metrics.md`): transcodes shared through the
/// store, by `result` ([`SHARED_READ`], [`SHARED_WRITTEN`]). Registered by
/// [`crate::metrics::Metrics::with_shared_transcodes`]; no series appears while sharing is
/// off.
pub type SharedCounts = Family<[(&'static str, String); 1], Counter>;

/// `result` of a miss here answered by another instance's transcode from the store (served
/// without decoding).
pub(crate) const SHARED_READ: &str = "read";

/// `result` of a transcode computed here and written to the store for the other instances.
pub(crate) const SHARED_WRITTEN: &str = "written";

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
    /// Of `misses`: answered by another instance's transcode from the shared store.
    pub shared_hits: u64,
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
    shared_hits: u64,
}

/// A bounded, thread-safe LRU of transcodes (one per process, shared by all requests).
pub struct TranscodeCache {
    capacity: u64,
    inner: Mutex<Lru>,
    /// `[state] share_transcodes`: the store transcodes are shared through.
    shared: Option<Store>,
    /// Shared transcodes read and written ([`SharedCounts`]).
    shared_counts: SharedCounts,
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
            shared: None,
            shared_counts: SharedCounts::default(),
        }
    }

    /// [`Self::new`], sharing transcodes with other instances through `store` (module docs).
    pub fn shared(capacity_bytes: u64, store: Store) -> Self {
        Self {
            shared: Some(store),
            ..Self::new(capacity_bytes)
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

    /// The counters of shared transcodes, for `/metrics` (a handle on the same counts).
    pub fn shared_counts(&self) -> SharedCounts {
        self.shared_counts.clone()
    }

    fn count_shared(&self, result: &'static str) {
        self.shared_counts
            .get_or_create(&[("result", result.to_owned())])
            .inc();
    }

    /// Current counters.
    pub fn stats(&self) -> CacheStats {
        let lru = self.lock();
        CacheStats {
            entries: lru.map.len(),
            bytes: lru.bytes,
            hits: lru.hits,
            misses: lru.misses,
            shared_hits: lru.shared_hits,
        }
    }
}

/// The transcode cache as one request uses it: with the request credential's sealing key,
/// for the shared layer (module docs). Cheap to copy.
#[derive(Clone, Copy)]
pub struct Transcodes<'a> {
    cache: &'a TranscodeCache,
    sealing: Option<&'a SealKey>,
}

impl std::fmt::Debug for Transcodes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcodes")
            .field("cache", self.cache)
            .field("sealed", &self.sealing.is_some())
            .finish()
    }
}

impl<'a> From<&'a TranscodeCache> for Transcodes<'a> {
    /// `cache` without a credential: nothing is shared.
    fn from(cache: &'a TranscodeCache) -> Self {
        Self {
            cache,
            sealing: None,
        }
    }
}

impl<'a> Transcodes<'a> {
    /// `cache` for a request whose credential seals with `sealing` (`None`: no credential,
    /// nothing shared).
    pub(crate) fn sealed(cache: &'a TranscodeCache, sealing: Option<&'a SealKey>) -> Self {
        Self { cache, sealing }
    }

    /// This process's entry only ([`TranscodeCache::peek`]): a run that defers image work
    /// never waits on the store.
    pub(crate) fn peek(&self, key: &Key) -> Option<Arc<Entry>> {
        self.cache.peek(key)
    }

    /// The entry for `key`: from this process, else (sharing, with a credential) another
    /// instance's from the store, else `compute()` (stored here, and shared when it
    /// succeeded). `scope` is the credential scope `key` was made with.
    pub(crate) fn get_or_compute(
        &self,
        key: Key,
        scope: &str,
        compute: impl FnOnce() -> Entry,
    ) -> Arc<Entry> {
        if let Some(e) = self.cache.get(&key) {
            return e;
        }
        // Only while the store reaches Redis: during an outage (or on the in-memory store a
        // Redis unreachable at start gives) a transcode is neither looked up nor held for
        // retry (hundreds of KiB each; the outage's held writes are for what the next turn
        // needs).
        let share = self
            .cache
            .shared
            .as_ref()
            .filter(|s| s.is_durable())
            .zip(self.sealing);
        // A store that stopped answering (a load timed out, [`Store::load`]) is not waited
        // for: the transcode is computed here.
        let read_from = share.filter(|(s, _)| s.answers());
        if let Some((store, sealing)) = read_from {
            let rk = record_key(scope, &key);
            let found = store
                .read(&rk, Duration::from_millis(SHARED_READ_WAIT_MS))
                .and_then(|rec| seal::open(sealing, &seal::record_aad(&rk), &rec.value))
                .and_then(|plain| decode_shared(&plain));
            if let Some(t) = found {
                let entry = Arc::new(Ok(t));
                self.cache.insert(key, Arc::clone(&entry));
                self.cache.lock().shared_hits += 1;
                self.cache.count_shared(SHARED_READ);
                return entry;
            }
        }
        let entry = Arc::new(compute());
        self.cache.insert(key, Arc::clone(&entry));
        if let (Some((store, sealing)), Ok(t)) = (share, entry.as_ref()) {
            let rk = record_key(scope, &key);
            let sealed = encode_shared(t)
                .and_then(|plain| seal::seal(sealing, &seal::record_aad(&rk), &plain));
            if let Some(value) = sealed {
                store.write(Record::new(Kind::Transcode, &rk.scope, &rk.key, value));
                self.cache.count_shared(SHARED_WRITTEN);
            }
        }
        entry
    }
}

/// The store record of `key`'s transcode for `scope`: the key in lowercase hex.
fn record_key(scope: &str, key: &Key) -> RecordKey {
    use std::fmt::Write;
    let mut hex = String::with_capacity(64);
    for b in key {
        let _ = write!(hex, "{b:02x}");
    }
    RecordKey {
        kind: Kind::Transcode,
        scope: scope.to_owned(),
        key: hex,
    }
}

/// A shared transcode's plaintext (before sealing): JSON
/// `{"format":"png"|"jpeg","from":[w,h],"to":[w,h],"b64":"..."}`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Shared<'a> {
    format: &'a str,
    from: (u32, u32),
    to: (u32, u32),
    #[serde(borrow)]
    b64: std::borrow::Cow<'a, str>,
}

/// `None` for an output format the codec does not produce (only PNG and JPEG are shared).
fn encode_shared(t: &Transcoded) -> Option<Vec<u8>> {
    let format = match t.format {
        Format::Png => "png",
        Format::Jpeg => "jpeg",
        _ => return None,
    };
    serde_json::to_vec(&Shared {
        format,
        from: t.from,
        to: t.to,
        b64: std::borrow::Cow::Borrowed(&t.b64),
    })
    .ok()
}

/// The transcode in a shared record's plaintext; `None` for anything else (a newer or
/// foreign payload is a miss, never misread).
fn decode_shared(plain: &[u8]) -> Option<Transcoded> {
    let s: Shared<'_> = serde_json::from_slice(plain).ok()?;
    let format = match s.format {
        "png" => Format::Png,
        "jpeg" => Format::Jpeg,
        _ => return None,
    };
    Some(Transcoded {
        format,
        b64: s.b64.into_owned(),
        from: s.from,
        to: s.to,
    })
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
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
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

    /// A real PNG of `w`×`h` noisy pixels, base64.
    fn noisy_png_b64(w: u32, h: u32) -> String {
        use base64::Engine;
        let img = image::RgbImage::from_fn(w, h, |x, y| {
            let v = (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)) as u8;
            image::Rgb([v, v.wrapping_add(85), v.wrapping_mul(3)])
        });
        let mut png = Vec::new();
        img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        base64::engine::general_purpose::STANDARD.encode(png)
    }

    /// Two instances' stores on one Redis (share_transcodes): B serves A's transcode without
    /// decoding, byte for byte what a decode gives; the stored value is sealed (no base64
    /// text in Redis) and expires with retention; another credential finds nothing it can
    /// open; with sharing off, or without a credential, nothing is written.
    #[test]
    #[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
    fn a_shared_transcode_serves_another_instance_for_the_same_credential_only() {
        use crate::state::redis::test_server::RedisServer;
        use crate::state::redis::{codec, RedisBackend, RedisOptions};
        use crate::state::DEFAULT_CACHE_BYTES;

        let server = RedisServer::start();
        let store = || {
            let b = RedisBackend::open(&RedisOptions {
                url: server.url(0),
                read_timeout: Duration::from_secs(10),
                retention_days: 30,
                ca_file: None,
            })
            .unwrap();
            Store::with_backend(Box::new(b), 30, u64::MAX, DEFAULT_CACHE_BYTES)
        };
        let (store_a, store_b) = (store(), store());
        let a = TranscodeCache::shared(64 << 20, store_a.clone());
        let b = TranscodeCache::shared(64 << 20, store_b.clone());
        let cred_1 = SealKey::from_bytes([1; seal::KEY_BYTES]);
        let cred_2 = SealKey::from_bytes([2; seal::KEY_BYTES]);
        let raw = noisy_png_b64(900, 600);
        let target = Target {
            max_side: 300,
            max_len: 1 << 20,
            data_url: false,
            mode: Mode::Downscale,
        };
        let fresh = crate::images::codec::transcode(&raw, &target).unwrap();
        let k = key("scope-1", &target, &raw);
        let on_a = Transcodes::sealed(&a, Some(&cred_1)).get_or_compute(k, "scope-1", || {
            crate::images::codec::transcode(&raw, &target)
        });
        assert_eq!(on_a.as_ref().as_ref().unwrap(), &fresh);
        store_a.flush();

        let on_b = Transcodes::sealed(&b, Some(&cred_1)).get_or_compute(k, "scope-1", || {
            panic!("B decoded an image A had transcoded")
        });
        assert_eq!(on_b.as_ref().as_ref().unwrap(), &fresh, "the same bytes");
        assert_eq!(b.stats().shared_hits, 1);
        // What /metrics shows (cachekeeper_shared_transcodes_total{result}).
        let shared = |c: &TranscodeCache, result: &str| {
            c.shared_counts()
                .get_or_create(&[("result", result.to_owned())])
                .get()
        };
        assert_eq!(
            (shared(&a, SHARED_WRITTEN), shared(&a, SHARED_READ)),
            (1, 0)
        );
        assert_eq!(
            (shared(&b, SHARED_WRITTEN), shared(&b, SHARED_READ)),
            (0, 1)
        );
        // Now in B's own cache: no second read.
        Transcodes::sealed(&b, Some(&cred_1)).get_or_compute(k, "scope-1", || panic!("read"));
        assert_eq!((b.stats().hits, b.stats().shared_hits), (1, 1));

        // Stored sealed, with the retention as TTL.
        let rk = record_key("scope-1", &k);
        let mut raw_conn = server.raw();
        let stored: Vec<u8> = ::redis::cmd("GET")
            .arg(codec::record_key(&rk))
            .query(&mut raw_conn)
            .unwrap();
        let needle = &fresh.b64.as_bytes()[..64];
        assert!(!stored.windows(needle.len()).any(|w| w == needle));
        let ttl: i64 = ::redis::cmd("TTL")
            .arg(codec::record_key(&rk))
            .query(&mut raw_conn)
            .unwrap();
        assert!(ttl > 29 * 86_400 && ttl <= 30 * 86_400, "{ttl}");

        // Another credential has another scope, so another key: nothing found, it decodes.
        let c = TranscodeCache::shared(64 << 20, store_b.clone());
        let k2 = key("scope-2", &target, &raw);
        let mut decoded = false;
        Transcodes::sealed(&c, Some(&cred_2)).get_or_compute(k2, "scope-2", || {
            decoded = true;
            crate::images::codec::transcode(&raw, &target)
        });
        assert!(decoded && c.stats().shared_hits == 0);
        // Even under the first credential's scope and key, its key does not open A's record.
        let d = TranscodeCache::shared(64 << 20, store_b.clone());
        let mut decoded = false;
        Transcodes::sealed(&d, Some(&cred_2)).get_or_compute(k, "scope-1", || {
            decoded = true;
            crate::images::codec::transcode(&raw, &target)
        });
        assert!(decoded && d.stats().shared_hits == 0);
        store_b.flush();

        // Sharing off, or no credential: nothing more is written.
        let count = |conn: &mut ::redis::Connection| -> usize {
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg("ck:v1:transcode:*")
                .query(conn)
                .unwrap();
            keys.len()
        };
        let before = count(&mut raw_conn);
        let off = TranscodeCache::new(64 << 20);
        let raw_3 = noisy_png_b64(700, 500);
        let k3 = key("scope-1", &target, &raw_3);
        Transcodes::sealed(&off, Some(&cred_1)).get_or_compute(k3, "scope-1", || {
            crate::images::codec::transcode(&raw_3, &target)
        });
        let anonymous = TranscodeCache::shared(64 << 20, store_a.clone());
        let k4 = key("", &target, &raw_3);
        Transcodes::sealed(&anonymous, None)
            .get_or_compute(k4, "", || crate::images::codec::transcode(&raw_3, &target));
        store_a.flush();
        assert_eq!(count(&mut raw_conn), before);
    }

    #[test]
    fn a_shared_payload_round_trips_and_anything_else_is_a_miss() {
        let t = Transcoded {
            format: Format::Png,
            b64: "iVBORw0KGgo=".into(),
            from: (2000, 1000),
            to: (1000, 500),
        };
        let plain = encode_shared(&t).unwrap();
        assert_eq!(decode_shared(&plain), Some(t.clone()));
        assert_eq!(
            decode_shared(b"{\"format\":\"gif\",\"from\":[1,1],\"to\":[1,1],\"b64\":\"\"}"),
            None
        );
        assert_eq!(decode_shared(b"not json"), None);
        assert!(encode_shared(&Transcoded {
            format: Format::Gif,
            ..t
        })
        .is_none());
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
